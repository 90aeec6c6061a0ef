package gossip

import (
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
)

// partitionLog records when any node's set of partitioned PoPs last
// changed, through Options.OnPartitionChange. The live partition tests run
// with a peer timeout of a few tens of milliseconds; on a busy machine a
// heartbeat can come later than that, and the nodes see a partition that
// heals a moment later. A window with such a false partition is not seen
// whole, so a share rule takes its shares from an older window (or none):
// the tests cut only after a window that every node saw whole. Safe for
// concurrent use.
type partitionLog struct{ last atomic.Int64 }

// hook returns opts with OnPartitionChange recording into l.
func (l *partitionLog) hook(opts Options) Options {
	opts.OnPartitionChange = func([]identity.PoPID) { l.last.Store(time.Now().UnixNano()) }
	return opts
}

// sawWhole reports whether every node has seen the window that begins at
// from whole: no partitioned set has changed since the shares of a partition
// ending then would still be held (pop.DefaultHealHold before it).
func (l *partitionLog) sawWhole(from time.Time) bool {
	return l.last.Load() < from.Add(-pop.DefaultHealHold).UnixNano()
}
