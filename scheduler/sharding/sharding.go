// Package sharding holds Elastic-Job's three sharding strategies (SPEC §5.6): given N ordered
// instances (agents, or later Elastic-Job-Lite processes), a job name and a shard total T, they
// say which items each instance should run. They are pure so that the cloud scheduler's SPREAD
// placement and a later Lite mode can share them, and they reproduce Elastic-Job's results
// exactly, including its use of Java's String.hashCode.
package sharding

import (
	"fmt"
	"unicode/utf16"
)

// Strategy names, as in a job's jobShardingStrategyType.
const (
	AvgAllocation = "AVG_ALLOCATION"
	Odevity       = "ODEVITY"
	RoundRobin    = "ROUND_ROBIN"
)

// Shard assigns items 0…total-1 to n instances with the named strategy. The result has one
// slice per instance, in the order the caller gave the instances; n = 0 gives an empty result.
func Shard(strategy string, n int, jobName string, total int) ([][]int, error) {
	var order []int
	switch strategy {
	case AvgAllocation:
		order = identity(n)
	case Odevity:
		order = odevity(n, jobName)
	case RoundRobin:
		order = roundRobin(n, jobName)
	default:
		return nil, fmt.Errorf("sharding: unknown strategy %q", strategy)
	}
	out := make([][]int, n)
	for pos, items := range avgAllocation(n, total) {
		out[order[pos]] = items
	}
	return out, nil
}

// avgAllocation gives each of n positions total/n consecutive items, then the remaining
// total mod n items one each to the first positions.
func avgAllocation(n, total int) [][]int {
	out := make([][]int, n)
	if n == 0 {
		return out
	}
	per := total / n
	for i := range n {
		out[i] = make([]int, 0, per+1)
		for item := i * per; item < (i+1)*per; item++ {
			out[i] = append(out[i], item)
		}
	}
	for i, item := 0, per*n; item < total; i, item = i+1, item+1 {
		out[i] = append(out[i], item)
	}
	return out
}

func identity(n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	return order
}

// odevity reverses the instance order when the job name's hash is even.
func odevity(n int, jobName string) []int {
	order := identity(n)
	if JavaHashCode(jobName)%2 == 0 {
		for i, j := 0, n-1; i < j; i, j = i+1, j-1 {
			order[i], order[j] = order[j], order[i]
		}
	}
	return order
}

// roundRobin rotates the instance order left by abs(hash) mod n, as Elastic-Job's
// RotateServerByNameJobShardingStrategy does. The absolute value is taken in 64 bits: Java's
// Math.abs(Integer.MIN_VALUE) stays negative, and the original code then indexed out of range.
func roundRobin(n int, jobName string) []int {
	order := make([]int, n)
	if n == 0 {
		return order
	}
	h := int64(JavaHashCode(jobName))
	if h < 0 {
		h = -h
	}
	offset := int(h % int64(n))
	for i := range order {
		order[i] = (i + offset) % n
	}
	return order
}

// JavaHashCode is Java's String.hashCode: s[0]*31^(k-1) + … + s[k-1] over the UTF-16 code
// units of s, in 32-bit two's complement arithmetic.
func JavaHashCode(s string) int32 {
	var h int32
	for _, u := range utf16.Encode([]rune(s)) {
		h = 31*h + int32(u)
	}
	return h
}
