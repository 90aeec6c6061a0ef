// The decision pipeline: one call decides every check of a request.

package pop

import (
	"errors"
	"slices"
	"strconv"
	"sync"

	"github.com/geolimit/geolimit/window"
)

// Check is one question a request asks: may Key spend Cost under Rule? A
// front end classifies its request (an HTTP request, a batch item, an Envoy
// descriptor) into checks and decides them with one DecideChecks call.
type Check struct {
	// Rule is the rule, resolved in one rule table snapshot (Node.Handle).
	Rule RuleHandle
	// Key is the key counted: 1 to crdt.MaxKeyLen bytes.
	Key string
	// Tier names the request's tier (Rule.Tiers); empty or unknown means
	// the rule's default tier.
	Tier string
	// Cost is what the check spends; 0 means the rule's cost.
	Cost uint64
	// Probe: the check is judged but never counted (Envoy's hits_addend
	// 0): of an all-or-nothing request, a probe that would be denied denies
	// the request.
	Probe bool
	// Pin, for a concurrency rule, makes the lease acquired never expire:
	// the caller holds it while the request is in flight and must release
	// it (Node.Release) when it ends. Without Pin a lease ends at the
	// rule's LeaseTTL unless released first.
	Pin bool
	// IdempotencyKey, when not empty, makes the check decided once per
	// (rule, key, idempotency key) within the node's idempotency TTL: a
	// check that names them again gets the same decision, counts nothing
	// and says so (Result.Repeat); see idempotency.go. At most
	// MaxIdempotencyKeyLen bytes. A probe ignores it, and so does a check
	// of a concurrency rule.
	IdempotencyKey string
}

// Combine says how DecideChecks joins a request's checks.
type Combine uint8

const (
	// Each decides every check on its own; each is counted when it fits.
	Each Combine = iota
	// All decides the checks as one request, all or nothing: they are
	// counted only when no check of an enforce rule would be denied.
	All
)

// Request is what DecideChecks decides.
type Request struct {
	Checks  []Check
	Combine Combine
	// Strict makes every bad check an error of the whole request, before
	// anything is decided (*CheckError): an unknown rule, a bad key or
	// cost, a cost over what the rule can ever admit (Rule.MaxCost) and,
	// for All, checks of one rule and key whose costs add up to more. A
	// request that is not strict skips checks of unknown rules and bad
	// keys (their Result.Err says why) and denies a cost that can never
	// fit, with a wait of at least the window.
	Strict bool
}

// testHookBeforeCount, set only by the package's tests (export_test.go),
// runs between the check of an all-or-nothing request and its counts, so
// that a test can race another request or a reload in between. Nil in
// every program, as net/http's testHook variables are.
var testHookBeforeCount func()

// Result is one check's answer.
type Result struct {
	Decision
	// Counted: the check was decided and counted, not only judged: its
	// cost was added to its key's count (a shadow rule's would-be denial,
	// admitted, adds nothing).
	Counted bool
	// Err says why a check of a request that is not strict was skipped
	// (ErrUnknownRule: its rule was removed by a reload; a bad key): it
	// was neither decided nor counted and says nothing of the request.
	Err error
	// Repeat: the check named an idempotency key already decided; Allowed
	// (and ShadowDenied) are that decision, nothing was counted, and the
	// rest of the Decision is the key's as it stands.
	Repeat bool
	// peeked: Decision is an answer without counting; cum: the cost the
	// check is judged with in the check phase of an all-or-nothing request.
	peeked bool
	done   bool
	cum    uint64
	// Lease holds the slots a check of a concurrency rule acquired
	// (concurrency.go): the caller gives them back with Node.Release.
	// Zero for other checks, denied ones and probes.
	Lease Lease
}

// Outcome is what DecideChecks says of a request as a whole.
type Outcome struct {
	// Allowed: the request may proceed: no check of an enforce rule was
	// denied (shadow rules never deny).
	Allowed bool
	// Binding is the index of the check whose decision speaks for the
	// request (its headers, its denial): of a denied request, the denying
	// enforce check with the longest wait; of an allowed one, the enforce
	// check with the least remaining, the longer reset on a tie (the first
	// on a full tie). -1 when no check of an enforce rule was decided.
	Binding int
	// Counted is how many checks were counted.
	Counted int
}

// Stands reports whether check i's decision stands for the request: every
// decided check of an allowed request or of a request decided check by
// check, and of a denied all-or-nothing request the counted checks and the
// denying ones. Front ends count these in their decision metrics.
func (o Outcome) Stands(res []Result, i int, c Combine) bool {
	r := &res[i]
	if r.Err != nil || !r.done {
		return false
	}
	return c == Each || o.Allowed || r.Counted || !r.Allowed
}

