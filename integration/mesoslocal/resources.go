package mesoslocal

import (
	"sort"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/resources"
)

// Resources are kept internally in Mesos's "pre-refinement" unallocated form: unreserved
// resources carry role "*" and no allocation info. Offers add allocation info for MULTI_ROLE
// frameworks; resources coming from frameworks are normalised back.

func buildResources(scalars map[string]float64, ports [][2]uint64) mesos.Resources {
	names := make([]string, 0, len(scalars))
	for n := range scalars {
		names = append(names, n)
	}
	sort.Strings(names)
	var out mesos.Resources
	for _, n := range names {
		out.Add1(mesos.Resource{Name: n, Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: scalars[n]}, Role: ptr("*")})
	}
	if len(ports) > 0 {
		var rs mesos.Ranges
		for _, p := range ports {
			rs = append(rs, mesos.Value_Range{Begin: p[0], End: p[1]})
		}
		out.Add1(mesos.Resource{Name: "ports", Type: mesos.RANGES.Enum(), Ranges: &mesos.Value_Ranges{Range: rs}, Role: ptr("*")})
	}
	return out
}

// normalise strips allocation info and gives unreserved resources role "*".
func normalise(rs []mesos.Resource) mesos.Resources {
	out := make(mesos.Resources, 0, len(rs))
	for _, r := range rs {
		r := *proto(r)
		r.AllocationInfo = nil
		if r.Role == nil && len(r.Reservations) == 0 {
			r.Role = ptr("*")
		}
		out = append(out, r)
	}
	return out
}

func proto(r mesos.Resource) *mesos.Resource {
	rs := mesos.Resources{r}.Clone()
	return &rs[0]
}

// allocated returns rs as offered to a framework: with allocation info for MULTI_ROLE ones.
func allocated(rs mesos.Resources, role string, multiRole bool) []mesos.Resource {
	out := rs.Clone()
	if multiRole {
		for i := range out {
			out[i].AllocationInfo = &mesos.Resource_AllocationInfo{Role: ptr(role)}
		}
	}
	return out
}

// validResources reports the first invalid resource of rs.
func validResources(rs []mesos.Resource) error {
	for i := range rs {
		if err := rs[i].Validate(); err != nil {
			return err
		}
	}
	return nil
}

// contains reports whether have ⊇ want.
func contains(have, want mesos.Resources) bool {
	return resources.ContainsAll(have, want)
}

// allocatable is Mesos's --min_allocatable_resources default: 0.01 cpus or 32 MB of memory.
func allocatable(rs mesos.Resources) bool {
	cpus, _ := resources.CPUs(rs...)
	mem, _ := resources.Memory(rs...)
	return cpus >= 0.01 || mem >= 32
}
