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
// replicate as counts like any other.
//
// A key adds at most refusedCap times its rule's limit a window of
// refused cost: a flood of one key must not stand for the demand of the
// rule's other keys. A denial of a key without a hot entry (the hot table
// full, or a key new here) adds nothing, as it counts nothing in
// OwnDemand; nor does an admit of a key without room (evict.go).

// refusedCap is the most of its rule's limit a key's refused cost a window
// adds to its rule's.
const refusedCap = 2

// askedAcc is a rule's asked and refused cost in one shard, of windows
// win-1 ([0]) and win ([1]), not yet taken.
type askedAcc struct {
	win            int64
	asked, refused [2]uint64
}

// Asked is what TakeAsked hands out: the cost a rule's keys were asked
// (admitted or refused) and refused, in windows win-1 ([0]) and win ([1]).
type Asked struct {
	Asked, Refused [2]uint64
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
	sh.ask(rule, win, min(cost, most-before), true)
}

// ask counts cost asked of a key of rule in window win, refused or not.
// The caller holds sh.mu.
func (sh *shard) ask(rule RuleID, win int64, cost uint64, refused bool) {
	if int(rule) >= len(sh.asked) {
		sh.asked = append(sh.asked, make([]askedAcc, int(rule)+1-len(sh.asked))...)
	}
	a := &sh.asked[rule]
	a.to(win)
	i := 1 - int(a.win-win)
	if i < 0 {
		return // older than win-1, after its cost was taken: left out
	}
	a.asked[i] = satAdd(a.asked[i], cost)
	if refused {
		a.refused[i] = satAdd(a.refused[i], cost)
	}
}

// to moves a to window win, when it is later than a's: what a held of the
// window before win stays, the rest is forgotten uncounted.
func (a *askedAcc) to(win int64) {
	switch d := win - a.win; {
	case d <= 0:
		return
	case d == 1:
		a.asked = [2]uint64{a.asked[1], 0}
		a.refused = [2]uint64{a.refused[1], 0}
	default:
		*a = askedAcc{}
	}
	a.win = win
}

// TakeAsked returns the cost asked of rule's keys in windows win-1 and win
// since the last TakeAsked, and forgets it; cost of earlier windows is
// forgotten uncounted. A shard already in a later window (a decision a
// moment ahead) keeps its cost for a later take.
func (s *Store) TakeAsked(rule RuleID, win int64) Asked {
	var out Asked
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		if int(rule) < len(sh.asked) {
			a := &sh.asked[rule]
			a.to(win)
			if a.win == win {
				for i := range 2 {
					out.Asked[i] = satAdd(out.Asked[i], a.asked[i])
					out.Refused[i] = satAdd(out.Refused[i], a.refused[i])
				}
				a.asked, a.refused = [2]uint64{}, [2]uint64{}
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// dropAsked forgets what sh counted of rule (DropRule: its ID may serve
// another rule, of other windows). The caller holds sh.mu.
func (sh *shard) dropAsked(rule RuleID) {
	if int(rule) < len(sh.asked) {
		sh.asked[rule] = askedAcc{}
	}
}

// CountPrevHashed is CountHashed into window now.Index-1 (the window
// before now's): the cost a replica counted there and handed out late.
// It counts nothing when the key's windows moved past it, or when the key
// is not held.
func (s *Store) CountPrevHashed(h uint64, rule RuleID, key string, now Now, cost uint64) {
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.find(h, rule, key)
	if !ok {
		return
	}
	sl := &sh.slots[i]
	switch sl.win {
	case now.Index - 1:
		sl.own[1] = satAdd(sl.own[1], cost)
		sh.markDirty(i, sl, dirtyOwn1|dirtyPoP1)
	case now.Index:
		sl.own[0] = satAdd(sl.own[0], cost)
		sh.markDirty(i, sl, dirtyOwn0|dirtyPoP0)
	}
}

// CountIn returns (rule, key)'s count of window win: this replica's own,
// and those of the remote replicas pick selects (called after the key's
// shard is unlocked). ok is false when the key is not held.
func (s *Store) CountIn(rule RuleID, key string, win int64, pick func(ReplicaID) bool) (count uint64, ok bool) {
	var buf [16]sideEntry
	sl, es, found := s.slotAndSide(rule, key, buf[:0])
	if !found {
		return 0, false
	}
	switch sl.win {
	case win:
		count = sl.own[1]
	case win + 1:
		count = sl.own[0]
	}
	for _, e := range es {
		if e.win(sl.win) == win && pick(e.rep()) {
			count = satAdd(count, e.count)
		}
	}
	return count, true
}

func satMul(a, b uint64) uint64 {
	if a != 0 && b > ^uint64(0)/a {
		return ^uint64(0)
	}
	return a * b
}
