package crdt

import (
	"runtime"
	"unsafe"
)

// Tables outside the Go heap.
//
// A store's slots are nearly all of its memory, and hold no pointers. On
// the Go heap they would count towards the heap the garbage collector lets
// grow before it collects (twice the live heap with the default GOGC), and
// the old table a growth or a shrink leaves would stay resident until the
// runtime returns it: at a million keys the process would hold about twice
// the store's size. So a table of at least offHeapMin bytes lives in an
// anonymous mapping of its own (offheap_unix.go, on Unix but in race
// builds), unmapped as soon as the shard moves to another table, or by a
// cleanup when an unreachable store is collected. Smaller tables (a new
// shard's, the simulator's thousands of small stores) stay on the heap.

// offHeapMin is the smallest table, in bytes, kept outside the Go heap.
const offHeapMin = 256 << 10

// offHeap is a table's mapping; nil for a table on the heap.
type offHeap struct {
	mem     []byte
	cleanup runtime.Cleanup
}

// setSlots gives the shard a new zeroed table of n slots and returns the
// old table's mapping, to free once the slots have been moved out of it.
func (sh *shard) setSlots(n int) *offHeap {
	old := sh.mapped
	slots, mem := mapSlots(n)
	sh.slots, sh.mapped = slots, nil
	sh.base.Store(uintptr(unsafe.Pointer(unsafe.SliceData(slots))))
	sh.n.Store(int64(len(slots)))
	if mem != nil {
		m := &offHeap{mem: mem}
		m.cleanup = runtime.AddCleanup(m, unmap, mem)
		sh.mapped = m
	}
	return old
}

// free unmaps m; nothing may use its slots any more.
func (m *offHeap) free() {
	if m != nil {
		m.cleanup.Stop()
		unmap(m.mem)
	}
}

// offHeapBytes returns the bytes of the shard's table outside the heap.
func (sh *shard) offHeapBytes() int {
	if sh.mapped == nil {
		return 0
	}
	return len(sh.mapped.mem)
}
