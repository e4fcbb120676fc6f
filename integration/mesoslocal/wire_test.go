package mesoslocal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding/framing"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/recordio"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
)

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// rawPost sends a call as raw HTTP, without following redirects.
func rawPost(t *testing.T, url, contentType, accept, streamID string, body []byte) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if streamID != "" {
		req.Header.Set("Mesos-Stream-Id", streamID)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	if resp.StatusCode == http.StatusOK && resp.ContentLength == -1 {
		return resp, "" // a stream: the caller reads it
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func jsonCall(t *testing.T, c *scheduler.Call) []byte {
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawSubscribe opens a subscription with raw HTTP and returns the response and its frame reader.
func rawSubscribe(t *testing.T, c *mesoslocal.Cluster, info *mesos.FrameworkInfo) (*http.Response, framing.Reader) {
	t.Helper()
	resp, _ := rawPost(t, c.URL()+"/api/v1/scheduler", "application/json", "application/json", "", jsonCall(t, calls.Subscribe(info)))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("SUBSCRIBE: %d", resp.StatusCode)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, recordio.NewReader(resp.Body)
}

func readEvent(t *testing.T, r framing.Reader, media string) scheduler.Event {
	t.Helper()
	frame, err := r.ReadFrame()
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	var ev scheduler.Event
	if media == "application/x-protobuf" {
		err = ev.Unmarshal(frame)
	} else {
		err = json.Unmarshal(frame, &ev)
	}
	if err != nil {
		t.Fatalf("decode frame %q: %v", frame, err)
	}
	return ev
}

// Item 2: status codes in the order of MESOS.md §1.2.
func TestSchedulerStatusCodes(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	url := c.URL() + "/api/v1/scheduler"
	resp, r := rawSubscribe(t, c, paInfo())
	streamID := resp.Header.Get("Mesos-Stream-Id")
	sub := readEvent(t, r, "application/json")
	fwID := sub.Subscribed.FrameworkID.Value
	decline := jsonCall(t, calls.Decline(mesos.OfferID{Value: "x"}).With(calls.Framework(fwID)))
	unknownFw := jsonCall(t, calls.Decline(mesos.OfferID{Value: "x"}).With(calls.Framework("nope-0000")))

	get, _ := http.Get(url)
	get.Body.Close()
	if get.StatusCode != http.StatusMethodNotAllowed || get.Header.Get("Allow") != "POST" {
		t.Fatalf("GET: %d Allow %q; want 405 Allow POST", get.StatusCode, get.Header.Get("Allow"))
	}
	tests := []struct {
		name                string
		contentType, accept string
		streamID            string
		body                []byte
		want                int
	}{
		{"no Content-Type", "", "", streamID, decline, 400},
		{"unsupported Content-Type", "text/plain", "", streamID, decline, 415},
		{"Content-Type with a charset is not exact", "application/json; charset=utf-8", "", streamID, decline, 415},
		{"unparsable body", "application/json", "", streamID, []byte("{"), 400},
		{"call without framework_id", "application/json", "", streamID, jsonCall(t, calls.Decline(mesos.OfferID{Value: "x"})), 400},
		{"ACKNOWLEDGE with a short uuid", "application/json", "", streamID, jsonCall(t, calls.Acknowledge("a", "t", []byte("short")).With(calls.Framework(fwID))), 400},
		{"SUBSCRIBE accepting neither codec", "application/json", "text/html", "", jsonCall(t, calls.Subscribe(paInfo())), 406},
		{"SUBSCRIBE carrying a stream id", "application/json", "", streamID, jsonCall(t, calls.Subscribe(paInfo())), 400},
		{"SUBSCRIBE with differing framework ids", "application/json", "", "", jsonCall(t, calls.Subscribe(paInfo()).With(calls.Framework("x-0000"))), 400},
		{"unknown framework", "application/json", "", streamID, unknownFw, 400},
		{"missing stream id", "application/json", "", "", decline, 400},
		{"stale stream id", "application/json", "", "3e5c0a7e-0000-0000-0000-000000000000", decline, 400},
		{"UNKNOWN call", "application/json", "", streamID, []byte(`{"type":"UNKNOWN","framework_id":{"value":"` + fwID + `"}}`), 501},
		{"valid DECLINE", "application/json", "", streamID, decline, 202},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawPost(t, url, tc.contentType, tc.accept, tc.streamID, tc.body)
			if resp.StatusCode != tc.want {
				t.Fatalf("%s: %d %q; want %d", tc.name, resp.StatusCode, body, tc.want)
			}
			if tc.want == 202 && (body != "" || resp.Header.Get("Content-Type") != "") {
				t.Fatalf("202 must have an empty body and no Content-Type, got %q %q", body, resp.Header.Get("Content-Type"))
			}
		})
	}
	// Known but disconnected: 403, checked before the stream id.
	resp.Body.Close()
	deadline := time.Now().Add(wait)
	for {
		r, body := rawPost(t, url, "application/json", "", streamID, decline)
		if r.StatusCode == http.StatusForbidden {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("disconnected framework: %d %q; want 403", r.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Item 3: the SUBSCRIBE response's headers.
func TestSubscribeResponseHeaders(t *testing.T) {
	t.Parallel()
	forEachCodec(t, func(t *testing.T, media string) {
		c := newCluster(t)
		body := jsonCall(t, calls.Subscribe(paInfo()))
		if media == "application/x-protobuf" {
			body, _ = calls.Subscribe(paInfo()).Marshal()
		}
		resp, _ := rawPost(t, c.URL()+"/api/v1/scheduler", media, media, "", body)
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != media || resp.ContentLength != -1 ||
			len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
			t.Fatalf("SUBSCRIBE: %d %q len %d te %v; want 200, %s, no length, chunked", resp.StatusCode,
				resp.Header.Get("Content-Type"), resp.ContentLength, resp.TransferEncoding, media)
		}
		if id := resp.Header.Get("Mesos-Stream-Id"); len(id) == 0 || len(id) > 128 {
			t.Fatalf("Mesos-Stream-Id %q", id)
		}
		if ev := readEvent(t, recordio.NewReader(resp.Body), media); ev.Type != scheduler.Event_SUBSCRIBED {
			t.Fatalf("first event %v", ev.Type)
		}
	})
}

// chopper hands out at most 7 bytes per Read, as an arbitrarily re-chunking proxy would.
type chopper struct {
	r   io.Reader
	rnd *rand.Rand
}

func (c chopper) Read(p []byte) (int, error) {
	n := 1 + c.rnd.Intn(7)
	if n > len(p) {
		n = len(p)
	}
	return c.r.Read(p[:n])
}

// Item 4: RecordIO framing decodes whatever the chunking.
func TestRecordIOSurvivesRechunking(t *testing.T) {
	t.Parallel()
	forEachCodec(t, func(t *testing.T, media string) {
		c := newCluster(t)
		body := jsonCall(t, calls.Subscribe(paInfo()))
		if media == "application/x-protobuf" {
			body, _ = calls.Subscribe(paInfo()).Marshal()
		}
		resp, _ := rawPost(t, c.URL()+"/api/v1/scheduler", media, media, "", body)
		defer resp.Body.Close()
		r := recordio.NewReader(chopper{resp.Body, rand.New(rand.NewSource(1))})
		want := []scheduler.Event_Type{scheduler.Event_SUBSCRIBED, scheduler.Event_HEARTBEAT, scheduler.Event_OFFERS}
		for _, w := range want {
			if ev := readEvent(t, r, media); ev.Type != w {
				t.Fatalf("event %v; want %v", ev.Type, w)
			}
		}
	})
}

// Item 5: SUBSCRIBED (with the interval), then HEARTBEAT at once, then one per interval.
func TestSubscribedThenHeartbeats(t *testing.T) {
	t.Parallel()
	clock := mesoslocal.NewManualClock(time.Unix(1_800_000_000, 0))
	c := newCluster(t, func(o *mesoslocal.Options) { o.Clock = clock; o.HeartbeatInterval = 200 * time.Millisecond })
	_, r := rawSubscribe(t, c, paInfo())
	sub := readEvent(t, r, "application/json")
	if sub.Type != scheduler.Event_SUBSCRIBED || sub.Subscribed.GetHeartbeatIntervalSeconds() != 0.2 || sub.Subscribed.MasterInfo == nil {
		t.Fatalf("first event %v; want SUBSCRIBED with heartbeat_interval_seconds 0.2 and master_info", sub.String())
	}
	if ev := readEvent(t, r, "application/json"); ev.Type != scheduler.Event_HEARTBEAT {
		t.Fatalf("second event %v; want HEARTBEAT", ev.Type)
	}
	if ev := readEvent(t, r, "application/json"); ev.Type != scheduler.Event_OFFERS {
		t.Fatalf("third event %v; want OFFERS", ev.Type)
	}
	for i := 0; i < 3; i++ {
		clock.Advance(200 * time.Millisecond)
		if ev := readEvent(t, r, "application/json"); ev.Type != scheduler.Event_HEARTBEAT {
			t.Fatalf("after one interval: %v; want HEARTBEAT", ev.Type)
		}
	}
}

// Item 6: asynchronous calls are 202 (mesos-go returns nil); UPDATE_FRAMEWORK is 200 with no
// Content-Type, which mesos-go reports as a protocol error although the update was applied.
func TestCallAnswers(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	if err := s.Call(calls.Decline(o.ID)); err != nil {
		t.Fatalf("DECLINE through mesos-go: %v; want nil", err)
	}
	info := *paInfo()
	info.ID = &mesos.FrameworkID{Value: s.FrameworkID}
	info.Name = "renamed"
	err := s.Call(calls.UpdateFramework(info))
	if _, ok := err.(httpcli.ProtocolError); !ok || !strings.Contains(err.Error(), "content type") {
		t.Fatalf("UPDATE_FRAMEWORK through mesos-go: %v; want the content-type ProtocolError real Mesos causes", err)
	}
	fws := masterState(t, c)["frameworks"].([]any)
	if name := fws[0].(map[string]any)["name"]; name != "renamed" {
		t.Fatalf("framework name after UPDATE_FRAMEWORK = %v; want renamed", name)
	}
}

// Item 7: refused subscriptions are 200 + ERROR + close.
func TestRefusedSubscriptions(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	torn := subscribe(t, c.URL(), codec, paInfo())
	torn.MustCall(&scheduler.Call{Type: scheduler.Call_TEARDOWN})
	principal := paInfo()
	principal.Principal = ptrTo("p1")
	p := subscribe(t, c.URL(), codec, principal)

	tests := []struct {
		name string
		info func() *mesos.FrameworkInfo
		want string
	}{
		{"removed framework id", func() *mesos.FrameworkInfo {
			i := paInfo()
			i.ID = &mesos.FrameworkID{Value: torn.FrameworkID}
			return i
		}, "Framework has been removed"},
		{"roles without MULTI_ROLE", func() *mesos.FrameworkInfo { i := paInfo(); i.Roles = []string{"a"}; return i }, "roles"},
		{"role with MULTI_ROLE", func() *mesos.FrameworkInfo {
			i := frameworkInfo(mesos.FrameworkInfo_Capability_MULTI_ROLE)
			i.Role = ptrTo("a")
			return i
		}, "role"},
		{"principal change", func() *mesos.FrameworkInfo {
			i := paInfo()
			i.ID = &mesos.FrameworkID{Value: p.FrameworkID}
			i.Principal = ptrTo("p2")
			return i
		}, "principal"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, first := trySubscribe(t, c.URL(), codec, tc.info())
			if first.Type != scheduler.Event_ERROR || !strings.Contains(first.Error.Message, tc.want) {
				t.Fatalf("first event %v; want ERROR mentioning %q", first.String(), tc.want)
			}
			select {
			case <-s.Closed():
			case <-time.After(wait):
				t.Fatal("the stream stayed open after ERROR")
			}
		})
	}
	t.Run("suppressed role not among the roles", func(t *testing.T) {
		info := paInfo()
		call := calls.Subscribe(info)
		call.Subscribe.SuppressedRoles = []string{"other"}
		resp, _ := rawPost(t, c.URL()+"/api/v1/scheduler", "application/json", "", "", jsonCall(t, call))
		defer resp.Body.Close()
		ev := readEvent(t, recordio.NewReader(resp.Body), "application/json")
		if resp.StatusCode != 200 || ev.Type != scheduler.Event_ERROR {
			t.Fatalf("%d %v; want 200 and ERROR", resp.StatusCode, ev.String())
		}
	})
}

// Item 8: a framework pointed at a non-leading master is redirected and subscribes.
func TestStandbyMasterRedirects(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(o *mesoslocal.Options) { o.StandbyAddr = "127.0.0.1:0" })
	resp, _ := rawPost(t, c.StandbyURL()+"/api/v1/scheduler", "application/json", "", "", jsonCall(t, calls.Subscribe(paInfo())))
	if resp.StatusCode != http.StatusTemporaryRedirect || !strings.HasPrefix(resp.Header.Get("Location"), "//") {
		t.Fatalf("standby: %d Location %q; want 307 with a protocol-relative Location", resp.StatusCode, resp.Header.Get("Location"))
	}
	s := subscribe(t, c.StandbyURL(), codec, paInfo())
	if len(s.Offers()) == 0 {
		t.Fatal("no offers after subscribing through the standby")
	}
	_ = context.Background
}

// Master::Http::scheduler validates a call (validation::scheduler::call::validate) before it
// looks for the framework or the stream id, and the first check after parsing is that 'type' is
// present: 400 "Failed to validate scheduler::Call: Expecting 'type' to be present", as text. A
// JSON type of null is no type (stout's protobuf parser). Only a call that names type UNKNOWN,
// which protobuf can carry as a present 0, gets as far as the 501 "501 Not Implemented.".
func TestSchedulerCallWithoutType(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	url := c.URL() + "/api/v1/scheduler"
	resp, r := rawSubscribe(t, c, paInfo())
	streamID := resp.Header.Get("Mesos-Stream-Id")
	fwID := readEvent(t, r, "application/json").Subscribed.FrameworkID.Value
	id, err := (&mesos.FrameworkID{Value: fwID}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	protoNoType := append([]byte{1<<3 | 2, byte(len(id))}, id...)       // framework_id (field 1) only
	protoUnknown := append(append([]byte{}, protoNoType...), 2<<3|0, 0) // and type (field 2) = UNKNOWN
	const noType = "Failed to validate scheduler::Call: Expecting 'type' to be present"
	tests := []struct {
		name, contentType string
		body              []byte
		want              int
		wantBody          string
	}{
		{"JSON without type", "application/json", []byte(`{"framework_id":{"value":"` + fwID + `"}}`), 400, noType},
		{"JSON with a null type", "application/json", []byte(`{"type":null,"framework_id":{"value":"` + fwID + `"}}`), 400, noType},
		{"JSON without type or framework_id", "application/json", []byte(`{}`), 400, noType},
		{"JSON without type, of an unknown framework", "application/json", []byte(`{"framework_id":{"value":"nope-0000"}}`), 400, noType},
		{"protobuf without type", "application/x-protobuf", protoNoType, 400, noType},
		{"protobuf with type UNKNOWN", "application/x-protobuf", protoUnknown, 501, "501 Not Implemented."},
		{"JSON with type UNKNOWN", "application/json", []byte(`{"type":"UNKNOWN","framework_id":{"value":"` + fwID + `"}}`), 501, "501 Not Implemented."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawPost(t, url, tc.contentType, "", streamID, tc.body)
			if resp.StatusCode != tc.want || body != tc.wantBody || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Fatalf("%d %q (Content-Type %q); want %d %q as text/plain; charset=utf-8",
					resp.StatusCode, body, resp.Header.Get("Content-Type"), tc.want, tc.wantBody)
			}
		})
	}
}
