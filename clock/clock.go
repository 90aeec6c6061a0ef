// Package clock is geolimit's single seam for reading time. Every component
// takes a Clock; tests use a Manual clock and never sleep.
//
//	c := clock.NewCoarse(time.Millisecond)
//	defer c.Stop()
//	now := c.Now() // Unix nanoseconds, one atomic load
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock returns the current time as Unix nanoseconds. Implementations are safe
// for concurrent use.
type Clock interface {
	Now() int64
}

// Real reads the system clock on every call.
type Real struct{}

// Now returns time.Now() in Unix nanoseconds.
func (Real) Now() int64 { return time.Now().UnixNano() }

// Coarse is a clock read with one atomic load, refreshed by a background
// goroutine every resolution. Rate-limit windows are seconds to hours long, so
// a millisecond of staleness changes no decision measurably, and reading the
// time stops costing more than the decision itself. Stop it when done.
type Coarse struct {
	now  atomic.Int64
	stop chan struct{}
	once sync.Once
	done chan struct{}
}

// NewCoarse starts a Coarse clock refreshed every resolution (1ms if <= 0).
func NewCoarse(resolution time.Duration) *Coarse {
	if resolution <= 0 {
		resolution = time.Millisecond
	}
	c := &Coarse{stop: make(chan struct{}), done: make(chan struct{})}
	c.now.Store(time.Now().UnixNano())
	go func() {
		defer close(c.done)
		t := time.NewTicker(resolution)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case now := <-t.C:
				c.now.Store(now.UnixNano())
			}
		}
	}()
	return c
}

// Now returns the time of the last refresh, in Unix nanoseconds.
func (c *Coarse) Now() int64 { return c.now.Load() }

// Stop ends the refresh goroutine and waits for it. Now keeps returning the
// last value. Stop is idempotent.
func (c *Coarse) Stop() {
	c.once.Do(func() { close(c.stop) })
	<-c.done
}

// Manual is a clock that moves only when told to. The zero value reads 0.
type Manual struct {
	now atomic.Int64
}

// NewManual returns a Manual clock reading t (Unix nanoseconds).
func NewManual(t int64) *Manual {
	m := &Manual{}
	m.now.Store(t)
	return m
}

// Now returns the clock's current reading.
func (m *Manual) Now() int64 { return m.now.Load() }

// Set moves the clock to t, forwards or backwards.
func (m *Manual) Set(t int64) { m.now.Store(t) }

// Advance moves the clock by d and returns the new reading.
func (m *Manual) Advance(d time.Duration) int64 { return m.now.Add(int64(d)) }

var (
	_ Clock = Real{}
	_ Clock = (*Coarse)(nil)
	_ Clock = (*Manual)(nil)
)
