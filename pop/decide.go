// Deciding one request of one rule: Decide, Peek and the decision order.

package pop

import (
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/window"
)

// Decision is the outcome of Decide.
type Decision struct {
	// Allowed reports whether the request may proceed. Shadow rules always allow.
	Allowed bool
	// ShadowDenied is set when a shadow rule would have denied the request.
	ShadowDenied bool
	// Untracked is set when the key is new and the store had no room for it:
	// the request was decided, and counted when admitted, by the one counter
	// the rule's keys without room share (see crdt.Store), not by a count of
	// its own.
	Untracked bool
	// Blocked is set when the key is in the rule's penalty box (Rule.BlockFor,
	// block.go): denied (in shadow mode: would be) until RetryAfter from now.
	Blocked bool
	// BlockStarted is set when this decision put the key in the penalty box.
	BlockStarted bool
	// Off is set when the rule was switched off at run time (modes.go):
	// the request is allowed, nothing was read or counted, and the other
	// fields but Limit and Remaining (the rule's limit) are zero.
	Off bool
	// Unsure says why a rule with DenyUnsure denied a request it could not
	// judge (unsure.go); UnsureNone otherwise.
	Unsure Unsure
	// Limit is the binding window's limit for the request: the rule's, or
	// the one an override or tier gave the key.
	Limit uint64
	// Remaining is what is left of the limit after this request (see window.Result).
	Remaining uint64
	// Reset is the time until the whole limit is available again if no other
	// request arrives.
	Reset time.Duration
	// RetryAfter is 0 when allowed, else the time until a request of the same
	// cost would fit if no other request arrives.
	RetryAfter time.Duration
	// Binding is the index, in Rule.Windows, of the window the other fields
	// speak of: of a denied request, the denying window with the longest
	// wait; of an admitted one, the window with the least remaining. 0 for
	// a rule of one window.
	Binding uint8
	// Limits are the limits per window (in the order of Rule.Windows) that
	// an override or tier gave the request, nil when the rule's own applied.
	// Read only: shared with the rule table.
	Limits []uint64
}

// Decide decides a request of cost for key under rule at now (Unix
// nanoseconds) and counts it when admitted. It never blocks on replication
// and does not allocate.
func (n *Node) Decide(now int64, rule, key string, cost uint64) (Decision, error) {
	return n.decide(now, rule, key, cost, true)
}

// Peek decides like Decide but counts nothing: what Decide would answer now.
func (n *Node) Peek(now int64, rule, key string, cost uint64) (Decision, error) {
	return n.decide(now, rule, key, cost, false)
}

func (n *Node) decide(now int64, rule, key string, cost uint64, count bool) (d Decision, err error) {
	r, ok := n.rules.Load().get(rule)
	if !ok {
		return Decision{}, ErrUnknownRule
	}
	err = n.decideRule(&d, now, r, key, cost, "", howOf(count), nil)
	return
}

// checkRequest checks what every rule asks of a request: a key of 1 to
// crdt.MaxKeyLen bytes and a cost of at least 1.
func checkRequest(key string, cost uint64) error {
	switch {
	case len(key) == 0:
		return ErrEmptyKey
	case len(key) > crdt.MaxKeyLen:
		return ErrKeyTooLong
	case cost < 1:
		return ErrBadCost
	}
	return nil
}

// decideHow says what decideRule does beside deciding.
type decideHow uint8

const (
	// howCount counts the request when it fits.
	howCount decideHow = 1 << iota
	// howPenalize starts the key's block on a denial, as a counted denial
	// does, without counting (a check judged before an all-or-nothing
	// request is denied).
	howPenalize
	// howNeverFits: the request costs more than the rule can ever admit;
	// it is judged at the rule's largest cost, and denied with a wait of at
	// least the window.
	howNeverFits
)

func howOf(count bool) decideHow {
	if count {
		return howCount
	}
	return 0
}

// slotReq is what deciding a check of a concurrency rule needs beside the
// decision: whether to take its slots (and pin them) and where the lease
// goes.
type slotReq struct {
	take, pin bool
	lease     Lease
}

