package crdt

import (
	"sort"
)

// WindowView is one window of one key as seen by this store.
type WindowView struct {
	Index    int64
	Total    uint64
	Replicas map[string]uint64 // by Replica.String()
}

// View returns the live windows of (rule, key) relative to nowIndex, oldest
// first, with per-replica counts, without changing anything. ok is false when
// the key is not held.
func (s *Store) View(rule RuleID, key string, nowIndex int64) (views []WindowView, ok bool) {
	sl, side, found := s.slotAndSide(rule, key, nil)
	if !found {
		return nil, false
	}
	byWin := map[int64]*WindowView{}
	add := func(w int64, rep string, c uint64) {
		v := byWin[w]
		if v == nil {
			v = &WindowView{Index: w, Replicas: map[string]uint64{}}
			byWin[w] = v
		}
		v.Replicas[rep] = c
		v.Total = satAdd(v.Total, c)
	}
	self := s.self.String()
	for k, c := range sl.own {
		if w := sl.win - 1 + int64(k); c > 0 && w >= nowIndex-1 {
			add(w, self, c)
		}
	}
	for _, e := range side {
		if w := e.win(sl.win); w >= nowIndex-1 {
			add(w, s.Replica(e.rep()).String(), e.count)
		}
	}
	for _, v := range byWin {
		views = append(views, *v)
	}
	sort.Slice(views, func(a, b int) bool { return views[a].Index < views[b].Index })
	return views, true
}
