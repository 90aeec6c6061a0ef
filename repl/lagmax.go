package repl

// lagMax is the largest latency among the remote PoPs that count for the
// near-limit allowance, kept as a tournament tree
// over the PoPs' slots (peerTable gives each PoP one): a sample that lowers
// the latency of the farthest PoP costs a walk up the tree, O(log PoPs),
// where finding the next farthest took a walk over every PoP. A slot
// holds -1 for a PoP that does not count.
type lagMax struct {
	// v is the tree: v[1] the largest latency, the slots' at
	// v[size+slot].
	v    []int64
	size int
}

// reset makes every slot of a tree for at least slots PoPs not count.
func (t *lagMax) reset(slots int) {
	size := 1
	for size < slots {
		size <<= 1
	}
	if size != t.size {
		t.size = size
		t.v = make([]int64, 2*size)
	}
	for i := range t.v {
		t.v[i] = -1
	}
}

// put sets slot s's latency, -1 for a PoP that does not count, without
// updating the tree above it (build does).
func (t *lagMax) put(s int32, lag int64) {
	t.v[t.size+int(s)] = lag
}

// build computes every inner node from the slots.
func (t *lagMax) build() {
	for i := t.size - 1; i >= 1; i-- {
		t.pull(i)
	}
}

// set sets slot s's latency and updates the tree above it.
func (t *lagMax) set(s int32, lag int64) {
	i := t.size + int(s)
	if t.v[i] == lag {
		return
	}
	t.v[i] = lag
	for i >>= 1; i >= 1; i >>= 1 {
		t.pull(i)
	}
}

// get returns slot s's latency, -1 when it does not count.
func (t *lagMax) get(s int32) int64 { return t.v[t.size+int(s)] }

// has reports whether slot s is one of the tree's.
func (t *lagMax) has(s int32) bool { return int(s) < t.size }

// pull computes inner node i from its two children.
func (t *lagMax) pull(i int) { t.v[i] = max(t.v[2*i], t.v[2*i+1]) }

// max returns the largest latency of the PoPs that count, 0 when none
// does.
func (t *lagMax) max() int64 {
	if t.size == 0 {
		return 0
	}
	return max(t.v[1], 0)
}
