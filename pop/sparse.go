// Sparse updates: a PoP total far below its limit is published only when it
// has moved by a step.

package pop

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/window"
)

// SetSparse turns sparse updates of the PoP totals on among voices PoPs
// (this one included: the PoPs that publish totals of a key), or off with
// voices <= 0; lag is the time a change takes to reach every node (a flush
// interval, the speaker's delay and the latency to the farthest PoP). The
// replication core tells the node, and tells it again when they change.
// Sparse updates apply to global rules of one window of at least
// replicated.SparseMinWindow(lag) (not GCRA, not several windows, overrides or tiers);
// Flush and FlushTo then leave out a PoP total that moved by less than
// SparseStep since this node last published it, while the key's estimate is
// below SparseNear, and while no PoP is unheard (SetUnheard) nor was for
// the heal hold. A periodic anti-entropy round sends a total once it
// settled (AntiEntropyPart), so what was left out waits until the key's
// total stops moving or moves by a step. Safe for concurrent use.
func (l Link) SetSparse(voices int, lag time.Duration) {
	n := l.n
	n.sparse.minWidth.Store(int64(replicated.SparseMinWindow(max(lag, 0))))
	n.sparse.voices.Store(int64(max(voices, 0)))
}

// SparseStats reports what sparse updates left out of the flushes and how
// many (rule, key, window) published totals the node remembers.
func (l Link) SparseStats() (skipped uint64, held int) {
	n := l.n
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
	step := replicated.SparseStep(r.Limit, f.voices)
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
	return res.Estimate >= replicated.SparseNear(r.Limit)
}
