package pop

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/replicated/modes"
)

// Rules' modes set at run time: the kill switch.
//
// A rule's mode may be set while the node runs (SetRuleMode: enforce,
// shadow or off), and cleared again so that the rule's own Mode applies.
// Each rule name holds one modes.RuleMode, a last-writer-wins register:
// the write with the later time wins (then the writer, then the mode), so
// nodes that hold the same writes agree whatever order they came in. The
// replication layer sends a node's own writes to every other node at once
// (TakeModes) and every write held with each anti-entropy round (Modes);
// what arrives merges with MergeModes, and a state file keeps them
// (SnapshotEach, RestoreDelta).
//
// The decision path looks nothing up by name and reads no more than it
// did before the switch existed: the flag it tests before reading a count
// (ruleState.gated) is also set while the rule is off, and the effective
// mode (ruleState.mode) is one word read where the rule's own was. A
// reload (SetRules) applies the held modes to the new rules before they
// are used. A write for a rule the node does not have (removed by a
// reload, or not loaded here yet) is kept, orphaned, and applies when a
// rule of that name is loaded; at most MaxOrphanModes are kept, and when
// a reload leaves more, the oldest are dropped. The table therefore holds
// at most one write per rule plus MaxOrphanModes.
//
// Trust: who may set a mode and which writes the node takes is the
// Config.ModeAuthority's rule (modes.Authority: without keys, a write from
// another PoP must name a writer of that PoP; with keys, it must be
// signed). A write whose time is later than now plus the node's MaxSkew is
// refused, not clamped (clamping would give two nodes two different times
// for one write, and last writer wins would no longer converge). A write
// made here is dated on a hybrid logical clock: after now and after every
// write the node holds, so an operator's change always wins here over what
// the node took, whatever date a sender gave it.

// MaxOrphanModes is the most modes kept for rule names the node does not
// have.
const MaxOrphanModes = 64

// ErrBadMode is a mode that is not enforce, shadow, off or config.
var ErrBadMode = errors.New("pop: unknown mode (want enforce, shadow, off or config)")

// ParseRuleMode parses a mode to set at run time: "enforce", "shadow",
// "off", or "config" (clear: the rule's own mode applies), into a
// modes.RuleMode's Mode.
func ParseRuleMode(s string) (uint8, error) {
	switch s {
	case "config":
		return modes.Config, nil
	case "enforce":
		return modes.Enforce, nil
	case "shadow":
		return modes.Shadow, nil
	case "off":
		return modes.Off, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrBadMode, s)
}

// RuleModeName is ParseRuleMode's inverse.
func RuleModeName(m uint8) string {
	if m == modes.Config {
		return "config"
	}
	return Mode(m - 1).String()
}

// mode returns the mode decisions use: set at run time, or the rule's
// own. One atomic load, as a plain read of Rule.Mode would be.
func (r *ruleState) mode() Mode { return Mode(r.effMode.Load()) }

// off reports whether the rule is switched off. A decision reads it only
// once r.gated says the rule is guarded or off, so a rule never switched
// off pays nothing for the switch.
func (r *ruleState) off() bool { return r.mode() == Off }

// setOverride applies write m (of the rule's name) to the rule: m's mode,
// or the rule's own for modes.Config. The mode is stored before the
// gate, so a decision that sees the gate open sees the mode that opened it.
func (r *ruleState) setOverride(m modes.RuleMode) {
	mode := r.Mode
	if m.Mode != modes.Config {
		mode = Mode(m.Mode - 1)
	}
	r.effMode.Store(uint32(mode))
	r.gated.Store(r.guarded || mode == Off)
}

// modeTable holds the rules' modes set at run time. It is safe for
// concurrent use; its zero value is empty.
type modeTable struct {
	mu      sync.Mutex
	m       map[string]modes.RuleMode
	clock   int64       // the latest At of any write held: the hybrid logical clock
	pending []string    // names written here since the last TakeModes
	dirty   atomic.Bool // pending is not empty
	stats   ModeStats
}

