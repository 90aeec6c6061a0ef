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
// admitted or refused, and the cost it refused (crdt's SetCountAsked: at
// most twice the rule's limit a window refused from any one key), and
// replicates both as its own counts of two keys of a window of its own
// beside the rule's, named by the rule's name and askedWire. They travel
// as every count does (members, PoP totals, region voices, epochs,
// anti-entropy), and every node then holds what each PoP refused in the
// window seen whole before a cut (a side's part of the demand), and what
// its own side was asked in each window of the cut (how far the side's
// demand grew, share_side_asked.go's overFleet and bySide). The refused
// cost travels on its own, not as asked less admitted: a PoP's admits of
// keys far below their limit may reach the others late (sparse updates),
// and would read as refused. Nothing decides on that window.
//
// Trust: a replica's asked and refused counts are what it says, as its
// counts are what it says it admitted. They are not clamped at a limit (a
// replica is asked far more than any key's limit over many keys); where a
// cut reads them, the fleet's refused cost is taken up to refusedReadCap
// times its admits, and what it was asked up to its admits and that (a
// PoP counts as asked at least what it admitted), so that a replica
// claiming the most it can moves a side's part of the demand no further
// than a fleet refusing that much would. A forged count of the own side
// can hold its shares back (overFleet), or grow them as far as a failover
// of the fleet's demand onto the side would (share_side_asked.go's bySide:
// a side's growth past the fleet's demand grows no share, and a share
// grows to the whole limit at most), keep's bound.

// askedWire is the suffix of an asked window's name: no rule's name or
// window name holds '#' (identity.ValidName).
const askedWire = "#asked"

// askedKey and refusedKey are the keys of an asked window: what a replica
// was asked (admitted or refused), and what it refused.
const (
	askedKey   = "asked"
	refusedKey = "refused"
)

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
	// Not SetProtect: a rule the store knows takes a part of each shard's
	// room from the others, and the window's keys, unknown, are always
	// kept (crdt's protectOf).
	n.store.SetCountAsked(rs.id, rs.clamp) // the largest limit the rule gives a key
	rs.asked = q
	return nil
}

// flushAsked adds to the own counts of each asked window what the store
// was asked and refused of its rule's keys since the last flush, in the
// rule's window at now and the one before it (what came in there after
// the last flush), so that the flush that follows sends it.
func (n *Node) flushAsked(rs *ruleSet, now int64) {
	for _, r := range rs.asking {
		idx, el := r.split(now)
		a := n.store.TakeAsked(r.id, idx)
		q := r.asked
		at := crdt.Now{Index: idx, Elapsed: el, Width: q.width}
		for _, k := range [...]struct {
			key string
			c   [2]uint64
		}{{askedKey, a.Asked}, {refusedKey, a.Refused}} {
			key, c := k.key, k.c
			h := n.store.Hash(q.id, key)
			if c[0] > 0 {
				n.store.CountPrevHashed(h, q.id, key, at, c[0])
			}
			if c[1] > 0 {
				n.store.CountHashed(h, q.id, key, at, c[1])
			}
		}
	}
}

// sideAsked returns a reader of what p's side (the replicas of the PoPs
// it does not list as unheard) was asked in a window, from the asked
// window q's counts this node holds.
func (n *Node) sideAsked(p *partition, q *ruleState) func(win int64) uint64 {
	ours := func(rep crdt.ReplicaID) bool { return !p.others.of(p, n.store, rep) }
	return func(win int64) uint64 {
		c, _ := n.store.CountIn(q.id, askedKey, win, ours)
		return c
	}
}
