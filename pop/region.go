// Region voices: one PoP of a region publishes the region's totals to the
// other regions.

package pop

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/wire"
)

// regionVoice is the state of a node of its region's voice PoP: the
// region epoch its totals go out under and the (rule, key, window) whose
// region total changed since the last FlushRegion.
type regionVoice struct {
	on    atomic.Bool
	epoch atomic.Uint64

	mu    sync.Mutex
	dirty map[regionKey]struct{}

	// sparse remembers the region totals last published (sparse.go).
	sparse sparseTable
}

type regionKey struct {
	rule crdt.RuleID
	key  string
	win  int64
}

// SetRegionVoice tells the node whether its PoP speaks for its region, and
// the region epoch it speaks under (0: not known yet). While on, the node
// notes every global rule's (key, window) whose region total moves: by a
// change of its PoP's total (FlushTo) or a merge of another PoP's total of
// the region (ApplyFrom); FlushRegion hands them out. Off, it notes nothing
// and forgets what it noted. What the node merged of its own region's
// aggregate under epoch (relayed while epoch was a former one) is dropped:
// the node holds the PoP totals it sums, as SetEpoch drops the own PoP's.
// Safe for concurrent use.
func (l Link) SetRegionVoice(on bool, epoch uint64) {
	n := l.n
	if epoch != 0 && n.region.epoch.Swap(epoch) != epoch {
		n.applyMu.Lock()
		n.store.DropReplica(identity.RegionReplica(n.self.Region, epoch))
		n.applyMu.Unlock()
	}
	n.region.epoch.Store(epoch)
	if n.region.on.Swap(on) == on || on {
		return
	}
	n.region.mu.Lock()
	n.region.dirty = nil
	n.region.mu.Unlock()
}

// SetRegionSparse turns sparse updates of the region totals on among
// voices (the regions, counted as SetSparse counts PoPs) or off with
// voices <= 0; lag is as for SetSparse. A region total far below its
// limit then goes out only once it moved by replicated.SparseStep(limit, voices).
// Safe for concurrent use.
func (l Link) SetRegionSparse(voices int, lag time.Duration) {
	n := l.n
	n.region.sparse.minWidth.Store(int64(replicated.SparseMinWindow(max(lag, 0))))
	n.region.sparse.voices.Store(int64(max(voices, 0)))
}

// markRegion notes that the region total of (rule, key, win) moved. key
// must not alias a buffer its caller reuses.
func (n *Node) markRegion(rule crdt.RuleID, key string, win int64) {
	n.region.mu.Lock()
	if n.region.dirty == nil {
		n.region.dirty = map[regionKey]struct{}{}
	}
	n.region.dirty[regionKey{rule, key, win}] = struct{}{}
	n.region.mu.Unlock()
}

// regionMarks reports whether a delta from sender merged via scope moves
// the region totals this node notes: it speaks for its region and sender is
// another PoP of the region (or a former epoch of its own).
func (n *Node) regionMarks(sender identity.Replica, via Scope) bool {
	return via == ScopeGlobal && n.region.on.Load() && sender.Region == n.self.Region && !sender.IsRegion()
}

// FlushRegion returns the region totals that moved since the last call, of
// the keys owns accepts (nil: every key), under the region's aggregate
// replica region/*/*#epoch (SetRegionVoice), stamped with now: a region
// total is the node's own count plus every count of its region's replicas
// that it holds (its members' and the region's PoP totals of every epoch).
// The noted changes are cleared, owned or not: each key's owner publishes
// it. Nothing is returned, and nothing cleared, while the epoch is 0.
func (l Link) FlushRegion(now int64, owns func(key string) bool) wire.Delta {
	n := l.n
	ep := n.region.epoch.Load()
	d := wire.Delta{Sender: identity.RegionReplica(n.self.Region, ep), SentAt: now, Epoch: ep}
	if ep == 0 || !n.region.on.Load() {
		return d
	}
	n.region.mu.Lock()
	dirty := n.region.dirty
	n.region.dirty = nil
	n.region.mu.Unlock()
	if len(dirty) == 0 {
		return d
	}
	rs := n.rules.Load()
	sp := n.beginSparseOf(&n.region.sparse, rs, now, ep)
	defer sp.end()
	for k := range dirty {
		r := rs.byID[k.rule]
		if r == nil || r.Scope != ScopeGlobal {
			continue
		}
		if cur := r.index(now); k.win < cur-1 {
			continue // passed
		}
		if owns != nil && !owns(k.key) {
			continue
		}
		t, ok := n.store.RegionTotal(k.rule, k.key, k.win)
		if !ok || t == 0 {
			continue
		}
		if fe := (crdt.FlushEntry{Rule: k.rule, Key: k.key, Window: k.win, PoP: t}); sp.publish(n, r, &fe) {
			d.Entries = append(d.Entries, crdt.Entry{Rule: r.wire, Key: k.key, Window: k.win, Count: t})
		}
	}
	// A map's order is random: entries go out grouped by rule, sorted, so
	// that a message is the same at every run.
	slices.SortFunc(d.Entries, func(a, b crdt.Entry) int {
		if c := strings.Compare(a.Rule, b.Rule); c != 0 {
			return c
		}
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return int(a.Window - b.Window)
	})
	return d
}

// RegionAntiEntropyPart returns part of parts (AntiEntropyPart) of every
// live region total above 0 of the global rules' keys owns accepts, under
// the region's aggregate replica; empty while the node does not speak for
// its region or the region epoch is 0. With changed, only the totals that
// settled (AntiEntropyPart).
func (l Link) RegionAntiEntropyPart(now int64, owns func(key string) bool, part, parts int, changed bool) wire.Delta {
	n := l.n
	ep := n.region.epoch.Load()
	d := wire.Delta{Sender: identity.RegionReplica(n.self.Region, ep), SentAt: now, Epoch: ep}
	if ep == 0 || !n.region.on.Load() {
		return d
	}
	rs := n.rules.Load()
	n.store.RegionPart(n.indexFunc(rs, now), part, max(parts, 1), changed, func(e crdt.FlushEntry) {
		if r := rs.byID[e.Rule]; r != nil && r.Scope == ScopeGlobal && e.PoP > 0 && (owns == nil || owns(e.Key)) {
			d.Entries = append(d.Entries, crdt.Entry{Rule: r.wire, Key: e.Key, Window: e.Window, Count: e.PoP})
		}
	})
	return d
}
