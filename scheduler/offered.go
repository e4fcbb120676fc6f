package scheduler

import (
	"math"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
)

// offered is the cpus and mem that one agent's offers hold, entry by entry, for a launch to
// take its tasks' and new executors' resources from. An agent's offers can hold several
// entries of one resource — reserved for the framework's role and unreserved, or freed
// resources offered apart — and the packer sizes the tasks against their sum, so a task takes
// from each entry in turn, and each part it names keeps its entry's role, reservation and
// allocation info: Mesos refuses a task that names more of an entry than the offers hold.
type offered struct{ entries []mesos.Resource }

func offeredBy(offers []mesos.Offer) *offered {
	o := &offered{}
	for _, of := range offers {
		for _, r := range of.Resources {
			if (r.Name == "cpus" || r.Name == "mem") && r.Scalar != nil {
				o.entries = append(o.entries, mesos.Resources{r}.Clone()[0])
			}
		}
	}
	return o
}

// take returns resources for cpus and mem, taken from the entries in offer order. What the
// entries cannot hold (the packer never asks for it) is named like the first entry of its
// kind, as if it came from there, and Mesos will say what is wrong with it.
func (o *offered) take(cpus, mem float64) []mesos.Resource {
	var out mesos.Resources
	for _, want := range [...]struct {
		name   string
		amount float64
	}{{"cpus", cpus}, {"mem", mem}} {
		left := milli(want.amount)
		shape := mesos.Resource{Name: want.name, Type: mesos.SCALAR.Enum(), Role: ptr("*")}
		first := true
		for i := range o.entries {
			e := &o.entries[i]
			if e.Name != want.name {
				continue
			}
			if first {
				shape, first = mesos.Resources{*e}.Clone()[0], false
			}
			if left <= 0 || e.Scalar.Value <= 0 {
				continue
			}
			n := min(e.Scalar.Value, left)
			part := mesos.Resources{*e}.Clone()[0]
			part.Scalar = &mesos.Value_Scalar{Value: n}
			out.Add(part)
			e.Scalar.Value = milli(e.Scalar.Value - n)
			left = milli(left - n)
		}
		if left > 0 {
			shape.Scalar = &mesos.Value_Scalar{Value: left}
			out.Add(shape)
		}
	}
	for i := range out { // parts of one entry kind merged: no float dust either
		out[i].Scalar.Value = milli(out[i].Scalar.Value)
	}
	return out
}

// milli rounds to Mesos's precision for scalar resources (three decimal places), so that
// taking a task's share leaves no float dust behind.
func milli(v float64) float64 { return math.Round(v*1000) / 1000 }
