package mesoslocal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
)

// schedulerAPI serves POST /api/v1/scheduler with the checks of MESOS.md §1.2, in order.
func (c *Cluster) schedulerAPI(w http.ResponseWriter, r *http.Request) {
	if c.blackHoled(r) {
		return
	}
	principal, ok := c.authenticate(w, r)
	if !ok {
		return
	}
	switch leading, leader := c.leader(); {
	case leading:
	case leader == "":
		plain(w, http.StatusServiceUnavailable, "No leader elected")
		return
	default:
		w.Header().Set("Location", "//"+leader+r.URL.Path)
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	var call scheduler.Call
	media, body := readCallBody(w, r, &call)
	if media == "" {
		return
	}
	if err := validateCall(&call, callHasType(media, body, schedulerCallType)); err != nil {
		plain(w, http.StatusBadRequest, "Failed to validate scheduler::Call: "+err.Error())
		return
	}
	if call.Type == scheduler.Call_SUBSCRIBE {
		media := negotiate(r.Header.Get("Accept"))
		if media == "" {
			plain(w, http.StatusNotAcceptable, "Expecting 'Accept' to allow application/json or application/x-protobuf")
			return
		}
		if r.Header.Get("Mesos-Stream-Id") != "" {
			plain(w, http.StatusBadRequest, "Subscribe calls should not include the 'Mesos-Stream-Id' header")
			return
		}
		if fp := call.Subscribe.FrameworkInfo.GetPrincipal(); c.opts.Credentials != nil && fp != principal {
			plain(w, http.StatusBadRequest, principalMismatch(principal, fp))
			return
		}
		c.subscribe(w, r, &call, media)
		return
	}

	c.mu.Lock()
	f := c.frameworks[call.FrameworkID.Value]
	switch {
	case f == nil:
		c.mu.Unlock()
		plain(w, http.StatusBadRequest, "Framework cannot be found")
		return
	case c.opts.Credentials != nil && f.info.GetPrincipal() != principal:
		c.mu.Unlock()
		plain(w, http.StatusBadRequest, principalMismatch(principal, f.info.GetPrincipal()))
		return
	case f.stream == nil:
		c.mu.Unlock()
		plain(w, http.StatusForbidden, "Framework is not subscribed")
		return
	}
	switch sid := r.Header.Get("Mesos-Stream-Id"); {
	case sid == "":
		c.mu.Unlock()
		plain(w, http.StatusBadRequest, "All non-subscribe calls should include the 'Mesos-Stream-Id' header")
		return
	case sid != f.stream.id:
		c.mu.Unlock()
		plain(w, http.StatusBadRequest, "The stream ID '"+sid+"' included in this request didn't match the stream ID currently associated with framework ID "+f.id)
		return
	}
	if call.Type == scheduler.Call_UNKNOWN {
		c.mu.Unlock()
		plain(w, http.StatusNotImplemented, "501 Not Implemented.") // libprocess's NotImplemented()
		return
	}
	if call.Type == scheduler.Call_UPDATE_FRAMEWORK {
		err := c.updateFramework(f, call.UpdateFramework)
		c.mu.Unlock()
		if err != nil {
			plain(w, http.StatusBadRequest, err.Error())
			return
		}
		// Real Mesos answers 200 with no body and no Content-Type (MESOS.md §1.7).
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
		return
	}
	c.dispatch(f, &call)
	c.mu.Unlock()
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
}

// dispatch applies an accepted call; the caller holds c.mu. Effects show up as events.
func (c *Cluster) dispatch(f *framework, call *scheduler.Call) {
	switch call.Type {
	case scheduler.Call_TEARDOWN:
		c.removeFramework(f, "Framework was torn down")
	case scheduler.Call_ACCEPT:
		c.accept(f, call.Accept)
	case scheduler.Call_DECLINE:
		c.decline(f, call.Decline.OfferIDs, call.Decline.Filters)
	case scheduler.Call_REVIVE:
		c.revive(f, call.Revive.Roles)
	case scheduler.Call_SUPPRESS:
		c.suppress(f, call.Suppress.Roles)
	case scheduler.Call_KILL:
		c.killTask(f, call.Kill)
	case scheduler.Call_SHUTDOWN:
		c.shutdownExecutor(f, call.Shutdown.AgentID.Value, call.Shutdown.ExecutorID.Value)
	case scheduler.Call_ACKNOWLEDGE:
		c.acknowledge(f, call.Acknowledge)
	case scheduler.Call_RECONCILE:
		c.reconcile(f, call.Reconcile.Tasks)
	case scheduler.Call_MESSAGE:
		c.messageToExecutor(f, call.Message)
	case scheduler.Call_ACCEPT_INVERSE_OFFERS, scheduler.Call_DECLINE_INVERSE_OFFERS,
		scheduler.Call_REQUEST, scheduler.Call_ACKNOWLEDGE_OPERATION_STATUS, scheduler.Call_RECONCILE_OPERATIONS:
		// No maintenance, no operation feedback, and the default allocator ignores REQUEST.
	}
}

// validateCall is validation::scheduler::call::validate (MESOS.md §1.2); typed tells whether the
// body set 'type' at all (see callHasType).
func validateCall(call *scheduler.Call, typed bool) error {
	if !typed {
		return fmt.Errorf("Expecting 'type' to be present")
	}
	if call.Type != scheduler.Call_SUBSCRIBE && call.FrameworkID == nil {
		return fmt.Errorf("Expecting 'framework_id' to be present")
	}
	missing := func(name string) error { return fmt.Errorf("Expecting '%s' to be present", name) }
	switch call.Type {
	case scheduler.Call_SUBSCRIBE:
		if call.Subscribe == nil || call.Subscribe.FrameworkInfo == nil {
			return missing("subscribe")
		}
		infoID := call.Subscribe.FrameworkInfo.ID
		if (call.FrameworkID == nil) != (infoID == nil) || call.FrameworkID != nil && call.FrameworkID.Value != infoID.Value {
			return fmt.Errorf("'framework_id' differs from 'subscribe.framework_info.id'")
		}
	case scheduler.Call_ACCEPT:
		if call.Accept == nil {
			return missing("accept")
		}
	case scheduler.Call_DECLINE:
		if call.Decline == nil {
			return missing("decline")
		}
	case scheduler.Call_ACCEPT_INVERSE_OFFERS:
		if call.AcceptInverseOffers == nil {
			return missing("accept_inverse_offers")
		}
	case scheduler.Call_DECLINE_INVERSE_OFFERS:
		if call.DeclineInverseOffers == nil {
			return missing("decline_inverse_offers")
		}
	case scheduler.Call_REVIVE:
		if call.Revive == nil {
			call.Revive = &scheduler.Call_Revive{}
		}
	case scheduler.Call_SUPPRESS:
		if call.Suppress == nil {
			call.Suppress = &scheduler.Call_Suppress{}
		}
	case scheduler.Call_KILL:
		if call.Kill == nil {
			return missing("kill")
		}
	case scheduler.Call_SHUTDOWN:
		if call.Shutdown == nil {
			return missing("shutdown")
		}
	case scheduler.Call_ACKNOWLEDGE:
		if call.Acknowledge == nil {
			return missing("acknowledge")
		}
		if len(call.Acknowledge.UUID) != 16 {
			return fmt.Errorf("'acknowledge.uuid' must be a valid UUID (16 bytes), got %d bytes", len(call.Acknowledge.UUID))
		}
	case scheduler.Call_ACKNOWLEDGE_OPERATION_STATUS:
		a := call.AcknowledgeOperationStatus
		if a == nil {
			return missing("acknowledge_operation_status")
		}
		if len(a.UUID) != 16 || a.AgentID == nil {
			return fmt.Errorf("'acknowledge_operation_status' needs a 16-byte uuid and an agent_id")
		}
	case scheduler.Call_RECONCILE:
		if call.Reconcile == nil {
			return missing("reconcile")
		}
	case scheduler.Call_RECONCILE_OPERATIONS:
		if call.ReconcileOperations == nil {
			return missing("reconcile_operations")
		}
	case scheduler.Call_MESSAGE:
		if call.Message == nil {
			return missing("message")
		}
	case scheduler.Call_REQUEST:
		if call.Request == nil {
			return missing("request")
		}
	case scheduler.Call_UPDATE_FRAMEWORK:
		u := call.UpdateFramework
		if u == nil {
			return missing("update_framework")
		}
		if u.FrameworkInfo.ID == nil || u.FrameworkInfo.ID.Value != call.FrameworkID.Value {
			return fmt.Errorf("'framework_id' differs from 'update_framework.framework_info.id'")
		}
	}
	return nil
}

func plain(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

// schedulerCallType says where a scheduler call's 'type' is (see callHasType).
var schedulerCallType = callType{field: 2, names: scheduler.Call_Type_name}

// callType is a call's 'type' field: its protobuf field number and its enum's values.
type callType struct {
	field uint64
	names map[int32]string
}

// callHasType tells whether a call's body sets 'type' as Mesos's has_type() sees it, which
// mesos-go's Calls cannot (their Type is no pointer: a missing one reads as UNKNOWN). In JSON,
// a "type" that is not null (stout's parser takes null as unset); in protobuf, field ct.field
// with a value of the enum (proto2 keeps an unknown value out of the field). body has parsed
// already.
func callHasType(media string, body []byte, ct callType) bool {
	if media == mediaJSON {
		var fields map[string]json.RawMessage
		if json.Unmarshal(body, &fields) != nil {
			return false
		}
		v, ok := fields["type"]
		return ok && string(bytes.TrimSpace(v)) != "null"
	}
	for len(body) > 0 {
		key, n := binary.Uvarint(body)
		if n <= 0 {
			return false
		}
		body = body[n:]
		size := uint64(0)
		switch key & 7 {
		case 0: // varint
			v, n := binary.Uvarint(body)
			if n <= 0 {
				return false
			}
			if _, known := ct.names[int32(v)]; key>>3 == ct.field && known {
				return true
			}
			size = uint64(n)
		case 1: // fixed64
			size = 8
		case 2: // length-delimited
			l, n := binary.Uvarint(body)
			if n <= 0 {
				return false
			}
			size = uint64(n) + l
		case 5: // fixed32
			size = 4
		default:
			return false
		}
		if size > uint64(len(body)) {
			return false
		}
		body = body[size:]
	}
	return false
}

// readCall applies the checks every v1 endpoint makes before looking at the call (method,
// Content-Type, parse) and decodes the body into m. It answers the error itself and returns
// the content type, or "" when it did.
func readCall(w http.ResponseWriter, r *http.Request, m message) string {
	media, _ := readCallBody(w, r, m)
	return media
}

// readCallBody is readCall that also returns the body.
func readCallBody(w http.ResponseWriter, r *http.Request, m message) (string, []byte) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		plain(w, http.StatusMethodNotAllowed, "Expecting 'POST', received '"+r.Method+"'")
		return "", nil
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		plain(w, http.StatusBadRequest, "Expecting 'Content-Type' to be present")
		return "", nil
	}
	if ct != mediaJSON && ct != mediaProtobuf {
		plain(w, http.StatusUnsupportedMediaType, "Expecting 'Content-Type' of application/json or application/x-protobuf")
		return "", nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		plain(w, http.StatusBadRequest, "Failed to read body: "+err.Error())
		return "", nil
	}
	if err := decode(ct, body, m); err != nil {
		plain(w, http.StatusBadRequest, "Failed to parse body into Call protobuf: "+err.Error())
		return "", nil
	}
	return ct, body
}
