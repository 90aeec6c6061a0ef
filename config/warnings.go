package config

import (
	"fmt"

	"github.com/geolimit/geolimit/pop"
)

// Warnings returns what in a valid config works, but not as its author may
// expect, one sentence each naming the fields: windows too short for the
// clock skew the node tolerates (limits.max_skew) or for the time a cut
// takes to notice (replication.peer_timeout). The daemon logs them at start
// and on every reload; edge -check-config prints them.
func (c *Config) Warnings() []string {
	rules, err := PopRules(c.Rules)
	if err != nil {
		return nil // Validate reports it
	}
	skew, peer := c.Limits.MaxSkew.D(), c.Replication.WithDefaults().PeerTimeout
	var out []string
	for i, r := range rules {
		if r.Scope == pop.ScopeNode {
			continue // nothing replicated: neither clocks nor cuts matter
		}
		if r.Kind == pop.Concurrency {
			if fl := c.Replication.WithDefaults().FlushInterval; 2*fl > r.LeaseTTL {
				out = append(out, fmt.Sprintf("rules[%d] (%s): lease_ttl %s is less than twice replication.flush_interval (%s): the PoP's members may let a live holder's in-flight count lapse between two flushes; raise lease_ttl", i, r.Name, r.LeaseTTL, fl))
			}
			continue // no window
		}
		w := r.Window
		for _, l := range r.More {
			w = min(w, l.Window)
		}
		if w < 2*skew {
			out = append(out, fmt.Sprintf("rules[%d] (%s): window %s is less than twice limits.max_skew (%s): a peer's clock may run ahead by a large part of the window and its counts land in windows this node has not reached; keep clocks within a few percent of the window, and lower limits.max_skew to about a quarter of it", i, r.Name, w, skew))
		}
		if r.Scope == pop.ScopeGlobal && r.OnPartition == pop.Share && w < 2*peer {
			out = append(out, fmt.Sprintf("rules[%d] (%s): window %s is less than twice replication.peer_timeout (%s): a cut is noticed only after peer_timeout, so share starts late in the window; lower replication.peer_timeout well under the window", i, r.Name, w, peer))
		}
	}
	return out
}
