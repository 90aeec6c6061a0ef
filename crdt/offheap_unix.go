//go:build unix && !race

package crdt

import (
	"syscall"
	"unsafe"
)

// mapSlots returns a table of n zeroed slots: outside the Go heap, in an
// anonymous private mapping, when it takes at least offHeapMin bytes (mem
// is the mapping, for unmap), else on the heap (mem is nil). Race builds
// keep every table on the heap, where the race detector sees it.
func mapSlots(n int) (slots []slot, mem []byte) {
	size := n * int(unsafe.Sizeof(slot{}))
	if size < offHeapMin {
		return make([]slot, n), nil
	}
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]slot, n), nil
	}
	return unsafe.Slice((*slot)(unsafe.Pointer(unsafe.SliceData(mem))), n), mem
}

// unmap returns a mapping made by mapSlots to the OS.
func unmap(mem []byte) { _ = syscall.Munmap(mem) }
