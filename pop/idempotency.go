package pop

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/replicated/memos"
	"github.com/geolimit/geolimit/wire"
)

// Idempotency keys.
//
// A check that names an idempotency key (Check.IdempotencyKey) is decided
// once: the decision (allowed or denied, and a shadow rule's would-be
// denial) is remembered per (rule, key, idempotency key) for the TTL
// (Config.IdempotencyTTL), and a check that names the same three again
// within it is a repeat: it gets the same decision (Result.Repeat) and
// spends nothing. A repeat's other fields (limit, remaining, reset, retry
// after) are the key's as it stands: what a check of its cost that counts
// nothing would be answered now. A repeat starts no penalty block.
//
// Decisions are remembered for rules of every scope, and replicated with
// the counts as far as the PoP: pop- and global-scope rules' to the own
// PoP's members (Batch.Local), never to other PoPs. Inside a PoP a retry
// that reaches another node is therefore a repeat once the first node's
// next Flush arrived; two requests with one idempotency key decided at
// the same moment (on two nodes, or on one) may both count, and the
// decision decided first is the one remembered everywhere (memos.Merge).
//
// Not remembered: a probe (it counts nothing anyway and ignores its
// idempotency key), a check of a request that is not strict that was
// skipped (Result.Err), and a denial because the node could not judge the
// key (Decision.Unsure): a retry is decided again.
//
// An all-or-nothing request (All) remembers per check the request's
// outcome: allowed for the checks counted (and the shadow checks) of an
// allowed request, denied for every check of a denied one. Its repeats
// stand as their remembered decisions, spend nothing and are not judged
// again; the request's other checks are decided together with them, all
// or nothing: a remembered denial of an enforce rule denies the request,
// and nothing else is counted. A request all of whose checks are repeats
// therefore gets its remembered outcome.
//
// Memory: at most Config.MaxIdempotencyKeys decisions are remembered, about
// memos.BytesPerEntry bytes each; when full, the decision remembered
// until the earliest time is forgotten first. A decision from a member is
// remembered until at most now + TTL + MaxSkew.

// DefaultIdempotencyTTL is the default Config.IdempotencyTTL.
const DefaultIdempotencyTTL = 24 * time.Hour

// MaxIdempotencyTTL is the longest Config.IdempotencyTTL.
const MaxIdempotencyTTL = 30 * 24 * time.Hour

// MaxIdempotencyKeyLen is the longest Check.IdempotencyKey, in bytes.
const MaxIdempotencyKeyLen = crdt.MaxKeyLen

// ErrIdempotencyKeyTooLong is a check whose idempotency key is longer than
// MaxIdempotencyKeyLen.
var ErrIdempotencyKeyTooLong = fmt.Errorf("pop: idempotency key longer than %d bytes", MaxIdempotencyKeyLen)

// errMemoTTL is Config.IdempotencyTTL out of range.
var errMemoTTL = errors.New("pop: idempotency ttl: must be between 0 and 30 days")

// verdictOf is what a decision remembers.
func verdictOf(d *Decision) memos.Verdict {
	var v memos.Verdict
	if d.Allowed {
		v |= memos.Allowed
	}
	if d.ShadowDenied {
		v |= memos.ShadowDenied
	}
	return v
}

// recall returns the decision remembered for check c (which names an
// idempotency key) at now, its memo's ID, and whether there is one.
func (n *Node) recall(now int64, c *Check) (memos.ID, memos.Verdict, bool) {
	id := memos.IDOf(c.Key, c.IdempotencyKey, c.Cost, c.Tier)
	v, ok := n.memos.Get(c.Rule.r.id, id, now)
	return id, v, ok
}

// countOnce is count for a check that names an idempotency key: a repeat
// is answered with its remembered decision; otherwise the check is
// decided, counted and its decision remembered.
func (n *Node) countOnce(now int64, c *Check, res *Result) {
	id, v, ok := n.recall(now, c)
	if ok {
		n.repeat(now, c, v, res)
		return
	}
	n.count(now, c, res)
	n.remember(now, c, id, res, verdictOf(&res.Decision))
}

// repeat answers check c with its remembered verdict v, counting nothing:
// the rest of the answer is the key's as it stands.
func (n *Node) repeat(now int64, c *Check, v memos.Verdict, res *Result) {
	n.peek(now, c, c.Cost, false, res)
	if res.Err != nil {
		return
	}
	d := &res.Decision
	d.Allowed, d.ShadowDenied = v&memos.Allowed != 0, v&memos.ShadowDenied != 0
	d.BlockStarted = false
	if d.Allowed {
		d.RetryAfter, d.Blocked, d.Unsure = 0, false, UnsureNone
	}
	res.Repeat = true
}

// remember records verdict v as check c's decision (of ID id), unless the
// check was skipped, the node could not judge it, or it was denied: a
// denial spends nothing, so a retry with the same key after Retry-After is
// decided afresh (a remembered denial would hold the key's retries off for
// the whole TTL).
func (n *Node) remember(now int64, c *Check, id memos.ID, res *Result, v memos.Verdict) {
	if res.Err != nil || !res.done || res.Unsure != UnsureNone || v&memos.Allowed == 0 {
		return
	}
	r := c.Rule.r
	n.memos.Put(now, r.id, id, now+n.memoTTL, v, r.Scope != ScopeNode)
}

