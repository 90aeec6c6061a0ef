package crdt

import "testing"

// Peek reports a key's totals of the previous and current windows, own and
// remote, relative to the index asked, and changes nothing.
func TestPeek(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 2})
	if _, _, ok := st.Peek(1, "k", 10); ok {
		t.Fatal("a key not held is reported")
	}
	st.Admit(1, "k", at(9), 1<<40, 2, true)
	st.Admit(1, "k", at(10), 1<<40, 3, true)
	other, _ := st.Intern(rep("other", 1))
	st.Merge(1, "k", 10, 10, other, 4)
	tests := []struct {
		name      string
		index     int64
		prev, cur uint64
	}{
		{"current", 10, 2, 7},
		{"a window later", 11, 7, 0},
		{"two windows later", 12, 0, 0},
		{"behind the key", 9, 2, 7},
	}
	for _, tt := range tests {
		prev, cur, ok := st.Peek(1, "k", tt.index)
		if !ok || prev != tt.prev || cur != tt.cur {
			t.Errorf("%s: Peek = %d, %d, %v; want %d, %d, true", tt.name, prev, cur, ok, tt.prev, tt.cur)
		}
	}
	// Nothing rolled: the key's current window is still 10.
	if prev, cur, _ := st.Peek(1, "k", 10); prev != 2 || cur != 7 {
		t.Errorf("after peeks: %d, %d; want 2, 7", prev, cur)
	}
}

// PeekOf sums the remote replicas it is asked for, by window.
func TestPeekOf(t *testing.T) {
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 2})
	st.Admit(1, "k", at(10), 1<<40, 3, true)
	a, _ := st.Intern(rep("a", 1))
	b, _ := st.Intern(rep("b", 1))
	st.Merge(1, "k", 10, 9, a, 5)
	st.Merge(1, "k", 10, 10, a, 4)
	st.Merge(1, "k", 10, 10, b, 6)
	if _, _, ok := st.PeekOf(1, "none", 10, func(ReplicaID) bool { return true }); ok {
		t.Fatal("a key not held is reported")
	}
	prev, cur, ok := st.PeekOf(1, "k", 10, func(id ReplicaID) bool { return id == a })
	if !ok || prev != 5 || cur != 4 {
		t.Errorf("PeekOf(a) = %d, %d, %v; want 5, 4, true", prev, cur, ok)
	}
	if prev, cur, _ := st.PeekOf(1, "k", 10, func(ReplicaID) bool { return true }); prev != 5 || cur != 10 {
		t.Errorf("PeekOf(every remote) = %d, %d; want 5, 10 (own counts left out)", prev, cur)
	}
	if prev, cur, _ := st.PeekOf(1, "k", 11, func(ReplicaID) bool { return true }); prev != 10 || cur != 0 {
		t.Errorf("a window on: %d, %d; want 10, 0", prev, cur)
	}
}