// ModeStats are a node's cumulative counters of modes set at run time.
type ModeStats struct {
	// Set are writes made on this node (SetRuleMode).
	Set uint64
	// Merged are writes from other nodes that won over what the node held.
	Merged uint64
	// Unchanged are writes from other nodes that the node held, or older.
	Unchanged uint64
	// Future are writes refused for a time later than now plus MaxSkew.
	Future uint64
	// Untrusted are writes refused by the mode authority's trust rule:
	// unsigned or badly signed with keys, or naming a writer of another
	// PoP than the one that sent them without.
	Untrusted uint64
	// Refused are writes for unknown rule names refused because
	// MaxOrphanModes were held, and malformed ones.
	Refused uint64
	// Dropped are orphaned writes dropped by a reload that left more than
	// MaxOrphanModes.
	Dropped uint64
}

// ModeState is one rule's mode as GET /v1/status shows it.
type ModeState struct {
	// Rule is the rule's name.
	Rule string
	// Own is the rule's own mode (Rule.Mode); meaningless when Orphaned.
	Own Mode
	// Effective is the mode decisions use.
	Effective Mode
	// Set is the write in force, nil when none is (never set, or cleared).
	Set *modes.RuleMode
	// Orphaned: the node has no rule of that name; the write applies when
	// one is loaded.
	Orphaned bool
}

// SetRuleMode sets rule's mode at now on this node (m as ParseRuleMode
// returns it; modes.Config clears it) and returns the write, which
// the replication layer sends to every other node (TakeModes). Its time is
// now, or just after the latest write the node holds if that one is later,
// so that it always wins here; it is signed when the mode authority has
// keys, and refused (modes.ErrNoSignKey) on a node without a sign key. An unknown rule is ErrUnknownRule, except that an
// orphaned write may be cleared.
func (n *Node) SetRuleMode(now int64, rule string, m uint8) (modes.RuleMode, error) {
	if m > modes.Off {
		return modes.RuleMode{}, fmt.Errorf("%w: %d", ErrBadMode, m)
	}
	if err := n.modeAuth.CanSet(); err != nil {
		return modes.RuleMode{}, err
	}
	t := &n.modes
	t.mu.Lock()
	defer t.mu.Unlock()
	r := n.rules.Load().byName[rule]
	_, had := t.m[rule]
	if r == nil && !(had && m == modes.Config) {
		return modes.RuleMode{}, ErrUnknownRule
	}
	w := modes.RuleMode{Rule: rule, Mode: m, At: max(now, t.clock+1), By: n.self}
	n.modeAuth.Sign(&w)
	t.put(w, r)
	if !slices.Contains(t.pending, rule) {
		t.pending = append(t.pending, rule)
	}
	t.dirty.Store(true)
	t.stats.Set++
	return w, nil
}

// put stores write w and applies it to r (nil for an orphan). The caller
// holds t.mu.
func (t *modeTable) put(w modes.RuleMode, r *ruleState) {
	if t.m == nil {
		t.m = map[string]modes.RuleMode{}
	}
	t.m[w.Rule] = w
	t.clock = max(t.clock, w.At)
	if r != nil {
		r.setOverride(w)
	}
}

// MergeModes merges writes from src (another node, or a state file) at
// now: each wins over the write held for its rule if it is newer; writes
// the mode authority does not take from src, writes dated after now plus
// MaxSkew, malformed ones, and new ones for unknown rule names beyond
// MaxOrphanModes are refused. It keeps nothing of ms.
func (l Link) MergeModes(now int64, src modes.Source, ms []modes.RuleMode) {
	n := l.n
	if len(ms) == 0 {
		return
	}
	t := &n.modes
	t.mu.Lock()
	defer t.mu.Unlock()
	rs := n.rules.Load()
	// Of a batch's writes of one rule only the newest can win: the others
	// are not looked at further, so that a batch of many writes of one rule
	// costs at most one signature check (a check is the expensive step, and
	// a batch may hold thousands).
	var newest map[string]modes.RuleMode
	if len(ms) > 1 {
		newest = make(map[string]modes.RuleMode, min(len(ms), MaxOrphanModes))
		for _, m := range ms {
			if cur, ok := newest[m.Rule]; !ok || modes.Compare(m, cur) > 0 {
				newest[m.Rule] = m
			}
		}
	}
	for _, m := range ms {
		if newest != nil && newest[m.Rule] != m {
			t.stats.Unchanged++ // an older write of the batch, or a repeat
			continue
		}
		delete(newest, m.Rule)
		if m.Mode > modes.Off || m.Rule == "" || len(m.Rule) > crdt.MaxRuleNameLen || m.By.Validate() != nil {
			t.stats.Refused++
			continue
		}
		if m.At > now+n.maxSkew {
			t.stats.Future++
			continue
		}
		cur, had := t.m[m.Rule]
		if had && modes.Compare(m, cur) <= 0 {
			t.stats.Unchanged++
			continue
		}
		r := rs.byName[m.Rule]
		if !had && r == nil && t.orphans(rs) >= MaxOrphanModes {
			t.stats.Refused++
			continue
		}
		// Last, as it is the expensive step: only a write that would win
		// is checked against the mode authority.
		if n.modeAuth.Take(&m, src) != nil {
			t.stats.Untrusted++
			continue
		}
		t.put(m, r)
		t.stats.Merged++
	}
}

