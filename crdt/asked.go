package crdt

import "slices"

// What a replica was asked.
//
// The counts say what each replica admitted. Over its limit, a key's
// admits follow the replicas (each takes its part of the headroom), not
// the demand: a PoP asked for two thirds of a key's requests may admit
// half of them. What a replica was asked for is its admits and what it
// refused; a store counts both per rule, for the rules it is told to
// (SetCountAsked), and hands them out with TakeAsked, for its owner to
// replicate as a count like any other.
//
// A key adds at most refusedCap times its limit a window of refused cost
// to its rule's: a flood of one key must not stand for the demand of the
// rule's other keys. A denial of a key without a hot entry (the hot table
// full, or a key new here) adds nothing, as it counts nothing in
// OwnDemand; nor does an admit of a key without room (evict.go).

// refusedCap is the most of a key's limit its refused cost a window adds
// to its rule's asked cost.
const refusedCap = 2

// askedWin is a rule's asked cost in one shard: cost of window win, not
// yet taken.
type askedWin struct {
	win  int64
	cost uint64
}

// SetCountAsked sets whether the store counts the cost its rule's keys
// were asked, admitted or refused (TakeAsked), limit the rule's largest
// limit: a key's refused cost counts up to refusedCap times it a window,
// whatever limit a decision passes (a partition's share passes less).
// limit 0 stops counting.
func (s *Store) SetCountAsked(rule RuleID, limit uint64) {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	old := s.rules.Load()
	t := *old
	t.ask = slices.Clone(old.ask)
	if int(rule) >= len(t.ask) {
		t.ask = append(t.ask, make([]uint64, int(rule)+1-len(t.ask))...)
	}
	t.ask[rule] = satMul(limit, refusedCap)
	s.rules.Store(&t)
}

// askCap returns the most refused cost a key of rule adds to its asked
// cost a window; 0 when rule's asked cost is not counted.
func (t *ruleTable) askCap(rule RuleID) uint64 {
	if int(rule) < len(t.ask) {
		return t.ask[rule]
	}
	return 0
}

// refuse counts cost refused of a key of rule in window win whose hot
// entry counted before of that window's refused cost before it, up to
// most. The caller holds sh.mu.
func (sh *shard) refuse(rule RuleID, win int64, before, cost, most uint64) {
	if before >= most {
		return
	}
	sh.ask(rule, win, min(cost, most-before))
}

// ask counts cost asked of a key of rule in window win. The caller holds
// sh.mu.
func (sh *shard) ask(rule RuleID, win int64, cost uint64) {
	if int(rule) >= len(sh.asked) {
		sh.asked = append(sh.asked, make([]askedWin, int(rule)+1-len(sh.asked))...)
	}
	a := &sh.asked[rule]
	switch {
	case win > a.win:
		*a = askedWin{win: win, cost: cost}
	case win == a.win:
		a.cost = satAdd(a.cost, cost)
	}
	// An older window's, after its cost was taken: left out.
}

// TakeAsked returns the cost asked of rule's keys in window win since the
// last TakeAsked, and forgets it. Cost of windows before win is forgotten
// uncounted.
func (s *Store) TakeAsked(rule RuleID, win int64) uint64 {
	var sum uint64
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		if int(rule) < len(sh.asked) {
			a := &sh.asked[rule]
			if a.win == win {
				sum = satAdd(sum, a.cost)
			}
			if a.win <= win {
				*a = askedWin{win: win}
			}
		}
		sh.mu.Unlock()
	}
	return sum
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > ^uint64(0)/a {
		return ^uint64(0)
	}
	return a * b
}
