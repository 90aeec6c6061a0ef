package repl

import (
	"slices"

	"github.com/geolimit/geolimit/identity"
)

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
// and the PoP's silences count as cuts again. Under region voices a PoP of
// another region tells its epoch in its turns of its region's heartbeats;
// one alone in its region, whose turns they all are, tells it so at every
// beat.
//
// A restart is remembered for ForgetAfter (10 minutes by default): a PoP
// that restarted long ago is taken for cut off again when it goes silent.
//
// Two more signals tell a down PoP before it restarts. One that stopped
// cleanly said goodbye (goodbye.go). And under region voices, a silent PoP
// of another region whose region this node still hears is silent to its
// region as well: were it heard there, its region's heartbeats would list
// it (regionbeat.go), and this node would hear it through them. It is
// taken for down (heardRegions). And a silent PoP that the PoPs of its
// region this node still hears no longer list as heard in their heartbeats
// is silent to its region too (mates.go): taken for down, without region
// voices or in the own region. Otherwise (a PoP alone in its region, or a
// region silent whole) the first crash of a PoP is taken for a cut.
//
// If a PoP taken for one that crashes is cut off instead, it spends its
// share of the limit on its side of the cut while this side spends the
// rest: at most 1 + its share of the limit, which `keep` (every side the
// whole limit) exceeds.

// epochHeard notes that remote PoP p announced epoch: the first epoch
// heard after a silence tells a restart from a cut.
func (c *Core) epochHeard(p *peer, epoch uint64) {
	if !p.back || epoch == 0 {
		return
	}
	p.back = false
	if p.epoch != 0 {
		p.crashed = epoch != p.epoch
		p.crashedAt = p.lastHeard
	}
}

// cutOff returns the PoPs of part (sorted) that the share policy takes for
// cut off at now: all but those taken for down (and those that said
// goodbye, goodbye.go).
func (c *Core) cutOff(now int64, part []identity.PoPID) []identity.PoPID {
	out := make([]identity.PoPID, 0, len(part))
	heard := c.heardRegions(part)
	listed := c.listedAt(part) // mates.go
	for _, id := range part {
		p := c.peers.get(id)
		if p != nil && (p.gone || p.crashed && now-p.crashedAt <= int64(c.cfg.ForgetAfter)) {
			continue
		}
		if p != nil && p.heardOnce && (c.regionHearsItGone(p, heard[id.Region]) || c.matesHearItGone(p, listed[id.Region])) {
			continue
		}
		out = append(out, id)
	}
	return out
}

// heardRegions returns, under region voices and when part holds a PoP of
// another region, the PoPs of each other region that can speak for it
// (Core.counts) and are not silent; nil otherwise.
func (c *Core) heardRegions(part []identity.PoPID) map[string][]*peer {
	if !c.regionVoices() || !slices.ContainsFunc(part, func(id identity.PoPID) bool { return id.Region != c.selfPoP.Region }) {
		return nil
	}
	heard := map[string][]*peer{}
	for id, p := range c.peers.m {
		if id.Region != c.selfPoP.Region && !p.down && c.counts(p) {
			heard[id.Region] = append(heard[id.Region], p)
		}
	}
	return heard
}

// regionHearsItGone reports whether silent PoP p of another region is
// silent to its region too, of whose PoPs mates are those this node hears:
// one of them was heard without a break from before p's last message until
// PeerTimeout after it, so the region's heartbeats, which list the PoPs
// their sender hears (regionbeat.go), went on without p. A region cut off
// whole, whose PoPs time out here one by one, or heard again after a cut
// before p is, does not take p for down.
func (c *Core) regionHearsItGone(p *peer, mates []*peer) bool {
	for _, q := range mates {
		if q.heardSince <= p.lastHeard && q.lastHeard > p.lastHeard+int64(c.cfg.PeerTimeout) {
			return true
		}
	}
	return false
}

// unheardNames returns the names of the PoPs of part ("region/pop"), and
// "region/*" for each other region all of whose PoPs are in it (region
// voices).
func (c *Core) unheardNames(part []identity.PoPID) []string {
	names := make([]string, len(part))
	for i, p := range part {
		names[i] = p.String()
	}
	return c.unheardRegions(part, names) // region.go
}

// tellDown tells the node core which PoPs of part are taken for down:
// those not in cut, the names of the PoPs taken for cut off.
func (c *Core) tellDown(now int64, part []identity.PoPID, cut []string) {
	var down []string
	for _, n := range c.unheardNames(part) {
		if !slices.Contains(cut, n) {
			down = append(down, n)
		}
	}
	if slices.Equal(down, c.down) {
		return
	}
	c.down = down
	c.node.SetDown(now, down)
}

// SetDown forwards to the node core, on its clock.
func (f fleetNode) SetDown(now int64, pops []string) { f.Node.SetDown(now+*f.corr, pops) }

// Restorer returns whether a node of PoP self that restarts merges the
// counts of a replica from its state file (pop.Node.RestoreDelta), under
// settings s (region voices chosen once, for every delta of the file). With region voices on, a PoP total of the node's own region
// is not merged: when its whole region restarted, the region starts a new
// region epoch whose totals, summed from the PoP totals the region holds,
// would hold those former counts again, while the other regions keep the
// former region total that holds them already, and relay it back here
// (region.go, stateRegion). When only part of the region restarted, the
// region's other PoPs relay the PoP's former totals (relay.go). Either way
// they come back once, under the identity that counted them first. The
// PoP's per-node counts and the other regions' totals are merged as
// without region voices.
func (s Settings) Restorer(self identity.PoPID) func(r identity.Replica) bool {
	voices := s.Voices(self)
	return func(r identity.Replica) bool {
		return !voices || !r.IsPoP() || r.IsRegion() || r.Region != self.Region
	}
}
