package crdt

// StepForward moves the keys of the rules step names forward with the
// node's clock: the clock the node decides on stepped forward (a fleet
// clock's correction), and a key whose window is the one the clock left
// counted its own admits of that window and the one before on the clock
// before the step. On the clock after it they lie as far ahead as the step,
// so they move with it: step(rule) returns the window the rule's keys left
// and the one the clock stepped into (ok false: the rule's keys stay). Left
// where they were, a step of one window put them in the window before,
// where the sliding estimate weighs them by the time left of the window,
// though they were admitted in it: with 1 s windows, a PoP a second behind
// went to 1.25 of the limit in its first second. The entries already sent
// stay where they were (a G-counter is only ever raised; the windows they
// are resent in merge with them by maximum), which errs towards refusing,
// as a step back's rebase does. The remote entries outside the new live
// windows are dropped as a roll drops them, and so is the key's hot entry.
// It walks every key, under each shard's lock in turn: a clock steps
// seldom. step runs under a shard lock.
func (s *Store) StepForward(step func(RuleID) (from, to int64, ok bool)) {
	for si := range s.shards {
		sh := &s.shards[si]
		sh.mu.Lock()
		for i := range sh.slots {
			sl := &sh.slots[i]
			if sl.flags&flagLive == 0 {
				continue
			}
			from, to, ok := step(sl.rule)
			if !ok || sl.win != from || to <= from {
				continue
			}
			sh.carry(int32(i), sl, to)
		}
		sh.mu.Unlock()
	}
}

// carry moves slot i forward to window target > sl.win with its own counts
// (StepForward); the caller holds sh.mu.
func (sh *shard) carry(i int32, sl *slot, target int64) {
	if sl.flags&flagHot != 0 {
		sh.dropHot(i, sl)
	}
	prev := sl.win
	sl.win = target
	if target > sh.now[sl.rule] {
		sh.now[sl.rule] = target
	}
	sl.other = [2]uint64{}
	sl.mark = markAEChanged // re-laid: sent again
	if sl.flags&flagSide != 0 {
		sh.keepLive(i, sl, sh.side.get(i), prev, target)
	}
	sl.dirty &^= dirtyAll
	if sl.own[0] > 0 {
		sh.markDirty(i, sl, dirtyOwn0|dirtyPoP0)
	}
	if sl.own[1] > 0 {
		sh.markDirty(i, sl, dirtyOwn1|dirtyPoP1)
	}
}
