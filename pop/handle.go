package pop

import "github.com/geolimit/geolimit/crdt"

// RuleHandle is one rule of one rule table snapshot, resolved once by name:
// a caller that resolves a batch's rules up front decides every check of it
// against that snapshot, even if SetRules swaps the table meanwhile (a
// removed rule's counts are kept for two of its windows, so its handle
// still decides and counts). A handle of a rule whose retired counts were
// dropped answers ErrUnknownRule. The zero value is not a rule. Handles are
// plain values, safe for concurrent use.
type RuleHandle struct{ r *ruleState }

// Handle returns the handle of the rule called name in the current table.
func (n *Node) Handle(name string) (RuleHandle, bool) {
	r, ok := n.rules.Load().get(name)
	return RuleHandle{r}, ok
}

// Rule returns the rule the handle stands for.
func (h RuleHandle) Rule() Rule {
	if h.r == nil {
		return Rule{}
	}
	return h.r.Rule
}

// peekHandleWith decides like a check of the resolved rule h under o but
// counts nothing.
func (n *Node) peekHandleWith(now int64, h RuleHandle, key string, cost uint64, o Options) (Decision, error) {
	if h.r == nil || h.r.dropped.Load() {
		return Decision{}, ErrUnknownRule
	}
	var d Decision
	err := n.decideRule(&d, now, h.r, key, cost, o.Tier, 0, nil)
	return d, err
}

// prefetchHandle starts fetching the memory a decision of key under h
// reads first (the key's shard and slot), without waiting for it. A caller
// that decides a batch prefetches a few checks ahead, so that each decision
// finds its slot in cache: a decision waits for its slot under the shard's
// lock, whose atomic instructions keep one decision's miss from overlapping
// the next one's. It keeps nothing of key.
func (n *Node) prefetchHandle(h RuleHandle, key string) {
	if h.r == nil || len(key) == 0 || len(key) > crdt.MaxKeyLen {
		return
	}
	n.store.Hash(h.r.id, key) // hashes and prefetches; the hash is not kept
}
