package scheduler

import (
	"testing"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
)

func scalar(name string, v float64, role string, reserved bool) mesos.Resource {
	r := mesos.Resource{Name: name, Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: v}, Role: ptr(role)}
	if reserved {
		r.Reservation = &mesos.Resource_ReservationInfo{Principal: ptr("ops")}
	}
	return r
}

// A launch takes each task's and new executor's resources from the agent's offer entries in
// turn: a task sized against the sum of a reserved and an unreserved entry names a part of
// each, with its own role and reservation, and never more of an entry than it holds.
func TestResourcesAreTakenFromTheOfferedEntries(t *testing.T) {
	t.Parallel()
	offers := []mesos.Offer{
		{Resources: []mesos.Resource{scalar("cpus", 1, "jobs", true), scalar("cpus", 7, "*", false), scalar("mem", 4096, "*", false),
			{Name: "ports", Type: mesos.RANGES.Enum(), Ranges: &mesos.Value_Ranges{Range: []mesos.Value_Range{{Begin: 31000, End: 32000}}}}}},
		{Resources: []mesos.Resource{scalar("cpus", 0.3, "*", false), scalar("mem", 1024, "*", false)}}, // freed, offered apart
	}
	pool := offeredBy(offers)
	for _, step := range []struct {
		name      string
		cpus, mem float64
		want      mesos.Resources
	}{
		{"the reserved entry first, then the unreserved", 1.5, 512,
			mesos.Resources{scalar("cpus", 1, "jobs", true), scalar("cpus", 0.5, "*", false), scalar("mem", 512, "*", false)}},
		{"what is left of the unreserved entries, merged", 6.8, 4608,
			mesos.Resources{scalar("cpus", 6.8, "*", false), scalar("mem", 4608, "*", false)}},
		{"beyond the offers (the packer never asks)", 0.1, 1,
			mesos.Resources{scalar("cpus", 0.1, "jobs", true), scalar("mem", 1, "*", false)}},
	} {
		got := mesos.Resources(pool.take(step.cpus, step.mem))
		if got.String() != step.want.String() {
			t.Fatalf("%s: took %v; want %v", step.name, got, step.want)
		}
	}
	if left := mesos.Resources(pool.take(0, 0)); len(left) != 0 {
		t.Fatalf("taking nothing named %v", left)
	}
}
