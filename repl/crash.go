package repl

import "github.com/geolimit/geolimit/crdt"

// A down PoP is not a cut-off PoP.
//
// A PoP that crashes is silent, and so is one cut off: nothing the others
// hear while it is silent tells the two apart. What it says when it is
// heard again does: a PoP whose every node restarted comes back under a new
// epoch (a PoP of one node at every start), while one that was cut off
// comes back under the epoch it had. So a PoP whose last silence ended
// under a new epoch is taken for one that crashes, and while it is silent
// again it is not handed to the node core as unheard: the share policy
// keeps its last counts (they decay with their windows, as a dead PoP's
// would) and lets this side spend the rest of the limit, instead of
// holding it to its part of the fleet's traffic while the dead PoP's
// clients come here. A silence that ends under the same epoch was a cut,
// and the PoP's silences count as cuts again.
//
// The first crash of a PoP is taken for a cut, as before. If a PoP taken
// for one that crashes is cut off instead, it spends its share of the
// limit on its side of the cut while this side spends the rest: at most
// 1 + its share of the limit, which `keep` (every side the whole limit)
// exceeds.

// epochHeard notes that remote PoP p announced epoch: the first epoch
// heard after a silence tells a restart from a cut.
func (c *Core) epochHeard(p *peer, epoch uint64) {
	if !p.back || epoch == 0 {
		return
	}
	p.back = false
	if p.epoch != 0 {
		p.crashed = epoch != p.epoch
	}
}

// cutOff returns the PoPs of part (sorted) that the share policy takes for
// cut off: all but those taken for down.
func (c *Core) cutOff(part []crdt.PoPID) []crdt.PoPID {
	out := make([]crdt.PoPID, 0, len(part))
	for _, id := range part {
		if p := c.peers.get(id); p != nil && p.crashed {
			continue
		}
		out = append(out, id)
	}
	return out
}
