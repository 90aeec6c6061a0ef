// One key as this node sees it: View.

package pop

import (
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/window"
)

// KeyView is one key's state as this node sees it.
type KeyView struct {
	Rule     string
	Key      string
	Limit    uint64
	Estimate float64
	Windows  []crdt.WindowView
	// BlockedUntil is when the key's penalty block ends (Unix nanoseconds),
	// 0 when it is not blocked.
	BlockedUntil int64
	// More are the further windows of a rule of several, in the order of
	// Rule.More; Limit, Estimate and Windows above are the first window's.
	More []WindowKeyView
	// TAT is, for a GCRA rule, the key's theoretical arrival time (Unix
	// nanoseconds; 0 for a key not held), and Estimate the cost it has
	// spent and not yet earned back; Windows is empty.
	TAT int64
}

// WindowKeyView is one further window of a KeyView.
type WindowKeyView struct {
	Window   time.Duration
	Limit    uint64
	Estimate float64
	Windows  []crdt.WindowView
}

// View returns one key's live windows with per-replica counts and the
// current estimate, without counting anything.
func (n *Node) View(now int64, rule, key string) (KeyView, error) {
	r, ok := n.rules.Load().byName[rule]
	switch {
	case !ok:
		return KeyView{}, ErrUnknownRule
	case len(key) == 0:
		return KeyView{}, ErrEmptyKey
	case len(key) > crdt.MaxKeyLen:
		return KeyView{}, ErrKeyTooLong
	}
	if r.gcra || r.pacer != nil {
		v := KeyView{Rule: rule, Key: key, Limit: r.Limit}
		n.viewGCRA(now, r, &v, key)
		if until := n.blocks.Until(r.id, key); until > now {
			v.BlockedUntil = until
		}
		return v, nil
	}
	first := n.viewWindow(now, r, key)
	v := KeyView{Rule: rule, Key: key, Limit: r.Limit, Estimate: first.Estimate, Windows: first.Windows}
	if r.multi {
		for _, w := range r.wins[1:] {
			v.More = append(v.More, n.viewWindow(now, w, key))
		}
	}
	if until := n.blocks.Until(r.id, key); until > now {
		v.BlockedUntil = until
	}
	return v, nil
}

// viewWindow is View of one window of a rule.
func (n *Node) viewWindow(now int64, w *ruleState, key string) WindowKeyView {
	idx, el := w.split(now)
	v := WindowKeyView{Window: w.Window, Limit: w.Limit, Windows: []crdt.WindowView{}}
	if ws, ok := n.store.View(w.id, key, idx); ok {
		v.Windows = ws
	}
	var prev, curr uint64
	for _, wv := range v.Windows {
		switch wv.Index {
		case idx - 1:
			prev = wv.Total
		case idx:
			curr = wv.Total
		}
	}
	v.Estimate = window.Estimate(prev, curr, el, w.width)
	return v
}
