package clock

import (
	"sync/atomic"
	"time"
)

// Offset is a clock that reads another clock plus an offset that can be
// changed at any time: the fleet clock a node decides windows on, its own
// clock plus the correction its replication agreed with the other PoPs
// (repl.Core.ClockCorrection). It is safe for concurrent use.
type Offset struct {
	base Clock
	off  atomic.Int64
}

// NewOffset returns base plus an offset of 0.
func NewOffset(base Clock) *Offset { return &Offset{base: base} }

// Now returns the base clock's time plus the offset.
func (o *Offset) Now() int64 { return o.base.Now() + o.off.Load() }

// Set sets the offset.
func (o *Offset) Set(d time.Duration) { o.off.Store(int64(d)) }

// Get returns the offset.
func (o *Offset) Get() time.Duration { return time.Duration(o.off.Load()) }

// Base returns the clock the offset is added to.
func (o *Offset) Base() Clock { return o.base }

var _ Clock = (*Offset)(nil)
