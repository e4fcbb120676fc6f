package state

import (
	"context"
	"testing"
)

// A term's model stops being told of watch events when the term ends, but a term that ends
// after the next one (in the same process) loaded its model must leave the next one's watcher
// in place: cleared, the next term's model would never again see what others change.
func TestAnEndedTermsFollowLeavesTheNextTermsWatcher(t *testing.T) {
	t.Parallel()
	s := &Store{shared: &shared{}, mv: &mirrorView{m: &mirror{}}}
	follow := func(wf *watchFunc, between func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.follow(ctx, wf, make(chan string), &dropped{wake: make(chan struct{}, 1)}, nil)
		}()
		between()
		cancel()
		<-done
	}
	old, next := &watchFunc{}, &watchFunc{}
	s.watchers.Store(old)
	follow(old, func() { s.watchers.Store(next) }) // the next term's model loads before the old follow ends
	if w := s.watchers.Load(); w != next {
		t.Fatalf("watcher %p after the old term's follow ended; want the next term's %p", w, next)
	}
	follow(next, func() {})
	if w := s.watchers.Load(); w != nil {
		t.Fatalf("watcher %p after the last term ended; want none", w)
	}
}