// CheckError is a strict request's error: check Index is bad, and nothing
// of the request was decided or counted.
type CheckError struct {
	Index int
	Err   error
	// Sum is, for ErrSumOverLimit, what the request's checks of the rule
	// and key cost together.
	Sum uint64
}

func (e *CheckError) Error() string {
	return "pop: check " + strconv.Itoa(e.Index) + ": " + e.Err.Error()
}

func (e *CheckError) Unwrap() error { return e.Err }

// ErrSumOverLimit is a strict all-or-nothing request whose checks of one
// rule and key cost together more than the rule can ever admit: it could
// never pass.
var ErrSumOverLimit = errors.New("pop: checks of one rule and key cost together more than the rule's limit")

// prefetchAhead is how many checks ahead DecideChecks prefetches a key.
const prefetchAhead = 4

// DecideChecks decides the checks of one request at now against the rule
// table snapshot their handles were resolved in, into res (which must hold
// a Result per check), and says what they mean for the request.
//
// Each: every check is decided, and counted when it fits, on its own.
//
// All: the request passes only when every enforce check fits. When two or
// more enforce checks apply (or one is a probe or can never fit), each is
// first judged without counting, a counted one with the summed cost of the
// request's checks of its rule and key; if one would be denied, nothing is
// counted (a denial that is counted starts the key's penalty block, as
// Decide's does). Otherwise the enforce checks are counted in request
// order, then the shadow checks. Only a race for the last units between
// the judging and the counting (another request on this node, or counts
// merged meanwhile) can make a later check deny after earlier ones were
// counted: counting stops there and the request is denied. Checks left
// uncounted (those of a denied request, probes) are answered as their key
// stands: what is left without them.
//
// The order within one check (penalty block, partition share, fail closed
// on unsure, admit, shadow) is Decide's. A check that names an idempotency
// key already decided is a repeat (idempotency.go): its remembered decision
// stands and it spends nothing; of an all-or-nothing request, a remembered
// denial of an enforce rule denies the request, and the other checks are
// judged and counted as above. DecideChecks never blocks on replication; it
// allocates only for an all-or-nothing request of more than a few checks
// or with idempotency keys.
func (n *Node) DecideChecks(now int64, req *Request, res []Result) (Outcome, error) {
	cs := req.Checks
	res = res[:len(cs)]
	idem := false
	for i := range cs {
		res[i] = Result{}
		if err := n.validate(&cs[i], req.Strict); err != nil {
			if req.Strict {
				return Outcome{Binding: -1}, &CheckError{Index: i, Err: err}
			}
			res[i].Err = err
		}
		idem = idem || cs[i].IdempotencyKey != ""
	}
	if req.Combine == All {
		var m *allMemos
		if idem {
			m = n.recallAll(now, cs, res)
		}
		if err := sumCosts(cs, res, req.Strict); err != nil {
			return Outcome{Binding: -1}, err
		}
		return n.decideAll(now, req, res, m), nil
	}
	return n.decideEach(now, req, res), nil
}

// DecideCheck decides one check on its own and counts it when it fits: a
// request of one check (Each, Strict), without a slice. A bad check is an
// error (ErrUnknownRule, a bad key or cost, ErrCostOverLimit) and counts
// nothing.
func (n *Node) DecideCheck(now int64, c Check, res *Result) error {
	*res = Result{}
	if err := n.validate(&c, true); err != nil {
		return err
	}
	if c.IdempotencyKey != "" && !c.Probe {
		n.countOnce(now, &c, res)
		return res.Err
	}
	n.count(now, &c, res)
	return res.Err
}

// validate checks c against its rule: a live handle, a good key and a
// cost, 0 resolved to the rule's. Strict, a cost above the rule's largest
// is an error; otherwise it is left to be denied.
func (n *Node) validate(c *Check, strict bool) error {
	r := c.Rule.r
	if r == nil || r.dropped.Load() {
		return ErrUnknownRule
	}
	if c.Cost == 0 {
		c.Cost = r.Cost
	}
	if err := checkRequest(c.Key, c.Cost); err != nil {
		return err
	}
	if len(c.IdempotencyKey) > MaxIdempotencyKeyLen {
		return ErrIdempotencyKeyTooLong
	}
	if c.IdempotencyKey != "" && r.Kind == Concurrency {
		c.IdempotencyKey = "" // a retry is another request in flight
	}
	if strict && c.Cost > r.maxCostOf() {
		return ErrCostOverLimit
	}
	return nil
}

