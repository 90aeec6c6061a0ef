// Sparse updates: a PoP total far below its limit is published only when it
// has moved by a step.

package pop

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/window"
)

// SparseStep returns the step of sparse updates for a rule of limit among
// voices PoPs: a PoP publishes a key's total again only once it has moved by
// at least the step since it last published it, unless the key is near its
// limit (SparseNear). It is floor(limit / (4 x voices)); a step of 1 or less
// (a small limit, many voices, or voices < 1) means every change is
// published.
//
// The bound: what one PoP leaves unpublished of a key's window is below
// the step, so the voices together leave less than limit/4 of each window,
// and a node's view of a key's sliding estimate (the previous window
// weighted by at most 1, plus the current one) is below the truth by less
// than limit/2, on top of the usual replication lag. That lag is at most
// lag/window of the limit for a key admitted at its limit's rate, where lag
// is the time a change takes to reach every node (a flush interval plus
// the allowance's horizon); sparse updates apply only to windows of at least
// SparseMinWindow(lag), where it is at most limit/8. A PoP publishes every
// change of a key whose estimate it sees at SparseNear (limit/4) or above.
// So when a key's true estimate reaches its limit, every view of it is above
// limit - limit/2 - limit/8 > limit/4: every PoP publishes the key's total
// at each flush as it would without sparse updates, and the views are exact
// up to the usual lag. Sparse updates then add no over-limit admits but
// those of the flush interval the last PoP takes to see the key near its
// limit, and none to a key below its limit.
func SparseStep(limit uint64, voices int) uint64 {
	if voices < 1 {
		return 0
	}
	return limit / (4 * uint64(voices))
}

// SparseNear returns the estimate of a key of limit at or above which its
// PoP totals are published at every change: a quarter of the limit.
func SparseNear(limit uint64) float64 { return float64(limit) / 4 }

// SparseMinWindow returns the shortest window whose rules take sparse
// updates when a change takes lag to reach every node: 8 x lag, so that the
// usual replication lag hides at most an eighth of a limit.
func SparseMinWindow(lag time.Duration) time.Duration { return 8 * lag }

// SetSparse turns sparse updates of the PoP totals on among voices PoPs
// (this one included: the PoPs that publish totals of a key), or off with
// voices <= 0; lag is the time a change takes to reach every node (a flush
// interval, the speaker's delay and the latency to the farthest PoP). The
// replication core tells the node, and tells it again when they change.
// Sparse updates apply to global rules of one window of at least
// SparseMinWindow(lag) (not GCRA, not several windows, overrides or tiers);
// Flush and FlushTo then leave out a PoP total that moved by less than
// SparseStep since this node last published it, while the key's estimate is
// below SparseNear, and while no PoP is unheard (SetUnheard) nor was for
// the heal hold. AntiEntropy sends every total, so what was left out waits
// at most one anti-entropy interval. Safe for concurrent use.
func (n *Node) SetSparse(voices int, lag time.Duration) {
	n.sparse.minWidth.Store(int64(SparseMinWindow(max(lag, 0))))
	n.sparse.voices.Store(int64(max(voices, 0)))
}

// SparseStats reports what sparse updates left out of the flushes and how
// many (rule, key, window) published totals the node remembers.
func (n *Node) SparseStats() (skipped uint64, held int) {
	n.sparse.mu.Lock()
	defer n.sparse.mu.Unlock()
	return n.sparse.skipped, n.sparse.held
}

// sparseTable remembers, for the keys this node published while sparse
// updates were on, the PoP total it last published, per (rule, window).
// A key not remembered counts as published at 0, which is never more than
// what the other PoPs hold of it (under the current epoch; a new epoch
// starts afresh). At most max totals are remembered: past it, keys not
// remembered are published at every change. Keys are held by the store's
// 64-bit hash of (rule, key), 16 bytes an entry: two keys of one hash
// (about one pair among 10^7 for a million keys, and not one a client can
// aim at: the daemon's store draws its hash seed at random) would share
// what was last published, so one of them could go unpublished until the
// next anti-entropy round.
type sparseTable struct {
	voices   atomic.Int64
	minWidth atomic.Int64 // nanoseconds

	mu      sync.Mutex // FlushTo's calls are serialised; SparseStats reads
	epoch   uint64
	wins    map[sparseWin]map[uint64]uint64
	held    int
	max     int
	skipped uint64
}

