package crdt

import (
	"math"
)

// Sweep removes every key whose windows have all passed (see shard.expired):
// nowIndex returns the current window index of a rule. It returns how many
// keys it removed.
func (s *Store) Sweep(nowIndex func(RuleID) int64) int {
	n := s.removeIf(func(sh *shard, i int32, sl *slot) bool { return sh.expired(i, sl, nowIndex(sl.rule)) })
	s.expired.Add(uint64(n))
	return n
}

// DropRule removes every key of rule (the rule was deleted or redefined).
func (s *Store) DropRule(rule RuleID) {
	s.removeIf(func(_ *shard, _ int32, sl *slot) bool { return sl.rule == rule })
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		if int(rule) < len(sh.now) {
			sh.now[rule] = math.MinInt64
		}
		if int(rule) < len(sh.agg) {
			sh.agg[rule] = aggregate{}
		}
		sh.dropAsked(rule)
		sh.dropSketch(rule)
		sh.mu.Unlock()
	}
	s.forgetRule(rule)
}

func (s *Store) removeIf(drop func(*shard, int32, *slot) bool) int {
	n := 0
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		for i := 0; i < len(sh.slots); i++ {
			if sl := &sh.slots[i]; sl.flags&flagLive != 0 && drop(sh, int32(i), sl) {
				sh.remove(s, int32(i))
				n++
				i-- // a later slot of the run may have shifted into i
			}
		}
		if len(sh.dirty) > 2*len(sh.slots)+64 {
			// Evictions left stale marks; keep only slots still marked.
			d := sh.dirty[:0]
			for _, i := range sh.dirty {
				if sh.slots[i].flags&flagInDirty != 0 {
					sh.slots[i].flags &^= flagInDirty
					d = append(d, i)
				}
			}
			for _, i := range d {
				sh.slots[i].flags |= flagInDirty
			}
			sh.dirty = d
		}
		sh.shrink(s)
		sh.mu.Unlock()
	}
	return n
}
