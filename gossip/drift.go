package gossip

import (
	"time"

	"github.com/geolimit/geolimit/repl"
)

// driftLog remembers the drift problems logged, so that each is logged once
// when it appears (and once when it is gone), however many heartbeats repeat
// it; and it rate-limits them, since what it logs comes from the network: a
// problem that comes back within driftLogEvery of being logged is not logged
// again, and at most driftLogBudget lines go out per driftLogEvery, the rest
// counted in one line at the end of the period. Used by the loop only.
type driftLog struct {
	version uint64
	seen    map[string]bool  // "pop rule" and "pop clock" keys of the last call
	logged  map[string]int64 // key -> when its appearance was last logged
	// The current period: its start, the lines logged in it and the ones
	// left out.
	start      int64
	lines      int
	suppressed int
}

// driftLogEvery is the period of the drift log's limits; driftLogBudget the
// lines it logs per period.
const (
	driftLogEvery  = time.Minute
	driftLogBudget = 100
)

// logDrift logs the problems of ds that are new since the last call, and
// the ones that went away, within the limits above.
func (r *Replicator) logDrift(ds []repl.PeerDrift, version uint64) {
	l := &r.drift
	if version == l.version {
		return
	}
	l.version = version
	now := r.clk.Now()
	l.roll(r, now)
	cur := map[string]bool{}
	for _, d := range ds {
		peer := d.String()
		if d.Skewed {
			k := peer + " clock"
			cur[k] = true
			if !l.seen[k] && l.allow(k, now) {
				r.log.Warn("gossip: remote pop's clock is off by more than limits.max_skew; its counts land in other windows",
					"pop", peer, "offset", d.ClockOffset.Round(time.Millisecond))
			}
		}
		for _, m := range d.Mismatches {
			k := peer + " " + m.Rule
			cur[k] = true
			if l.seen[k] || !l.allow(k, now) {
				continue
			}
			if m.Absent {
				r.log.Warn("gossip: remote pop has a global rule this node lacks; its counts are refused", "pop", peer, "rule", m.Rule)
			} else {
				r.log.Warn("gossip: global rule differs from a remote pop's (name, window, limit, scope or on_partition); counts of another window are not shared",
					"pop", peer, "rule", m.Rule, "window_ms", m.WindowMS, "peer_window_ms", m.PeerWindowMS)
			}
		}
	}
	for k := range l.seen {
		if cur[k] {
			continue
		}
		// Resolved: said only of a problem whose appearance was said, and
		// within the budget.
		if at, ok := l.logged[k]; ok && at > 0 && l.lines < driftLogBudget {
			l.lines++
			l.logged[k] = -at // its resolution is said: not again until it is logged anew
			r.log.Info("gossip: drift resolved", "what", k)
		}
	}
	l.seen = cur
}

// allow reports whether the appearance of problem k may be logged at now,
// and counts it either way.
func (l *driftLog) allow(k string, now int64) bool {
	if l.logged == nil {
		l.logged = map[string]int64{}
	}
	at, ok := l.logged[k]
	if at < 0 {
		at = -at
	}
	if (ok && now-at < int64(driftLogEvery)) || l.lines >= driftLogBudget {
		l.suppressed++
		return false
	}
	l.lines++
	l.logged[k] = now
	return true
}

// roll starts a new period once the current one is over: it says how many
// lines were left out and forgets the problems logged before it.
func (l *driftLog) roll(r *Replicator, now int64) {
	if now-l.start < int64(driftLogEvery) {
		return
	}
	if l.suppressed > 0 {
		r.log.Warn("gossip: drift log lines left out (a problem that came back within the period, or over the budget); see /v1/status drift",
			"lines", l.suppressed, "period", driftLogEvery, "budget", driftLogBudget)
	}
	l.start, l.lines, l.suppressed = now, 0, 0
	for k, at := range l.logged {
		if at < 0 {
			at = -at
		}
		if now-at >= int64(driftLogEvery) {
			delete(l.logged, k)
		}
	}
}
