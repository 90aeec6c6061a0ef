package pop

import (
	"github.com/geolimit/geolimit/window"
)

// The escrow policy (experimental), a bounded-counter alternative to Share.
//
// Every PoP may spend only its escrow of a key's limit, at all times, not only
// once a partition is noticed. The escrows are re-split at every window from
// the per-PoP counts of the previous window, which every PoP holds alike, so
// they add up to the limit without any message:
//
//	escrow(p) = limit * (EscrowSlack/N + (1-EscrowSlack) * count_p(w-1)/count(w-1))
//
// with N the PoPs that wrote to w-1 (or an equal split when w-1 is empty).
// A PoP's own trailing estimate must stay within its escrow, on top of the
// usual global test. The sides of a partition therefore never admit more
// than the limit together, even before the cut is noticed, at the price of
// rejecting a PoP whose traffic grows faster than the escrow follows.

// EscrowSlack is the part of the limit an escrow splits equally between the
// PoPs rather than by traffic, so a PoP with little past traffic is not starved.
const EscrowSlack = 0.1

// escrowLimit returns the most this PoP may spend on key at idx/elapsed.
func (n *Node) escrowLimit(r *ruleState, key string, idx, elapsed int64) float64 {
	mine, all, pops := n.store.PoPTotals(r.id, key, idx)
	known := max(pops, n.knownPoPs())
	frac := 1 / float64(known)
	if all[0] > 0 {
		frac = EscrowSlack/float64(known) + (1-EscrowSlack)*float64(mine[0])/float64(all[0])
	}
	// Spend against this PoP's own trailing estimate: the escrow bounds the
	// PoP's part, the global test the total.
	mineEst := window.Estimate(mine[0], mine[1], elapsed, r.width)
	allEst := window.Estimate(all[0], all[1], elapsed, r.width)
	return frac*float64(r.Limit) + (allEst - mineEst)
}

// knownPoPs counts the distinct PoPs among the replicas this node knows.
func (n *Node) knownPoPs() int { return n.store.PoPs() }
