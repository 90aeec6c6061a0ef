package repl

import (
	"time"
)

// Sparse updates (Settings.SparseUpdates): the Core tells its node how many
// PoPs publish totals of a key, so that a total far below its limit is
// published only when it has moved by replicated.SparseStep.

// updateSparse tells the node the voices of sparse updates: this PoP and
// every remote PoP tracked, heard or not (a PoP cut off now holds its
// totals' remainder when it is heard again), and the lag of a change: a
// flush interval and the speaker's delay, plus the global allowance's
// horizon or a heartbeat interval (the latency the allowance assumes of a
// PoP not measured yet), whichever is longer: a horizon measured on skewed
// clocks may be far too short. It is first told
// at the first check of the peers one anti-entropy interval after start:
// meanwhile every change is published, while few PoPs are known and while
// the node's view of the keys may lack what the fleet counted before it
// started (its estimate then cannot tell a key near its limit; by then
// every other PoP has re-sent its totals).
func (c *Core) updateSparse(now int64) {
	v, lag := 0, time.Duration(0)
	if c.cfg.Sparse() && c.cfg.GlobalLink && c.cfg.FlushInterval > 0 && now-c.startedAt >= int64(c.cfg.AntiEntropyInterval) {
		v = 1 + len(c.peers.m)
		if c.hasExpected {
			v = max(v, 1+len(c.cfg.ExpectedPoPs))
		}
		lag = c.cfg.FlushInterval + c.cfg.SpeakDelay + max(c.allow[1].Horizon, c.cfg.HeartbeatInterval)
	}
	rv := 0
	if v > 0 && c.regionVoices() {
		// What a node misses of a key is what every PoP left out of its
		// total plus what every region left out of its own: each half of
		// the bound (region.go).
		v, rv = 2*v, 2*c.regionCount()
	}
	if v != c.sparseVoices || lag != c.sparseLag || rv != c.region.sparseVoices {
		c.sparseVoices, c.sparseLag, c.region.sparseVoices = v, lag, rv
		c.node.SetSparse(v, lag)
		c.node.SetRegionSparse(rv, lag)
	}
}

// sparseStats fills the sparse updates' figures of st.
func (c *Core) sparseStats(st *Stats) {
	st.SparseVoices = uint64(c.sparseVoices)
	skipped, held := c.node.SparseStats()
	st.SparseSkipped, st.SparseHeld = skipped, uint64(held)
}