// orphans counts the writes for names rs has no rule of. The caller holds
// t.mu.
func (t *modeTable) orphans(rs *ruleSet) int {
	k := 0
	for name := range t.m {
		if rs.byName[name] == nil {
			k++
		}
	}
	return k
}

// storeRules publishes next as the rule table, with the modes set at run
// time applied to its rules first, and drops the oldest orphaned writes
// beyond MaxOrphanModes.
func (n *Node) storeRules(next *ruleSet) {
	t := &n.modes
	t.mu.Lock()
	defer t.mu.Unlock()
	var orphans []modes.RuleMode
	for name, m := range t.m {
		if r := next.byName[name]; r != nil {
			r.setOverride(m)
		} else {
			orphans = append(orphans, m)
		}
	}
	n.rules.Store(next)
	if len(orphans) <= MaxOrphanModes {
		return
	}
	slices.SortFunc(orphans, func(a, b modes.RuleMode) int { return modes.Compare(a, b) })
	for _, m := range orphans[:len(orphans)-MaxOrphanModes] {
		delete(t.m, m.Rule)
		t.stats.Dropped++
	}
}

// Modes returns every write held, sorted by rule name: what an
// anti-entropy round and a state file carry.
func (l Link) Modes() []modes.RuleMode {
	n := l.n
	t := &n.modes
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]modes.RuleMode, 0, len(t.m))
	for _, m := range t.m {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b modes.RuleMode) int { return cmp.Compare(a.Rule, b.Rule) })
	return out
}

// TakeModes returns the writes made on this node since the last call (nil
// when none: one atomic load), as they stand now.
func (l Link) TakeModes() []modes.RuleMode {
	n := l.n
	t := &n.modes
	if !t.dirty.Load() {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []modes.RuleMode
	for _, name := range t.pending {
		if m, ok := t.m[name]; ok {
			out = append(out, m)
		}
	}
	t.pending = t.pending[:0]
	t.dirty.Store(false)
	return out
}

// modeStats returns the node's counters of modes set at run time.
func (n *Node) modeStats() ModeStats {
	n.modes.mu.Lock()
	defer n.modes.mu.Unlock()
	return n.modes.stats
}

// RuleModes returns every rule's mode, sorted by name, then the orphaned
// writes in force (not cleared), sorted by name.
func (n *Node) RuleModes() []ModeState {
	t := &n.modes
	t.mu.Lock()
	defer t.mu.Unlock()
	rs := n.rules.Load()
	out := make([]ModeState, 0, len(rs.sorted))
	for _, r := range rs.sorted {
		st := ModeState{Rule: r.Name, Own: r.Mode, Effective: r.mode()}
		if m, ok := t.m[r.Name]; ok && m.Mode != modes.Config {
			st.Set = &m
		}
		out = append(out, st)
	}
	var orphans []ModeState
	for name, m := range t.m {
		if rs.byName[name] == nil && m.Mode != modes.Config {
			m := m
			orphans = append(orphans, ModeState{Rule: name, Effective: Mode(m.Mode - 1), Set: &m, Orphaned: true})
		}
	}
	slices.SortFunc(orphans, func(a, b ModeState) int { return cmp.Compare(a.Rule, b.Rule) })
	return append(out, orphans...)
}

// RuleMode returns rule's mode (as RuleModes), and false when the node
// has neither the rule nor a write in force for it.
func (n *Node) RuleMode(rule string) (ModeState, bool) {
	for _, st := range n.RuleModes() {
		if st.Rule == rule {
			return st, true
		}
	}
	return ModeState{}, false
}
