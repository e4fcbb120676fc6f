package sharding

import (
	"fmt"
	"reflect"
	"testing"
)

func TestJavaHashCodeMatchesTheJVM(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int32
	}{
		{"javaSimpleJob", -694093655},
		{"test_job_simple", 1444296257},
		{"foo_job", -680622908},
		{"日志任务", 801324312},
		{"polygenelubricants", -2147483648},
		{"", 0},
		{"😀", 1772899}, // a surrogate pair: two UTF-16 units, 0xD83D*31 + 0xDE00
	} {
		if got := JavaHashCode(tc.in); got != tc.want {
			t.Errorf("JavaHashCode(%q) = %d; want %d", tc.in, got, tc.want)
		}
	}
}

// instances names the result positions 1…n, as the SPEC's examples do.
func named(result [][]int) string {
	s := ""
	for i, items := range result {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%d=%v", i+1, items)
	}
	return s
}

func TestShard(t *testing.T) {
	tests := []struct {
		name     string
		strategy string
		n        int
		job      string
		total    int
		want     string
	}{
		{"average, 3 instances, 9 items", AvgAllocation, 3, "any", 9, "1=[0 1 2] 2=[3 4 5] 3=[6 7 8]"},
		{"average, 3 instances, 8 items", AvgAllocation, 3, "any", 8, "1=[0 1 6] 2=[2 3 7] 3=[4 5]"},
		{"average, 3 instances, 10 items", AvgAllocation, 3, "any", 10, "1=[0 1 2 9] 2=[3 4 5] 3=[6 7 8]"},
		{"average, one instance takes all", AvgAllocation, 1, "any", 4, "1=[0 1 2 3]"},
		{"average, more instances than items", AvgAllocation, 4, "any", 2, "1=[0] 2=[1] 3=[] 4=[]"},
		{"average, no items", AvgAllocation, 2, "any", 0, "1=[] 2=[]"},
		{"odevity, odd hash keeps the order", Odevity, 3, "javaSimpleJob", 2, "1=[0] 2=[1] 3=[]"},
		{"odevity, even hash reverses the order", Odevity, 3, "foo_job", 2, "1=[] 2=[1] 3=[0]"},
		{"odevity, even hash of a CJK name", Odevity, 3, "日志任务", 2, "1=[] 2=[1] 3=[0]"},
		{"round robin, offset 2 for javaSimpleJob", RoundRobin, 3, "javaSimpleJob", 9, "1=[3 4 5] 2=[6 7 8] 3=[0 1 2]"},
		{"round robin, offset 2 for test_job_simple", RoundRobin, 3, "test_job_simple", 9, "1=[3 4 5] 2=[6 7 8] 3=[0 1 2]"},
		{"round robin, offset 0 for 日志任务", RoundRobin, 3, "日志任务", 9, "1=[0 1 2] 2=[3 4 5] 3=[6 7 8]"},
		{"round robin, most negative hash does not panic", RoundRobin, 3, "polygenelubricants", 3, "1=[1] 2=[2] 3=[0]"},
		{"round robin, one instance", RoundRobin, 1, "foo_job", 2, "1=[0 1]"},
		{"round robin, more instances than items (offset 1444296257 mod 5 = 2)", RoundRobin, 5, "test_job_simple", 2, "1=[] 2=[] 3=[0] 4=[1] 5=[]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Shard(tc.strategy, tc.n, tc.job, tc.total)
			if err != nil {
				t.Fatal(err)
			}
			if named(got) != tc.want {
				t.Fatalf("Shard(%s, %d, %q, %d) = %s; want %s", tc.strategy, tc.n, tc.job, tc.total, named(got), tc.want)
			}
		})
	}
}

// The SPEC's ROUND_ROBIN example states the rotation itself: [1,2,3] with offset 1 is [2,3,1].
func TestRoundRobinRotatesInstancesLeft(t *testing.T) {
	name := ""
	for _, cand := range []string{"a", "c", "d", "e", "f", "g"} {
		if int64(JavaHashCode(cand))%3 == 1 {
			name = cand
			break
		}
	}
	if name == "" {
		t.Fatal("no single-letter name with offset 1")
	}
	if got := roundRobin(3, name); !reflect.DeepEqual(got, []int{1, 2, 0}) {
		t.Fatalf("roundRobin(3, %q) = %v; want [1 2 0] (instances 2,3,1)", name, got)
	}
	got, _ := Shard(RoundRobin, 3, name, 9)
	if want := "1=[6 7 8] 2=[0 1 2] 3=[3 4 5]"; named(got) != want {
		t.Fatalf("Shard(ROUND_ROBIN, 3, %q, 9) = %s; want %s (2=[0,1,2] 3=[3,4,5] 1=[6,7,8])", name, named(got), want)
	}
}

func TestShardEdges(t *testing.T) {
	for _, s := range []string{AvgAllocation, Odevity, RoundRobin} {
		got, err := Shard(s, 0, "job", 5)
		if err != nil || len(got) != 0 {
			t.Errorf("Shard(%s, 0 instances) = %v, %v; want empty", s, got, err)
		}
		got, err = Shard(s, 7, "polygenelubricants", 100)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, items := range got {
			for _, it := range items {
				if seen[it] {
					t.Fatalf("Shard(%s) gave item %d twice: %v", s, it, got)
				}
				seen[it] = true
			}
		}
		if len(seen) != 100 {
			t.Fatalf("Shard(%s) assigned %d of 100 items", s, len(seen))
		}
	}
	if _, err := Shard("HASH", 3, "job", 3); err == nil {
		t.Fatal("an unknown strategy must be an error")
	}
}
