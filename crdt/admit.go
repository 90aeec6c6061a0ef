package crdt

import (
	"hash/maphash"

	"github.com/geolimit/geolimit/window"
)

// AdmitResult is the outcome of Admit.
type AdmitResult struct {
	window.Result
	// Untracked is set when the key is new and the store had no room for
	// it: the request was decided, and counted when admitted, by the one
	// counter the rule's keys without room share (see evict.go).
	Untracked bool
}

// Admit decides a request of cost against limit for (rule, key) at now and,
// when it fits and count is true, adds cost to this replica's own count of the
// current window. If now lies a moment before the key's current window (a
// decision that read the clock just before another rolled the key) the
// request is decided at the start of the key's current window and counted
// there, so counts never move back in time; if it lies further back (the
// clock stepped back, see steppedBack), the key moves back to now's window
// with its own counts (see shard.rebase): counting on in windows the other
// replicas do not reach yet would count alone.
func (s *Store) Admit(rule RuleID, key string, now Now, limit, cost uint64, count bool) AdmitResult {
	return s.admit(rule, key, now, limit, cost, count, nil)
}

func (s *Store) admit(rule RuleID, key string, now Now, limit, cost uint64, count bool, a *Allowance) AdmitResult {
	var h uint64
	if s.fixedSeed == 0 {
		h = maphash.String(s.seed, key) ^ ruleMix(rule) // s.hash, inlined
	} else {
		h = s.hash(rule, key)
	}
	var res AdmitResult
	s.admitHashed(&res, h, rule, key, now, limit, cost, count, a)
	return res
}

// AdmitSplitHashed is AdmitSplit with h, the Hash of (rule, key), writing
// its result to *res: a decision's hot path does not copy it back.
func (s *Store) AdmitSplitHashed(res *AdmitResult, h uint64, rule RuleID, key string, now Now, limit, cost uint64, count bool, a *Allowance) {
	s.admitHashed(res, h, rule, key, now, limit, cost, count, a)
}

func (s *Store) admitHashed(res *AdmitResult, h uint64, rule RuleID, key string, now Now, limit, cost uint64, count bool, a *Allowance) {
	sh := s.shardOf(h)
	sh.mu.Lock()
	i, ok := sh.find(h, rule, key)
	res.Untracked = false
	r := &res.Result
	if !ok {
		if !count && (sh.used >= sh.cap || !sh.roomFor(sh.keyGrowth(len(key)))) {
			// A check of a new key in a full shard (by keys or by the
			// memory budget, as insert judges it): counted, it may find
			// no room (evictFor decides that, and only when counting), so
			// it is checked as a key without room, against the rule's
			// shared counter, which errs towards rejecting. A check and
			// the count after it then agree.
			*r = sh.admitUntracked(s, h, rule, now, limit, cost, false)
			res.Untracked = true
			sh.mu.Unlock()
			return
		}
		// A key new here has no own admits unseen: the allowance lets it in.
		// It starts from what its rule's sketch holds of it, if anything
		// (sketch.go).
		var est [2]uint64
		if k := sh.sketchOf(rule); k != nil {
			est = k.estimate(h, now.Index)
		}
		window.DecideTo(r, limit, cost, est[0], est[1], now.Elapsed, now.Width)
		if !r.Allowed || !count {
			sh.mu.Unlock()
			return
		}
		if i, ok = sh.insert(s, h, rule, key, now.Index); !ok {
			*r = sh.admitUntracked(s, h, rule, now, limit, cost, true)
			res.Untracked = true
			sh.mu.Unlock()
			return
		}
	}
	sl := &sh.slots[i]
	elapsed := now.Elapsed
	if now.Index > sl.win {
		sh.roll(i, sl, now.Index)
	} else if now.Index < sl.win {
		if steppedBack(sl, now) {
			sh.rebase(i, sl, now.Index)
		} else {
			elapsed = 0
		}
	}
	window.DecideTo(r, limit, cost, satAdd(sl.own[0], sl.other[0]), satAdd(sl.own[1], sl.other[1]), elapsed, now.Width)
	if r.Allowed && a != nil {
		// One call for all the allowance does here: a second call site
		// would keep registers of the common path on the stack.
		sh.admitAllowance(s, a, i, sl, now, elapsed, limit, cost, count, r)
	}
	if r.Allowed && count {
		sl.own[1] = satAdd(sl.own[1], cost)
		sh.markDirty(i, sl, dirtyOwn1|dirtyPoP1)
		if s.rules.Load().askCap(rule) > 0 {
			sh.ask(rule, sl.win, cost, false)
		}
	} else if count {
		// A denied key gets a hot entry, if it has none and the hot table
		// has room, before its mark: the entry then counts this denial and
		// the window's next ones (OwnDemand). A full table evicts for the
		// allowance's split only: a flood of keys each at its limit would
		// otherwise make and evict an entry at every denial (twice the
		// cost of one).
		t := now.Index*now.Width + now.Elapsed
		var e *hotEntry
		if sl.flags&flagHot != 0 || len(sh.hot) < s.hotPerShard {
			e = sh.hotOf(s, i, sl, t)
		}
		sl.mark |= markDenied1
		if e != nil {
			e.denied = t
			before, _ := e.deniedIn(sl.win)
			e.deny(sl.win, cost) // the window its mark says it was denied in
			if most := s.rules.Load().askCap(rule); most > 0 {
				sh.refuse(rule, sl.win, before, cost, most)
			}
		}
	}
	sh.mu.Unlock()
}
