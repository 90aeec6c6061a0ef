package crdt

import "testing"

// StepForward carries a key of the window the clock left into the window
// it stepped into, own counts and all; other rules' keys, and keys of
// other windows, stay.
func TestStepForward(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 2})
	st.Admit(1, "k", at(9), 1<<40, 2, true)
	st.Admit(1, "k", at(10), 1<<40, 3, true)
	st.Admit(1, "old", at(8), 1<<40, 5, true)
	st.Admit(2, "k", at(10), 1<<40, 7, true)
	a, _ := st.Intern(rep("a", 1))
	st.Merge(1, "k", 10, 10, a, 4)
	st.Flush(func(FlushEntry) {})
	st.StepForward(func(r RuleID) (int64, int64, bool) { return 10, 11, r == 1 })
	if prev, cur, _ := st.Peek(1, "k", 11); prev != 2+4 || cur != 3 {
		t.Errorf("carried key: %d, %d; want 6, 3 (own counts a window on, the remote entry where it was)", prev, cur)
	}
	if prev, cur, _ := st.Peek(2, "k", 10); prev != 0 || cur != 7 {
		t.Errorf("other rule: %d, %d; want 0, 7", prev, cur)
	}
	if prev, cur, _ := st.Peek(1, "old", 9); prev != 5 || cur != 0 {
		t.Errorf("key of another window: %d, %d; want 5, 0", prev, cur)
	}
	// The carried counts go out again in their new windows.
	got := map[int64]uint64{}
	st.Flush(func(e FlushEntry) {
		if e.Rule == 1 && e.Key == "k" {
			got[e.Window] = e.Count
		}
	})
	if got[10] != 2 || got[11] != 3 {
		t.Errorf("flushed after the step: %v; want window 10: 2, 11: 3", got)
	}
}
