package gossip

import (
	"time"

	"github.com/geolimit/geolimit/repl"
)

// driftLog remembers the drift problems logged, so that each is logged once
// when it appears (and once when it is gone): at most one line per remote
// PoP and rule, however many heartbeats repeat it. Used by the loop only.
type driftLog struct {
	version uint64
	seen    map[string]bool // "pop rule" and "pop clock" keys
}

// logDrift logs the problems of ds that are new since the last call, and
// the ones that went away.
func (r *Replicator) logDrift(ds []repl.PeerDrift, version uint64) {
	l := &r.drift
	if version == l.version {
		return
	}
	l.version = version
	now := map[string]bool{}
	for _, d := range ds {
		peer := d.String()
		if d.Skewed {
			k := peer + " clock"
			now[k] = true
			if !l.seen[k] {
				r.log.Warn("gossip: remote pop's clock is off by more than limits.max_skew; its counts land in other windows",
					"pop", peer, "offset", d.ClockOffset.Round(time.Millisecond))
			}
		}
		for _, m := range d.Mismatches {
			k := peer + " " + m.Rule
			now[k] = true
			if l.seen[k] {
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
		if !now[k] {
			r.log.Info("gossip: drift resolved", "what", k)
		}
	}
	l.seen = now
}
