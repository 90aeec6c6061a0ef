package pop

import (
	"math"

	"github.com/geolimit/geolimit/crdt"
)

// What each replica was asked, replicated.
//
// A side's part of a share rule's demand before a cut (share_side.go) was
// read from its part of the admits. Over a key's limit the admits follow
// the replicas, not the demand (each takes its part of the headroom): a
// PoP of three nodes asked for two thirds of the requests admitted a
// third, and a failover of the other third onto it read as a side at half
// of the fleet's demand, never as one that took it over (0.47 of a central
// limiter's admits in the cut); a side below its part of the limit, all it
// asked admitted, that surged alone read as a failover (1.64 times the
// limit).
//
// So each node also counts, per global share rule, the cost it was asked,
// admitted or refused (crdt's SetCountAsked: at most twice a key's limit a
// window refused from any one key), and replicates it as its own count of
// one key of a window of its own beside the rule's, named by the rule's
// name and askedWire. It travels as every count does (members, PoP
// totals, region voices, epochs, anti-entropy), and every node then holds
// what each PoP was asked: of the window seen whole before a cut (a side's
// part of the demand), and of each window of the cut, its own side's (how
// far the side's demand grew, share_side.go's overFleet). Nothing decides
// on that window.
//
// Trust: a replica's asked count is what it says it was asked, as its
// counts are what it says it admitted. The count is not clamped at a
// limit (a replica is asked far more than any key's limit over many
// keys); where a cut reads it, a PoP counts as asked at least what it
// admitted, and the fleet's asked cost past its admits is taken up to
// refusedReadCap times those admits, so that a replica claiming the most
// it can moves a side's part of the demand no further than a fleet
// refusing that much would.

// askedWire is the suffix of an asked window's name: no rule's name or
// window name holds '#' (identity.ValidName).
const askedWire = "#asked"

// askedKey is the one key an asked window counts.
const askedKey = "asked"

// refusedReadCap is the most of the fleet's admits of a window its
// refused cost (asked past admitted) is taken for when a cut reads it.
const refusedReadCap = 4

// countsAsked reports whether rule state r counts its asked cost: a
// global share rule of counted windows.
func countsAsked(r *ruleState) bool {
	return r.OnPartition == Share && r.Scope == ScopeGlobal && r.Kind != Concurrency && !r.gcra && r.pacer == nil && r.cal == nil
}

// setAsked gives rs its asked window when it counts one (countsAsked),
// with the ID of the window of old it goes on with, and adds it to next;
// the store counts rs's asked cost or stops. Requires n.mu held.
func (n *Node) setAsked(rs *ruleState, old, next *ruleSet, kept map[crdt.RuleID]bool) error {
	if !countsAsked(rs) {
		n.store.SetCountAsked(rs.id, 0)
		return nil
	}
	q := &ruleState{Rule: rs.Rule, width: rs.width, wire: rs.Name + askedWire, sub: true, askedOf: rs}
	q.Name = q.wire
	q.OnPartition = Keep
	q.More, q.Overrides, q.Tiers, q.DefaultTier = nil, nil, nil, ""
	q.clamp = math.MaxUint64
	o := old.byWire[q.wire]
	if o != nil && o.width != q.width {
		o = nil
	}
	if err := n.assignID(q, o, kept); err != nil {
		return err
	}
	q.fp = q.Fingerprint()
	next.byID[q.id] = q
	next.byWire[q.wire] = q
	next.asking = append(next.asking, rs)
	n.store.SetProtect(q.id, 1)
	n.store.SetKeepSpent(q.id, false)
	n.store.SetCountAsked(rs.id, rs.clamp) // the largest limit the rule gives a key
	rs.asked = q
	return nil
}

// flushAsked adds to the own count of each asked window what the store
// was asked of its rule's keys since the last flush, in the rule's window
// at now, so that the flush that follows sends it.
func (n *Node) flushAsked(rs *ruleSet, now int64) {
	for _, r := range rs.asking {
		idx, el := r.split(now)
		c := n.store.TakeAsked(r.id, idx)
		if c == 0 {
			continue
		}
		q := r.asked
		n.store.CountHashed(n.store.Hash(q.id, askedKey), q.id, askedKey, crdt.Now{Index: idx, Elapsed: el, Width: q.width}, c)
	}
}

// sideAsked returns a reader of what p's side (the replicas of the PoPs
// it does not list as unheard) was asked in a window, from the asked
// window q's counts this node holds.
func (n *Node) sideAsked(p *partition, q *ruleState) func(win int64) uint64 {
	other := func(rep crdt.ReplicaID) bool { return p.others.of(p, n.store, rep) }
	return func(win int64) uint64 {
		all, _, ok := n.store.Peek(q.id, askedKey, win+1)
		if !ok {
			return 0
		}
		o, _, _ := n.store.PeekOf(q.id, askedKey, win+1, other)
		return all - min(o, all)
	}
}
