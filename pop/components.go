package pop

import "github.com/geolimit/geolimit/wire"

// The replicated features beside the counts, as the node composes them.
//
// Each feature's state, merge rule, wire section and trust rule live in
// its own package (replicated/blocks, replicated/memos,
// replicated/inflight; the counts in crdt; rules' modes, which travel at
// once rather than with a flush, in replicated/modes and modes.go). What
// the node adds is where the feature meets the rule table: which rules and
// scopes it takes, who may send it, its clamps, what it sends to whom. A
// part says that for one feature, and the node's Apply, Flush,
// AntiEntropy, State and Tick loop over the parts without knowing their
// insides (memberlist's Delegate interfaces are the model: the host
// composes behaviour it does not implement).
//
// A new replicated feature touches these files and no others:
//
//	replicated/<feature>/<feature>.go  its state and merge rule
//	replicated/<feature>/codec.go      its section's body: Check, Encode, Decode
//	replicated/<feature>/section.go    var Section = wire.Register(...): its kind
//	pop/<feature>.go                   its part: section, from (who may send
//	                                   it), apply (what each item may say),
//	                                   flush, antiEntropy, state, sweep
//	pop/components.go                  one entry in features
//	docs/security.md                   its row of the trust table, with the
//	                                   test that forges it
//
// Package wire, wire.Delta, and Apply, Flush, Tick, State and Stats do not
// change: the envelope codec loops over the registered sections and skips
// the kinds a binary does not register, so an older peer skips the new
// section and counts it.
type part interface {
	// section is the part's registered wire section.
	section() sectionLen
	// from reports whether a sender Apply accepted via (senderFits) may
	// send the part's section at all: the trust table's "who may send it"
	// (docs/security.md). A refused section is counted WrongScope whole.
	from(via Scope) bool
	// apply takes the part's items of d (some, from a sender from
	// accepts), received via, under its trust rule: what each item may
	// say, clamps included. It counts what it did in st. Requires
	// n.applyMu read-held.
	apply(n *Node, now int64, d *wire.Delta, via Scope, st *ApplyStats)
	// flush adds what changed since the last flush: to b.Local when local,
	// to b.PoP when pub (the node publishes its PoP's totals).
	flush(n *Node, rs *ruleSet, now int64, b *Batch, local, pub bool)
	// antiEntropy adds everything live that a round re-sends (with its
	// first part), of the keys owns accepts where the part publishes per
	// key.
	antiEntropy(n *Node, rs *ruleSet, now int64, b *Batch, owns func(string) bool)
	// state adds to self, the node's own delta, what a joining member
	// merges.
	state(n *Node, rs *ruleSet, now int64, self *wire.Delta)
	// sweep forgets what ended by now (Tick).
	sweep(n *Node, now int64)
}

// sectionLen is what the node needs of a part's wire section: how many
// items of it a delta carries (a *wire.Section of the part's item type).
type sectionLen interface{ Len(d *wire.Delta) int }

// partItems returns how many items d carries that Apply takes: its counts
// and the parts' sections' items.
func partItems(d *wire.Delta) int {
	n := len(d.Entries)
	for _, p := range features {
		n += p.section().Len(d)
	}
	return n
}

// features are the parts the node composes, in the order they apply.
var features = [...]part{blockPart{}, memoPart{}, inflightPart{}}
