package pop

import (
	"math"

	"github.com/geolimit/geolimit/crdt"
)

// What each replica was refused, replicated.
//
// A side's part of a share rule's demand before a cut (share_side.go) was
// read from its part of the admits. Over a key's limit the admits follow
// the replicas, not the demand (each takes its part of the headroom): a
// PoP of three nodes asked for two thirds of the requests admitted a
// third, and a failover of the other third onto it read as a side at half
// of the fleet's demand, never as one that took it over (0.47 of a central
// limiter's admits in the cut).
//
// So each node also counts, per global share rule, the cost it refused
// (crdt's SetCountRefused: at most twice a key's limit a window from any
// one key), and replicates it as its own count of one key of a window of
// its own beside the rule's, named by the rule's name and refusedWire.
// It travels as every count does (members, PoP totals, region voices,
// epochs, anti-entropy), and the window seen whole before a cut then
// holds what every PoP admitted and what it refused: what it was asked.
// Nothing decides on that window.
//
// Trust: a replica's refused count is what it says it refused, as its
// counts are what it says it admitted. The count is not clamped at a
// limit (a replica may refuse far more than any key's limit over many
// keys); where it is read, the fleet's refused cost is taken up to
// refusedReadCap times what the fleet admitted, so that a replica claiming
// the most it can moves a side's part of the demand no further than a
// fleet refusing that much would.

// refusedWire is the suffix of a refused window's name: no rule's name or
// window name holds '#' (identity.ValidName).
const refusedWire = "#refused"

// refusedKey is the one key a refused window counts.
const refusedKey = "refused"

// refusedReadCap is the most of the fleet's admits of a window its
// refused cost is taken for when a cut reads it.
const refusedReadCap = 4

// countsRefused reports whether rule state r counts its refused cost: a
// global share rule of counted windows.
func countsRefused(r *ruleState) bool {
	return r.OnPartition == Share && r.Scope == ScopeGlobal && r.Kind != Concurrency && !r.gcra && r.pacer == nil && r.cal == nil
}

// setRefused gives rs its refused window when it counts one (countsRefused),
// with the ID of the window of old it goes on with, and adds it to next;
// the store counts rs's refused cost or stops. Requires n.mu held.
func (n *Node) setRefused(rs *ruleState, old, next *ruleSet, kept map[crdt.RuleID]bool) error {
	if !countsRefused(rs) {
		n.store.SetCountRefused(rs.id, false)
		return nil
	}
	q := &ruleState{Rule: rs.Rule, width: rs.width, wire: rs.Name + refusedWire, sub: true, refusedOf: rs}
	q.Name = q.wire
	q.OnPartition = Keep
	q.More, q.Overrides, q.Tiers, q.DefaultTier = nil, nil, nil, ""
	q.clamp = math.MaxUint64
	if o := old.byWire[q.wire]; o != nil && o.width == q.width && !kept[o.id] {
		q.id = o.id
		kept[o.id] = true
	} else if id, ok := n.unretire(q); ok {
		q.id = id
	} else {
		id, err := n.allocID()
		if err != nil {
			return err
		}
		q.id = id
	}
	q.fp = q.Fingerprint()
	next.byID[q.id] = q
	next.byWire[q.wire] = q
	next.refusing = append(next.refusing, rs)
	n.store.SetProtect(q.id, 1)
	n.store.SetKeepSpent(q.id, false)
	n.store.SetCountRefused(rs.id, true)
	rs.refused = q
	return nil
}

// flushRefused adds to the own count of each refused window what the
// store refused of its rule's keys since the last flush, in the rule's
// window at now, so that the flush that follows sends it.
func (n *Node) flushRefused(rs *ruleSet, now int64) {
	for _, r := range rs.refusing {
		idx, el := r.split(now)
		c := n.store.TakeRefused(r.id, idx)
		if c == 0 {
			continue
		}
		q := r.refused
		n.store.CountHashed(n.store.Hash(q.id, refusedKey), q.id, refusedKey, crdt.Now{Index: idx, Elapsed: el, Width: q.width}, c)
	}
}