// maxCostOf is Rule.MaxCost, precomputed.
func (r *ruleState) maxCostOf() uint64 {
	if r.multi {
		return r.maxCost
	}
	return r.Limit
}

// sumCosts sets each counted check's cum to the cost of the request's
// checks of its rule and key up to and including it. Strict, a sum over
// the rule's largest cost is an error.
func sumCosts(cs []Check, res []Result, strict bool) error {
	for i := range cs {
		res[i].cum = cs[i].Cost
	}
	counted := func(i int) bool { return res[i].Err == nil && !cs[i].Probe && !res[i].Repeat }
	// One counter is one rule id and key: handles of one rule taken from
	// two snapshots (a reload keeps an unchanged window's id) share it.
	same := func(i, j int) bool { return cs[i].Rule.r.id == cs[j].Rule.r.id && cs[i].Key == cs[j].Key }
	over := func(i int) error {
		if strict && res[i].cum > cs[i].Rule.r.maxCostOf() {
			return &CheckError{Index: i, Err: ErrSumOverLimit, Sum: res[i].cum}
		}
		return nil
	}
	if len(cs) <= smallSum {
		for i := range cs {
			if !counted(i) {
				continue
			}
			for j := i - 1; j >= 0; j-- {
				if counted(j) && same(i, j) {
					res[i].cum = window.SatAdd(res[i].cum, res[j].cum)
					break
				}
			}
			if err := over(i); err != nil {
				return err
			}
		}
		return nil
	}
	op := orderPool.Get().(*[]int32)
	defer orderPool.Put(op)
	order := (*op)[:0]
	for i := range cs {
		if counted(i) {
			order = append(order, int32(i))
		}
	}
	*op = order
	// Stable: checks of one rule and key stay in request order.
	slices.SortStableFunc(order, func(x, y int32) int {
		a, b := &cs[x], &cs[y]
		if a.Rule.r.id != b.Rule.r.id {
			if a.Rule.r.id < b.Rule.r.id {
				return -1
			}
			return 1
		}
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	var first error
	for k := 1; k < len(order); k++ {
		p, i := order[k-1], order[k]
		if !same(int(p), int(i)) {
			continue
		}
		res[i].cum = window.SatAdd(res[i].cum, res[p].cum)
		if err := over(int(i)); err != nil && (first == nil || int(i) < first.(*CheckError).Index) {
			first = err
		}
	}
	return first
}

// smallSum is the most checks whose sums are found by a scan rather than
// a sort.
const smallSum = 16

var orderPool = sync.Pool{New: func() any { return new([]int32) }}

// decideEach decides every check on its own.
func (n *Node) decideEach(now int64, req *Request, res []Result) Outcome {
	cs := req.Checks
	if len(cs) > 1 {
		for i := range min(prefetchAhead, len(cs)) {
			n.prefetch(&cs[i])
		}
	}
	for i := range cs {
		if i+prefetchAhead < len(cs) {
			n.prefetch(&cs[i+prefetchAhead])
		}
		if res[i].Err != nil {
			continue
		}
		if cs[i].IdempotencyKey != "" && !cs[i].Probe {
			n.countOnce(now, &cs[i], &res[i])
			continue
		}
		n.count(now, &cs[i], &res[i])
	}
	return outcome(cs, res)
}

// decideAll decides the checks as one request (see DecideChecks); m, when
// not nil, holds what recallAll found of its idempotency keys.
func (n *Node) decideAll(now int64, req *Request, res []Result, m *allMemos) Outcome {
	cs := req.Checks
	enforce, judge := 0, false
	denied := m != nil && m.denied
	for i := range cs {
		c := &cs[i]
		if res[i].Err != nil || res[i].Repeat || c.Rule.r.mode() != Enforce {
			continue
		}
		enforce++
		judge = judge || c.Probe || c.Cost > c.Rule.r.maxCostOf()
	}
	if !denied && (enforce >= 2 || judge) {
		// Judge every enforce check without counting: one denial and
		// nothing is counted anywhere.
		n.prefetchAll(req)
		for i := range cs {
			c := &cs[i]
			if res[i].Err != nil || res[i].Repeat || c.Rule.r.mode() != Enforce {
				continue
			}
			cost := res[i].cum
			if c.Probe || c.Cost > c.Rule.r.maxCostOf() {
				cost = c.Cost
			}
			n.peek(now, c, cost, !c.Probe, &res[i])
			denied = denied || !res[i].Allowed
		}
	}
	if !denied {
		if testHookBeforeCount != nil {
			testHookBeforeCount()
		}
	passes:
		for pass := 0; pass < 2; pass++ { // enforce checks first, then shadow ones
			for i := range cs {
				c := &cs[i]
				if res[i].Err != nil || res[i].Repeat || (c.Rule.r.mode() == Enforce) != (pass == 0) || c.Probe || c.Cost > c.Rule.r.maxCostOf() {
					continue
				}
				n.count(now, c, &res[i])
				if !res[i].Allowed {
					// The only enforce check denies, or one lost a race
					// for the last units after it was judged.
					break passes
				}
			}
		}
	}
	// Checks still without an answer (the shadow ones of a denied request,
	// probes and costs that never fit of shadow rules, checks after a lost
	// race that were not judged) are answered as their key stands.
	for i := range cs {
		if r := &res[i]; r.Err == nil && !r.done {
			n.peek(now, &cs[i], cs[i].Cost, false, r)
		}
	}
	o := outcome(cs, res)
	if !o.Allowed {
		// Slots acquired before a later check lost a race are given back.
		o.Counted -= n.releaseDenied(now, res)
	}
	if m != nil {
		n.rememberAll(now, cs, res, m, o.Allowed)
	}
	return o
}

// prefetchAll prefetches the keys of a request's first few checks.
func (n *Node) prefetchAll(req *Request) {
	if len(req.Checks) < 2 {
		return
	}
	for i := range min(prefetchAhead, len(req.Checks)) {
		n.prefetch(&req.Checks[i])
	}
}

func (n *Node) prefetch(c *Check) { n.prefetchHandle(c.Rule, c.Key) }

// count decides check c, counting it unless it is a probe.
func (n *Node) count(now int64, c *Check, res *Result) {
	r := c.Rule.r
	if c.Probe || c.Cost > r.maxCostOf() {
		n.peek(now, c, c.Cost, false, res)
		return
	}
	d := &res.Decision
	sl := slotReq{take: true, pin: c.Pin}
	if err := n.decideRule(d, now, r, c.Key, c.Cost, c.Tier, howCount, &sl); err != nil {
		res.Err = err
		return
	}
	res.done, res.peeked = true, false
	if r.Kind == Concurrency {
		res.Lease, res.Counted = sl.lease, sl.lease.Held()
		return
	}
	res.Counted = d.Allowed && !d.Off
}

// peek answers check c for cost without counting it. A cost the rule can
// never admit is denied with a wait of at least the window. With penalize,
// a denial starts the key's penalty block as a counted one would. An
// admitted answer says what is left as the key stands (nothing was
// spent); of a concurrency rule, what taking the slots would leave.
func (n *Node) peek(now int64, c *Check, cost uint64, penalize bool, res *Result) {
	r := c.Rule.r
	pc, how := cost, decideHow(0)
	if r.Kind != Concurrency { // slots over the limit are judged whole: a denial
		pc = min(cost, r.maxCostOf())
		switch {
		case cost > pc:
			how = howNeverFits
		case penalize:
			how = howPenalize
		}
	}
	d := &res.Decision
	if err := n.decideRule(d, now, r, c.Key, pc, c.Tier, how, &slotReq{}); err != nil {
		res.Err = err
		return
	}
	res.done, res.peeked, res.Counted = true, true, false
	if d.Allowed && !d.ShadowDenied && r.Kind != Concurrency && how&howNeverFits == 0 {
		d.Remaining = min(d.Remaining+pc, d.Limit)
	}
}

// outcome finds the binding check and whether the request is allowed.
func outcome(cs []Check, res []Result) Outcome {
	o := Outcome{Allowed: true, Binding: -1}
	for i := range cs {
		r := &res[i]
		if r.Err != nil || !r.done {
			continue
		}
		if r.Counted {
			o.Counted++
		}
		if r.Off || cs[i].Rule.r.mode() != Enforce {
			continue
		}
		if !r.Allowed {
			if o.Allowed || r.RetryAfter > res[o.Binding].RetryAfter {
				o.Binding = i
			}
			o.Allowed = false
			continue
		}
		if o.Allowed {
			if b := o.Binding; b < 0 || r.Remaining < res[b].Remaining || (r.Remaining == res[b].Remaining && r.Reset > res[b].Reset) {
				o.Binding = i
			}
		}
	}
	return o
}