// decideRule decides for rule r of some rule table snapshot, under tier
// (empty: the rule's default), into *d (which it overwrites whole). It
// holds the decision order, here and nowhere else, for every kind of rule:
//
//  1. the request: a key and a cost the rule can ever admit (an error
//     counts nothing; with howNeverFits, judged at the largest cost);
//  2. the guard: a key in the penalty box, or a node not synced yet under
//     on_unsure: deny, is denied before any count is read;
//  3. admit: for a rate rule each window (admitWindow): the partition
//     share caps this side's limit, a key the node cannot judge fails
//     closed (on_unsure: deny), then the counts admit (and count, with
//     howCount, when the request fits in every window); a GCRA rule's TAT
//     admits instead (admitGCRA, gcra.go); a concurrency rule's slots in
//     use admit (admitSlots, lease.go; sl says whether to take them);
//  4. the penalty step: a counted denial (or one judged with howPenalize)
//     starts the key's block;
//  5. the shadow step: a shadow rule's denial becomes an admission that
//     says so.
//
// A rule switched off at run time (modes.go) stops after 1: allowed,
// nothing counted (Decision.Off). A concurrency rule decided without sl
// (the rate calls Decide, Peek and theirs) is ErrConcurrencyRule.
//
// Results go through pointers on this path: a returned struct is copied
// with wide loads of its narrow stores, which stalls on store forwarding,
// and three such copies cost a decision more than its look-up in cache.
func (n *Node) decideRule(d *Decision, now int64, r *ruleState, key string, cost uint64, tier string, how decideHow, sl *slotReq) (err error) {
	if err = checkRequest(key, cost); err != nil {
		*d = Decision{}
		return err
	}
	if cost > r.maxCostOf() && r.Kind != Concurrency { // slots over the limit are a denial (admitSlots)
		*d = Decision{}
		return ErrCostOverLimit
	}
	count := how&howCount != 0
	done := false
	if r.gated.Load() { // guarded or off: one flag for both
		if r.off() {
			*d = Decision{Allowed: true, Off: true, Limit: r.Limit, Remaining: r.Limit}
			return nil
		}
		if r.guarded {
			if r.Kind == Concurrency {
				if sl == nil {
					*d = Decision{}
					return ErrConcurrencyRule
				}
				n.admitSlots(d, now, r, key, cost, sl)
				done = true
			} else if g, ok := n.guard(now, r, key); ok {
				*d, done = g, true
			}
		}
	}
	if !done {
		var u Unsure
		if r.multi {
			u = n.admitWindows(d, now, r, key, tier, cost, count) // or admitGCRA
		} else {
			// One window, the rule's own limit (the common case, written out
			// here rather than in a function of its own: a call costs it 5 %).
			var res crdt.AdmitResult
			if u = n.admitWindow(&res, now, r, key, r.Limit, cost, modeOf(count, count)); u == UnsureNone {
				// Field by field: a composite literal is built on the stack and copied.
				d.Allowed, d.ShadowDenied, d.Untracked = res.Allowed, false, res.Untracked
				d.Blocked, d.BlockStarted, d.Off, d.Unsure = false, false, false, UnsureNone
				d.Limit, d.Remaining = r.Limit, res.Remaining
				d.Reset, d.RetryAfter = time.Duration(res.Reset), time.Duration(res.RetryAfter)
				d.Binding, d.Limits = 0, nil
			}
		}
		if u != UnsureNone {
			*d = unsureDecision(r, u)
			d.Untracked = u == UnsureStoreFull
		} else if r.guarded {
			n.afterGuard(now, r, key, how&(howCount|howPenalize) != 0, d) // the penalty step
		}
	}
	if how&howNeverFits != 0 && !d.Off {
		if d.Allowed {
			d.Remaining = min(d.Remaining+cost, d.Limit) // nothing was spent
		}
		d.Allowed = false
		d.RetryAfter = max(d.RetryAfter, r.Window)
	}
	// The shadow step, the one place a shadow rule's denial becomes an
	// admission that says it would have denied.
	if !d.Allowed && r.mode() == Shadow {
		d.Allowed, d.ShadowDenied = true, true
	}
	return nil
}

// admitMode says what admitWindow does beside deciding: count the request
// (admitCount), record its demand for the partition share (admitRecord).
// One argument for both keeps admitWindow's arguments in registers.
type admitMode uint8

const (
	admitCount admitMode = 1 << iota
	admitRecord
)

func modeOf(count, record bool) admitMode {
	var m admitMode
	if count {
		m |= admitCount
	}
	if record {
		m |= admitRecord
	}
	return m
}

// admitWindow decides (and with admitCount, counts) a request of cost against
// limit in one window w of a rule, into *res: the partition share caps the
// limit (and records the side's demand, with record); a key the node
// cannot judge under on_unsure: deny (no history during a partition, or no
// room in the store for a key to be counted) is reported, with nothing
// counted; otherwise the counts admit. Remaining is capped by the share.
func (n *Node) admitWindow(res *crdt.AdmitResult, now int64, w *ruleState, key string, limit, cost uint64, m admitMode) Unsure {
	count := m&admitCount != 0
	h := n.store.Hash(w.id, key) // the slot's line comes in meanwhile
	idx, el := w.split(now)
	var sh *share
	full := limit
	if w.OnPartition == Share && w.Scope == ScopeGlobal && n.part.Load() != nil {
		if lim, s, ok := n.shareLimit(w, key, now, idx, el); ok {
			if s.fresh && w.OnUnsure == DenyUnsure {
				return UnsureNoHistory
			}
			limit, sh = uint64(min(lim, float64(limit))), s
		}
	}
	if cost > limit {
		// The share left to this side cannot hold the request; retry once the
		// partition is over, or a window later at the earliest.
		*res = crdt.AdmitResult{Result: window.Result{Remaining: limit, RetryAfter: w.width, Reset: w.width}}
	} else {
		at := crdt.Now{Index: idx, Elapsed: el, Width: w.width}
		if count && w.OnUnsure == DenyUnsure {
			// Fail closed before counting: a key the store may have no
			// room for is denied, and nothing goes to the rule's counter
			// of keys without room.
			if n.store.AdmitSplitHashed(res, h, w.id, key, at, limit, cost, false, nil); res.Untracked {
				return UnsureStoreFull
			}
		}
		n.store.AdmitSplitHashed(res, h, w.id, key, at, limit, cost, count, n.allow[w.Scope&3].Load())
	}
	if sh != nil && m&admitRecord != 0 {
		sh.record(idx, cost)
	}
	if sh != nil && !res.Allowed && res.Estimate+float64(cost) <= float64(full) {
		// The share denied what the whole limit would have let in.
		if p := n.part.Load(); p != nil {
			p.denied()
		}
	}
	res.Remaining = min(res.Remaining, limit)
	if w.cal != nil {
		w.calendarAnswer(&res.Result, now, limit, cost)
	}
	return UnsureNone
}
