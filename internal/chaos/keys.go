package chaos

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"time"

	"github.com/geolimit/geolimit/sim"
)

// keyView is the part of GET /v1/keys/{rule}/{key} the harness reads.
type keyView struct {
	Windows []struct {
		Index int64  `json:"index"`
		Total uint64 `json:"total"`
	} `json:"windows"`
}

// LostCheck is the lost-admits check of one key.
type LostCheck struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	// FromS is where the windows the nodes still hold begin (seconds from
	// the run's start): the admits sent from then on are checked.
	FromS float64 `json:"from_s"`
	// Admitted is what the live load saw admitted of the requests it sent
	// at FromS or later (decided in those windows for certain), Held the
	// most any running node's count holds of those windows.
	Admitted  uint64 `json:"admitted"`
	Held      uint64 `json:"held"`
	Lost      uint64 `json:"lost"`
	Converged bool   `json:"converged"`
	// Straddling counts the admits sent before FromS (plus nodeClockLag)
	// and answered after it: decided in either window, so left out of
	// Admitted.
	Straddling uint64 `json:"straddling"`
	// ByNode is what each running node holds from FromS on.
	ByNode map[string]uint64 `json:"by_node"`
}

// nodeClockLag is how far behind the harness's clock a node's may be when
// it decides: the daemon reads a clock that a goroutine refreshes every
// millisecond, and on a loaded machine that goroutine runs late. A request
// sent that soon after a window's start may be counted in the window
// before.
const nodeClockLag = 50 * time.Millisecond

// checkLost waits (up to timeout) until every running node holds the same
// counts of each key the load admitted, then compares what the nodes hold
// with what the load recorded: admits no node's count holds are lost.
func checkLost(ctx context.Context, f *fleet, sc *sim.Scenario, ds []sim.Decision, spans []span, t0 time.Time, timeout time.Duration) ([]LostCheck, error) {
	type rk struct{ rule, key string }
	width := map[string]time.Duration{}
	for _, r := range sc.Rules {
		width[r.Name] = time.Duration(r.Window)
	}
	keys := map[rk][]span{}
	for i, d := range ds {
		if d.Admitted {
			k := rk{d.Rule, d.Key}
			keys[k] = append(keys[k], spans[i])
		}
	}
	order := make([]rk, 0, len(keys))
	for k := range keys {
		order = append(order, k)
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].rule != order[j].rule {
			return order[i].rule < order[j].rule
		}
		return order[i].key < order[j].key
	})
	if len(order) > 64 {
		order = order[:64] // bounded: the first 64 keys by name
	}
	views := func(k rk) (map[string]keyView, error) {
		out := map[string]keyView{}
		for _, n := range f.nodes {
			if !n.running() {
				continue
			}
			var v keyView
			if err := getJSON(ctx, n.api+"/v1/keys/"+url.PathEscape(k.rule)+"/"+url.PathEscape(k.key), &v); err != nil {
				return nil, fmt.Errorf("chaos: %s: %w", n.name, err)
			}
			out[n.name] = v
		}
		return out, nil
	}
	// held returns, from the views, the first window index held and the
	// most any node holds from it on; same is set when every node agrees.
	held := func(vs map[string]keyView) (first int64, most uint64, same bool) {
		first = -1
		for _, v := range vs {
			for _, w := range v.Windows {
				if w.Total > 0 && (first < 0 || w.Index < first) {
					first = w.Index
				}
			}
		}
		same = true
		var prev *uint64
		for _, v := range vs {
			var sum uint64
			for _, w := range v.Windows {
				if w.Index >= first {
					sum += w.Total
				}
			}
			most = max(most, sum)
			if prev != nil && *prev != sum {
				same = false
			}
			prev = &sum
		}
		return first, most, same
	}
	var out []LostCheck
	deadline := time.Now().Add(timeout)
	for _, k := range order {
		var vs map[string]keyView
		var first int64
		var most uint64
		var same bool
		for {
			var err error
			if vs, err = views(k); err != nil {
				return nil, err
			}
			first, most, same = held(vs)
			if same || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		c := LostCheck{Rule: k.rule, Key: k.key, Held: most, Converged: same, ByNode: map[string]uint64{}}
		for name, v := range vs {
			for _, w := range v.Windows {
				if w.Index >= first {
					c.ByNode[name] += w.Total
				}
			}
		}
		if first >= 0 && width[k.rule] > 0 {
			from := time.Unix(0, first*int64(width[k.rule])).Sub(t0)
			c.FromS = round3(from.Seconds())
			for _, s := range keys[k] {
				switch {
				case s.sent >= from+nodeClockLag:
					c.Admitted++
				case s.got >= from:
					c.Straddling++
				}
			}
		}
		if c.Admitted > c.Held {
			c.Lost = c.Admitted - c.Held
		}
		out = append(out, c)
	}
	return out, nil
}
