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
// clocks may be far too short. It is first told once the node's view
// holds what the fleet counted before it started (sparseReady); meanwhile
// every change is published.
func (c *Core) updateSparse(now int64) {
	v, lag := 0, time.Duration(0)
	if c.cfg.Sparse() && c.cfg.GlobalLink && c.cfg.FlushInterval > 0 && c.sparseReady(now) {
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

// sparseReady reports whether the node may leave out of its totals the
// changes of keys far below their limit: its estimate must tell a key near
// its limit, so its view must hold what the fleet counted before it
// started, and it must know how many PoPs publish totals. That holds
//   - with the PoPs expected known (Settings.ExpectedPoPs), once every one
//     of them has answered the startup sync (its re-send and relay, then
//     its marker), or at once when the whole PoP starts with the fleet
//     (Config.ColdStart: nothing was counted before);
//   - otherwise, one anti-entropy interval after start: by then every PoP
//     heard has re-sent its totals.
func (c *Core) sparseReady(now int64) bool {
	if now-c.startedAt >= int64(c.cfg.AntiEntropyInterval) {
		return true
	}
	if !c.hasExpected || !c.started {
		return false
	}
	return c.cfg.ColdStart || (c.cfg.StartupSync > 0 && !c.syncing && !c.syncTimedOut)
}

// sparseStats fills the sparse updates' figures of st.
func (c *Core) sparseStats(st *Stats) {
	st.SparseVoices = uint64(c.sparseVoices)
	skipped, held := c.node.SparseStats()
	st.SparseSkipped, st.SparseHeld = skipped, uint64(held)
}
