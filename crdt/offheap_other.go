//go:build !unix || race

package crdt

// mapSlots returns a table of n zeroed slots on the heap (see
// offheap_unix.go).
func mapSlots(n int) (slots []slot, mem []byte) { return make([]slot, n), nil }

func unmap([]byte) {}
