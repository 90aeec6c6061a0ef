package crdt

import (
	"runtime"
	"sync/atomic"
)

// spinLock guards a shard. Critical sections are a few dozen nanoseconds and
// never block, so one compare-and-swap to lock and one plain atomic store to
// unlock beat sync.Mutex's two read-modify-writes; under contention it yields
// to the scheduler instead of spinning hard.
type spinLock struct{ v atomic.Uint32 }

func (l *spinLock) Lock() {
	for !l.v.CompareAndSwap(0, 1) {
		for i := 0; l.v.Load() != 0; i++ {
			if i > 16 {
				runtime.Gosched()
				i = 0
			}
		}
	}
}

func (l *spinLock) Unlock() { l.v.Store(0) }