// sparseWin is one window of one rule: a rule's ID may serve another
// rule later (handle.go), whose windows another width numbers.
type sparseWin struct {
	rule  crdt.RuleID
	width int64
	win   int64
}

// sparseFlush is one flush's use of the table: begin returns nil when
// sparse updates are off.
type sparseFlush struct {
	t        *sparseTable
	voices   int
	minWidth int64
	now      int64
}

// beginSparse starts a flush at now under epoch: it forgets the totals of
// another epoch, of rules gone or of another width, and of windows no
// longer live (or further ahead than a flush holds: the clock went back).
// It returns nil when sparse updates are off.
func (n *Node) beginSparse(rs *ruleSet, now int64, epoch uint64) *sparseFlush {
	return n.beginSparseOf(&n.sparse, rs, now, epoch)
}

// beginSparseOf is beginSparse on table t: the PoP totals' (n.sparse) or
// the region totals' (n.region.sparse).
func (n *Node) beginSparseOf(t *sparseTable, rs *ruleSet, now int64, epoch uint64) *sparseFlush {
	v := int(t.voices.Load())
	t.mu.Lock()
	if t.epoch != epoch || v == 0 {
		t.wins, t.held, t.epoch = nil, 0, epoch
	}
	for w, m := range t.wins {
		r := rs.byID[w.rule]
		if r == nil || r.width != w.width {
			t.held -= len(m)
			delete(t.wins, w)
			continue
		}
		if idx, _ := r.split(now); w.win < idx-1 || w.win > idx+2 {
			t.held -= len(m)
			delete(t.wins, w)
		}
	}
	if v == 0 || epoch == 0 || n.cutAt(now) {
		t.mu.Unlock()
		return nil
	}
	return &sparseFlush{t: t, voices: v, minWidth: t.minWidth.Load(), now: now}
}

// cutAt reports whether some PoPs are unheard at now, or were until less
// than the heal hold before: the share policy may then hold a side to a
// share of its limits, near which a key's estimate tells nothing of the
// whole limit, so every change is published.
func (n *Node) cutAt(now int64) bool {
	p := n.part.Load()
	return p != nil && (p.healed == 0 || now-p.healed < n.healHold)
}

// end finishes the flush.
func (f *sparseFlush) end() {
	if f != nil {
		f.t.mu.Unlock()
	}
}

// publish reports whether the PoP total e.PoP of rule r is published now,
// and remembers it when it is.
func (f *sparseFlush) publish(n *Node, r *ruleState, e *crdt.FlushEntry) bool {
	if f == nil || r.multi || r.sub || r.gcra || r.pacer != nil || r.width < f.minWidth {
		return true
	}
	step := SparseStep(r.Limit, f.voices)
	if step <= 1 {
		return true
	}
	t := f.t
	w := sparseWin{r.id, r.width, e.Window}
	m := t.wins[w]
	h := n.store.KeyHash(r.id, e.Key)
	last, known := m[h]
	if e.PoP >= last+step || f.near(n, r, e.Key) {
		switch {
		case known:
			m[h] = e.PoP
		case t.held < t.max:
			if m == nil {
				if t.wins == nil {
					t.wins = map[sparseWin]map[uint64]uint64{}
				}
				m = map[uint64]uint64{}
				t.wins[w] = m
			}
			m[h] = e.PoP
			t.held++
		}
		return true
	}
	if !known && t.held >= t.max {
		return true // not remembered: published at every change
	}
	t.skipped++
	return false
}

// near reports whether key's estimate under r is at SparseNear or above.
func (f *sparseFlush) near(n *Node, r *ruleState, key string) bool {
	idx, el := r.split(f.now)
	prev, cur, ok := n.store.Peek(r.id, key, idx)
	if !ok {
		return true // not held: cannot tell
	}
	var res window.Result
	window.DecideTo(&res, r.Limit, 0, prev, cur, el, r.width)
	return res.Estimate >= SparseNear(r.Limit)
}
