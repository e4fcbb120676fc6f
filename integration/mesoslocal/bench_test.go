package mesoslocal_test

import (
	"fmt"
	"sort"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
)

// BenchmarkOffers measures offer throughput: each round REVIVEs (clearing the filters, which
// allocates at once) and declines every offer for an hour.
func BenchmarkOffers(b *testing.B) {
	for _, agents := range []int{10, 100} {
		b.Run(fmt.Sprintf("agents=%d", agents), func(b *testing.B) {
			c := newCluster(b, func(o *mesoslocal.Options) { o.Agents = agents; o.AllocationInterval = time.Hour })
			s := subscribe(b, c.URL(), codec, paInfo())
			take := func() {
				var ids []mesos.OfferID
				for len(ids) < agents {
					for _, o := range s.Offers() {
						ids = append(ids, o.ID)
					}
				}
				s.MustCall(calls.Decline(ids...).With(calls.RefuseSeconds(time.Hour)))
			}
			take()
			start := time.Now()
			for b.Loop() {
				s.MustCall(calls.Revive())
				take()
			}
			b.ReportMetric(float64(agents*b.N)/time.Since(start).Seconds(), "offers/s")
		})
	}
}

// BenchmarkLaunchToRunning measures the time from ACCEPT to the task's TASK_RUNNING at the
// scheduler, for a trivial executor that is already running and for one started per task.
func BenchmarkLaunchToRunning(b *testing.B) {
	for _, fresh := range []bool{false, true} {
		name := "shared-executor"
		if fresh {
			name = "new-executor"
		}
		b.Run(name, func(b *testing.B) {
			c := newCluster(b)
			s := subscribe(b, c.URL(), codec, paInfo())
			var lat []time.Duration
			i := 0
			for b.Loop() {
				o := s.Offers()[0]
				exec := "shared"
				if fresh {
					exec = fmt.Sprintf("e%d", i)
				}
				id := fmt.Sprintf("t%d", i)
				i++
				start := time.Now()
				s.Launch(o, task(id, o, testExecutor(exec, "basic"), "finish"))
				running := s.Update(id, mesos.TASK_RUNNING)
				lat = append(lat, time.Since(start))
				s.Ack(running)
				s.Ack(s.Update(id, mesos.TASK_FINISHED))
				if fresh {
					s.MustCall(calls.Shutdown(exec, o.AgentID.Value))
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
