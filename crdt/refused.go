package crdt

import "slices"

// What a replica refused.
//
// The counts say what each replica admitted. Over its limit, a key's
// admits follow the replicas (each takes its part of the headroom), not
// the demand: a PoP asked for two thirds of a key's requests may admit
// half of them. What a replica was asked for is its admits and what it
// refused; a store counts the second per rule, for the rules it is told
// to (SetCountRefused), and hands it out with TakeRefused, for its
// owner to replicate as a count like any other.
//
// A key adds at most refusedCap times its limit a window to the rule's
// refused cost: a flood of one key must not stand for the demand of the
// rule's other keys. A denial of a key without a hot entry (the hot table
// full, or a key new here) adds nothing, as it counts nothing in
// OwnDemand.

// refusedCap is the most of a key's limit its refused cost a window adds
// to its rule's.
const refusedCap = 2

// refusedWin is a rule's refused cost in one shard: cost of window win,
// not yet taken.
type refusedWin struct {
	win  int64
	cost uint64
}

// SetCountRefused sets whether the store counts the cost it refuses of
// rule's keys (TakeRefused).
func (s *Store) SetCountRefused(rule RuleID, on bool) {
	s.rulesMu.Lock()
	defer s.rulesMu.Unlock()
	old := s.rules.Load()
	t := *old
	t.refuse = slices.Clone(old.refuse)
	if int(rule) >= len(t.refuse) {
		t.refuse = append(t.refuse, make([]bool, int(rule)+1-len(t.refuse))...)
	}
	t.refuse[rule] = on
	s.rules.Store(&t)
}

// countsRefused reports whether rule's refused cost is counted.
func (t *ruleTable) countsRefused(rule RuleID) bool {
	return int(rule) < len(t.refuse) && t.refuse[rule]
}

// refuse counts cost refused of a key of rule in window win whose hot
// entry counted before of that window's refused cost before it, under a
// limit of limit. The caller holds sh.mu.
func (sh *shard) refuse(rule RuleID, win int64, before, cost, limit uint64) {
	most := satMul(limit, refusedCap)
	if before >= most {
		return
	}
	cost = min(cost, most-before)
	if sh.refused == nil {
		sh.refused = map[RuleID]refusedWin{}
	}
	r := sh.refused[rule]
	switch {
	case win > r.win:
		r = refusedWin{win: win, cost: cost}
	case win == r.win:
		r.cost = satAdd(r.cost, cost)
	default:
		return // an older window's, after its cost was taken: left out
	}
	sh.refused[rule] = r
}

// TakeRefused returns the cost refused of rule's keys in window win since
// the last TakeRefused, and forgets it. Cost of windows before win is
// forgotten uncounted.
func (s *Store) TakeRefused(rule RuleID, win int64) uint64 {
	var sum uint64
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		if r, ok := sh.refused[rule]; ok {
			if r.win == win {
				sum = satAdd(sum, r.cost)
			}
			if r.win <= win {
				sh.refused[rule] = refusedWin{win: win}
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
