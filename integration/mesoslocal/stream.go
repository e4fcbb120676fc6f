package mesoslocal

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

const (
	mediaJSON     = "application/json"
	mediaProtobuf = "application/x-protobuf"
)

// message is what both codecs can encode and decode: every mesos-go type is one.
type message interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

func encode(media string, m message) ([]byte, error) {
	if media == mediaProtobuf {
		return m.Marshal()
	}
	return json.Marshal(m)
}

func decode(media string, body []byte, m message) error {
	if media == mediaProtobuf {
		return m.Unmarshal(body)
	}
	return json.Unmarshal(body, m)
}

// negotiate picks the response type of a streaming call from Accept: a missing Accept means
// anything (JSON); JSON is preferred when both are acceptable. "" means 406.
func negotiate(accept string) string {
	if accept == "" {
		return mediaJSON
	}
	ok := map[string]bool{}
	for _, part := range strings.Split(accept, ",") {
		mt, _, _ := strings.Cut(part, ";")
		ok[strings.TrimSpace(mt)] = true
	}
	switch {
	case ok[mediaJSON] || ok["*/*"] || ok["application/*"]:
		return mediaJSON
	case ok[mediaProtobuf]:
		return mediaProtobuf
	}
	return ""
}

// stream is one subscription's RecordIO event stream. Events are encoded and queued under the
// cluster lock (never blocking it); serve writes them to the connection, one flush per event.
type stream struct {
	media string
	id    string // Mesos-Stream-Id; empty on executor streams

	mu      sync.Mutex // guards queue, closing, gate
	queue   [][]byte
	closing bool
	// gate, while set and open, holds everything back: a network partition between the
	// client and the master (Cluster.PartitionFramework) lets no byte through, not even the
	// end of the stream, until it heals (the gate closes).
	gate chan struct{}
	wake chan struct{}
	gone chan struct{} // closed when serve returns
}

func newStream(media, id string) *stream {
	return &stream{media: media, id: id, wake: make(chan struct{}, 1), gone: make(chan struct{})}
}

// send queues an event; it is dropped if the stream is closing.
func (s *stream) send(m message) {
	data, err := encode(s.media, m)
	if err != nil {
		panic(fmt.Sprintf("mesoslocal: encode event: %v", err)) // our own events always encode
	}
	s.mu.Lock()
	if !s.closing {
		s.queue = append(s.queue, data)
	}
	s.mu.Unlock()
	s.signal()
}

// close ends the stream once the queued events are written.
func (s *stream) close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.signal()
}

// abort ends the stream at once, dropping what is queued, as the connection of a master that
// dies ends: no ERROR, no last events.
func (s *stream) abort() {
	s.mu.Lock()
	s.queue, s.closing = nil, true
	s.mu.Unlock()
	s.signal()
}

// hold stops the stream's writes until gate is closed: events queue as a real master's pile up
// in a connection nobody can reach, and reach the client if it is still there at the heal, as
// TCP delivers what it retransmitted.
func (s *stream) hold(gate chan struct{}) {
	s.mu.Lock()
	s.gate = gate
	s.mu.Unlock()
	s.signal()
}

func (s *stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// serve writes the response headers at once (mesos-go waits at most 15 s for them), then
// events until the stream is closed or the client goes. It returns true if the client went.
// A stream held from its start (a SUBSCRIBE that got in just before a partition) sends its
// headers at the heal.
func (s *stream) serve(w http.ResponseWriter, r *http.Request) (clientGone bool) {
	defer close(s.gone)
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", s.media)
	if s.id != "" {
		w.Header().Set("Mesos-Stream-Id", s.id)
	}
	headers := false
	for {
		s.mu.Lock()
		if gate := s.gate; gate != nil {
			s.mu.Unlock()
			select {
			case <-gate:
				s.mu.Lock()
				if s.gate == gate {
					s.gate = nil
				}
				s.mu.Unlock()
				continue
			case <-r.Context().Done():
				return true
			}
		}
		queue, closing := s.queue, s.closing
		s.queue = nil
		s.mu.Unlock()
		if !headers {
			w.WriteHeader(http.StatusOK)
			if fl != nil {
				fl.Flush()
			}
			headers = true
		}
		for _, frame := range queue {
			if _, err := w.Write(append(strconv.AppendInt(nil, int64(len(frame)), 10), '\n')); err != nil {
				return true
			}
			if _, err := w.Write(frame); err != nil {
				return true
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if closing {
			return false
		}
		select {
		case <-s.wake:
		case <-r.Context().Done():
			return true
		}
	}
}
