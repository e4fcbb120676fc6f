package state

import "testing"

// A batch's reply, at twice the nodes' data size, stays within the budget, and the batches of
// a directory are even.
func TestBatchSizeKeepsTheReplyWithinTheBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		count int
		data  int64
		want  int
	}{
		{count: 100_000, data: 464, want: 259},      // job configs: 387 batches
		{count: 100_000, data: dataGuess, want: 62}, // before any is read
		{count: 10, data: 464, want: 10},
		{count: 5_000, data: minDataGuess, want: 715}, // ready entries: 7 batches
		{count: 3, data: 600_000, want: 1},            // larger than the budget: one at a time
		{count: 2_000, data: 0, want: 1_000},          // empty nodes: batchMaxOps
	} {
		got := batchSize(tc.count, tc.data)
		if got != tc.want {
			t.Errorf("batchSize(%d, %d) = %d; want %d", tc.count, tc.data, got, tc.want)
		}
		if got > 1 && int64(got)*(2*tc.data+opReplyOverhead) > batchReplyBudget {
			t.Errorf("batchSize(%d, %d) = %d plans a reply over the budget", tc.count, tc.data, got)
		}
	}
}
