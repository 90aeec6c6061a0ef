package crdt

// prefetch asks the CPU to bring the cache line at addr into its caches.
// It never faults, whatever addr is, so addr may be stale.
//
//go:noescape
func prefetch(addr uintptr)
