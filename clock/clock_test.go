package clock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestManual(t *testing.T) {
	m := NewManual(100)
	assert.Equal(t, int64(100), m.Now())
	assert.Equal(t, int64(100+int64(time.Second)), m.Advance(time.Second))
	m.Set(5)
	assert.Equal(t, int64(5), m.Now(), "a manual clock may go backwards")
	var zero Manual
	assert.Zero(t, zero.Now())
}

func TestCoarseFollowsTheRealClock(t *testing.T) {
	before := time.Now().UnixNano()
	c := NewCoarse(time.Millisecond)
	defer c.Stop()
	assert.GreaterOrEqual(t, c.Now(), before)
	first := c.Now()
	require.Eventually(t, func() bool { return c.Now() > first }, 5*time.Second, time.Millisecond, "the coarse clock refreshes")
	c.Stop()
	c.Stop() // idempotent
	stopped := c.Now()
	assert.Equal(t, stopped, c.Now(), "a stopped clock keeps its last reading")
}

func BenchmarkCoarseNow(b *testing.B) {
	c := NewCoarse(time.Millisecond)
	defer c.Stop()
	b.ReportAllocs()
	var s int64
	for i := 0; i < b.N; i++ {
		s += c.Now()
	}
	_ = s
}

func BenchmarkRealNow(b *testing.B) {
	b.ReportAllocs()
	var s int64
	for i := 0; i < b.N; i++ {
		s += Real{}.Now()
	}
	_ = s
}

// An Offset clock reads its base plus the offset, changed at any time.
func TestOffset(t *testing.T) {
	m := NewManual(1000)
	o := NewOffset(m)
	assert.Equal(t, int64(1000), o.Now())
	o.Set(-300)
	m.Advance(50)
	assert.Equal(t, int64(750), o.Now())
	assert.Equal(t, time.Duration(-300), o.Get())
	assert.Same(t, Clock(m), o.Base())
}
