package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/server/frontend"
)

// Concurrency leases: POST /v1/acquire and POST /v1/release.
//
//	POST /v1/acquire {"rule":"uploads","key":"k-123"}
//	  200 {"allowed":true,...,"lease":"<32 hex digits>","expires_ms":60000}
//	  429 {"allowed":false,...,"retry_after_ms":1000} with Retry-After
//	  503 {"allowed":false,...,"lease_table_full":true,"error":"lease table full: ..."}:
//	      the node holds limits.max_keys / 4 leases; the key's slots may be free
//	POST /v1/release {"lease":"<32 hex digits>"}
//	  200 {"released":true}; 404 unknown or expired lease; 400 malformed
//
// A lease holds its slot until released or until the rule's lease_ttl
// (expires_ms from the answer) has passed, so a client that crashed
// holding one cannot keep its slot. A lease is this node's: it is
// released on the node that acquired it (a release elsewhere answers 404,
// and the slot comes back at its TTL). A shadow rule with no slot free
// answers allowed, "shadow_denied":true and no lease.

// kindMsg is the answer to /v1/check or /v1/checks naming a
// concurrency rule, and to /v1/acquire naming a rate rule.
func kindMsg(cr *frontend.Rule) string {
	if cr.Pop.Kind == pop.Concurrency {
		return "rule " + strconv.Quote(cr.Pop.Name) + " is kind: concurrency: take a slot with POST /v1/acquire and give it back with POST /v1/release"
	}
	return "rule " + strconv.Quote(cr.Pop.Name) + " is not kind: concurrency: decide it with POST /v1/check"
}

// ServeAcquire serves POST /v1/acquire {"rule","key"} (and "cost": the
// slots to take, 1 by default).
func (h *Handler) ServeAcquire(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	var c check
	bp, cr, cost, ok := h.readCheck(w, r, &c, pop.Concurrency)
	defer frontend.PutBuf(bp)
	if !ok {
		return
	}
	key := string(c.key) // the answer is written into the body's buffer
	cs := frontend.GetChecks(pop.Each, true)
	cs.Add(cr, key, "", "", cost)
	a := h.env.Decide(cs, http.StatusTooManyRequests, nil)
	defer a.Put()
	if a.Err != nil {
		frontend.WriteError(w, a.Status, decideMsg(a.Err))
		return
	}
	res := &cs.Res[0]
	d := &res.Decision
	b := frontend.AppendResultObj((*bp)[:0], cr, key, *d, false)
	b = b[:len(b)-1] // reopen the object
	if res.Lease.Held() {
		b = append(b, `,"lease":"`...)
		b = append(b, res.Lease.ID().String()...)
		b = append(b, `","expires_ms":`...)
		b = strconv.AppendInt(b, frontend.CeilDiv(res.Lease.Until()-h.env.Clock.Now(), int64(time.Millisecond)), 10)
	}
	if d.ShadowDenied {
		b = append(b, `,"shadow_denied":true`...)
	}
	// Denied for want of room in the node's lease table, not by the key's
	// slots: 503 (frontend.Env.Decide), and say so.
	if a.Full != "" {
		b = append(b, `,"lease_table_full":true,"error":`...)
		b = frontend.AppendString(b, a.Full)
	}
	b = append(b, '}')
	b = append(b, '\n')
	*bp = b
	writeAnswer(w, &a, b)
}

// ServeRelease serves POST /v1/release {"lease":"..."}.
func (h *Handler) ServeRelease(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	bp, aerr := h.readRequest(w, r)
	defer frontend.PutBuf(bp)
	if aerr != nil {
		frontend.WriteError(w, aerr.status, aerr.msg)
		return
	}
	var body struct {
		Lease *string `json:"lease"`
	}
	dec := json.NewDecoder(strings.NewReader(string(*bp)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		frontend.WriteError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return
	}
	if dec.More() {
		frontend.WriteError(w, http.StatusBadRequest, "bad JSON: trailing data after the object")
		return
	}
	if body.Lease == nil {
		frontend.WriteError(w, http.StatusBadRequest, "lease: required")
		return
	}
	id, err := pop.ParseLeaseID(*body.Lease)
	if err != nil {
		frontend.WriteError(w, http.StatusBadRequest, "lease: want the 32 hex digits POST /v1/acquire answered")
		return
	}
	if !h.env.Node.Release(h.env.Clock.Now(), id) {
		frontend.WriteError(w, http.StatusNotFound, "lease: not held on this node (released already, expired at its lease_ttl, or acquired elsewhere)")
		return
	}
	w.Header()[frontend.HContentType] = frontend.JSONType
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte("{\"released\":true}\n"))
}

// serveInflightKey answers GET /v1/keys/{rule}/{key} of a concurrency
// rule: the slots in use, this node's and its PoP members'. It reports
// whether the rule was one.
func (h *Handler) serveInflightKey(w http.ResponseWriter, rule, value, key string) bool {
	cr := h.env.Rules.Load().ByName[rule]
	if cr == nil || cr.Pop.Kind != pop.Concurrency {
		return false
	}
	own, members, ok := h.env.Node.InFlight(h.env.Clock.Now(), rule, key)
	if !ok {
		return false
	}
	frontend.WriteJSON(w, http.StatusOK, struct {
		Rule     string `json:"rule"`
		Key      string `json:"key"`
		Kind     string `json:"kind"`
		Limit    uint64 `json:"limit"`
		InFlight uint64 `json:"in_flight"`
		Own      uint64 `json:"own"`
		Members  uint64 `json:"members"`
	}{Rule: rule, Key: value, Kind: pop.Concurrency.String(), Limit: cr.Pop.Limit, InFlight: own + members, Own: own, Members: members})
	return true
}