// applyMemos merges d's remembered decisions (received from an accepted
// member, see from) into the table.
func (memoPart) apply(n *Node, now int64, d *wire.Delta, _ Scope, st *ApplyStats) {
	ms := memos.Section.Items(d)
	rs := n.rules.Load()
	// A member's decision lasts no longer than one this node would take
	// now: a later one would be evicted after this node's own when the
	// table is full, and so could push them out.
	bound := now + n.memoTTL
	for i := range ms {
		m := &ms[i]
		r, ok := rs.byName[m.Rule]
		switch {
		case !ok:
			st.UnknownRule++
			continue
		case r.Scope == ScopeNode:
			st.WrongScope++
			continue
		case m.Verdict&memos.Allowed == 0:
			// Only admissions are remembered: a member's denial would hold
			// the key's retries off for the whole TTL.
			st.BadEntry++
			continue
		case m.Until <= now:
			st.Memos.Expired++
			continue
		}
		until := m.Until
		if until > bound {
			until = bound
			st.Memos.Clamped++
		}
		switch n.memos.Put(now, r.id, m.ID, until, m.Verdict, false) {
		case memos.Merged:
			st.Memos.Merged++
		case memos.Unchanged:
			st.Memos.Unchanged++
		case memos.Refused:
			st.Memos.Refused++
		}
	}
}

// flushMemos adds the decisions this node remembered since the last flush
// to b.Local (when local): pop- and global-scope rules' ones.
func (memoPart) flush(n *Node, rs *ruleSet, _ int64, b *Batch, local, _ bool) {
	n.memos.Drain(func(id crdt.RuleID, mid memos.ID, until int64, v memos.Verdict) {
		if r := rs.byID[id]; local && r != nil && r.Scope != ScopeNode {
			memos.Section.Append(&b.Local, memos.Memo{Rule: r.Name, ID: mid, Until: until, Verdict: v})
		}
	})
}

// liveMemos returns every remembered decision that lasts beyond now of a
// pop- or global-scope rule, sorted by rule and ID (the simulator's output
// must not depend on map order).
func (n *Node) liveMemos(rs *ruleSet, now int64) []memos.Memo {
	var out []memos.Memo
	n.memos.Each(now, func(id crdt.RuleID, mid memos.ID, until int64, v memos.Verdict) {
		if r := rs.byID[id]; r != nil && r.Scope != ScopeNode {
			out = append(out, memos.Memo{Rule: r.Name, ID: mid, Until: until, Verdict: v})
		}
	})
	slices.SortFunc(out, func(a, b memos.Memo) int {
		if a.Rule != b.Rule {
			if a.Rule < b.Rule {
				return -1
			}
			return 1
		}
		return bytes.Compare(a.ID[:], b.ID[:])
	})
	return out
}

// allMemos is what recallAll found of an all-or-nothing request's
// idempotency keys: each idempotent check's memo ID, and whether a
// remembered denial of an enforce rule denies the request.
type allMemos struct {
	ids    []memos.ID // by check; zero for a check without an idempotency key
	idem   []bool
	denied bool
}

// idempotent reports whether check i of a request names an idempotency key
// that counts: a check that was not skipped and is not a probe.
func idempotent(cs []Check, res []Result, i int) bool {
	return res[i].Err == nil && cs[i].IdempotencyKey != "" && !cs[i].Probe
}

// recallAll answers the repeats of an all-or-nothing request with their
// remembered decisions (Result.Repeat) before anything is judged.
func (n *Node) recallAll(now int64, cs []Check, res []Result) *allMemos {
	m := &allMemos{ids: make([]memos.ID, len(cs)), idem: make([]bool, len(cs))}
	for i := range cs {
		if !idempotent(cs, res, i) {
			continue
		}
		m.idem[i] = true
		id, v, ok := n.recall(now, &cs[i])
		m.ids[i] = id
		if !ok {
			continue
		}
		n.repeat(now, &cs[i], v, &res[i])
		if res[i].Err == nil && !res[i].Allowed && cs[i].Rule.r.mode() == Enforce {
			m.denied = true
		}
	}
	return m
}

// rememberAll remembers, for each idempotent check of an allowed
// all-or-nothing request that is not a repeat, its decision (counted, or a
// shadow rule's). A denied request remembers nothing: it spent nothing, and
// a retry with the same keys is decided afresh.
func (n *Node) rememberAll(now int64, cs []Check, res []Result, m *allMemos, allowed bool) {
	if !allowed {
		return
	}
	for i := range cs {
		if !m.idem[i] || res[i].Repeat {
			continue
		}
		v := verdictOf(&res[i].Decision)
		if !allowed && cs[i].Rule.r.mode() == Enforce {
			v = 0
		}
		n.remember(now, &cs[i], m.ids[i], &res[i], v)
	}
}

// memoPart is the idempotency keys' memory as the node composes it
// (components.go). Memos never leave the PoP.
type memoPart struct{}

func (memoPart) section() sectionLen { return memos.Section }

// from: only the own PoP's members send memos; via ScopeGlobal they are
// refused.
func (memoPart) from(via Scope) bool { return via == ScopePoP }

func (memoPart) antiEntropy(n *Node, rs *ruleSet, now int64, b *Batch, _ func(string) bool) {
	memos.Section.Set(&b.Local, n.liveMemos(rs, now))
}

func (memoPart) state(n *Node, rs *ruleSet, now int64, self *wire.Delta) {
	memos.Section.Set(self, n.liveMemos(rs, now))
}

func (memoPart) sweep(n *Node, now int64) { n.memos.Sweep(now) }
