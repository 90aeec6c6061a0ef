package repl

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

// scriptNode is a Node that holds no counts and records what the Core tells
// it, so that a test can check the protocol's side of the contract alone.
type scriptNode struct {
	self    identity.Replica
	epochs  []uint64
	unheard [][]string
	synced  []bool
	applied []pop.Scope
	taken   []modes.RuleMode // what TakeModes returns next
	held    []modes.RuleMode
	merged  []modes.RuleMode
}

var _ Node = (*scriptNode)(nil)

func (n *scriptNode) Self() identity.Replica { return n.self }
func (n *scriptNode) FlushTo(int64, func(string) bool, bool) pop.Batch {
	return pop.Batch{}
}
func (n *scriptNode) Pending() int          { return 0 }
func (n *scriptNode) AntiEntropyParts() int { return 1 }
func (n *scriptNode) AntiEntropyPart(int64, func(string) bool, int, int, bool) pop.Batch {
	return pop.Batch{}
}
func (n *scriptNode) State(int64) []wire.Delta     { return nil }
func (n *scriptNode) Replicas() []identity.Replica { return []identity.Replica{n.self} }
func (n *scriptNode) ApplyFrom(_ int64, _ *wire.Delta, via pop.Scope, _ *crdt.InternCache) pop.ApplyStats {
	n.applied = append(n.applied, via)
	return pop.ApplyStats{}
}
func (n *scriptNode) PrefetchDelta(*wire.Delta)               {}
func (n *scriptNode) Rule(string) (replicated.RuleInfo, bool) { return replicated.RuleInfo{}, false }
func (n *scriptNode) WireRule(string) (replicated.RuleInfo, bool) {
	return replicated.RuleInfo{}, false
}
func (n *scriptNode) Rules() []replicated.RuleInfo          { return nil }
func (n *scriptNode) MaxSkew() time.Duration                { return pop.DefaultMaxSkew }
func (n *scriptNode) SetEpoch(e uint64)                     { n.epochs = append(n.epochs, e) }
func (n *scriptNode) SetPoPs([]string)                      {}
func (n *scriptNode) SetUnheard(_ int64, pops []string)     { n.unheard = append(n.unheard, pops) }
func (n *scriptNode) SetAllowance(pop.Scope, pop.Allowance) {}
func (n *scriptNode) SetSynced(ok bool)                     { n.synced = append(n.synced, ok) }
func (n *scriptNode) TakeModes() []modes.RuleMode {
	t := n.taken
	n.taken = nil
	return t
}
func (n *scriptNode) Modes() []modes.RuleMode { return n.held }
func (n *scriptNode) MergeModes(_ int64, _ modes.Source, ms []modes.RuleMode) {
	n.merged = append(n.merged, ms...)
}
func (n *scriptNode) KeepMembers(func(identity.Replica) bool)         {}
func (n *scriptNode) SetSparse(int, time.Duration)                    {}
func (n *scriptNode) SetDown(int64, []string)                         {}
func (n *scriptNode) SparseStats() (uint64, int)                      { return 0, 0 }
func (n *scriptNode) SetRegionVoice(bool, uint64)                     {}
func (n *scriptNode) SetRegionSparse(int, time.Duration)              {}
func (n *scriptNode) FlushRegion(int64, func(string) bool) wire.Delta { return wire.Delta{} }
func (n *scriptNode) RegionAntiEntropyPart(int64, func(string) bool, int, int, bool) wire.Delta {
	return wire.Delta{}
}

// runUntil ticks c at every time it asks for, from now until end, and
// returns the time it stopped at.
func runUntil(c *Core, now, end int64) int64 {
	for now < end {
		c.Tick(now)
		c.Ready()
		now = max(c.Next(), now+1)
	}
	return now
}

// The Core tells its node the unheard set when it changes, and only then:
// an expected PoP is unheard until its first heartbeat, then heard until it
// has been silent for the peer timeout.
func TestScriptedNodeToldUnheardSetOnChange(t *testing.T) {
	n := &scriptNode{self: ams1}
	s := DefaultSettings()
	s.ExpectedPoPs = []string{"us/iad"}
	c, err := New(Config{Settings: s, Node: n, GlobalLink: true})
	require.NoError(t, err)
	assert.Equal(t, []uint64{ams1.Incarnation}, n.epochs, "alone in its PoP: its own epoch at once")

	now := runUntil(c, t0, t0+int64(s.PeerTimeout)) // the first check is within 2 heartbeat intervals and a bit
	require.Equal(t, [][]string{{"us/iad"}}, n.unheard, "never heard: unheard from the first check")

	iad := identity.PoPID{Region: "us", PoP: "iad"}
	c.Step(now, heartbeatFrom(iad, now))
	heard := now
	now = runUntil(c, now, heard+int64(s.PeerTimeout/2))
	assert.Equal(t, [][]string{{"us/iad"}, {}}, n.unheard, "heard: told once, nothing more while the set stays")
	runUntil(c, now, heard+int64(3*s.PeerTimeout/2))
	assert.Equal(t, [][]string{{"us/iad"}, {}, {"us/iad"}}, n.unheard, "silent for longer than the peer timeout")
	assert.Empty(t, n.applied, "a heartbeat carries no counts")
}

// With a startup sync, the node is unsynced from New until the wait is
// over, and told so once.
func TestScriptedNodeStartupSyncTimesOut(t *testing.T) {
	n := &scriptNode{self: ams1}
	s := DefaultSettings()
	s.ExpectedPoPs, s.StartupSync = []string{"us/iad"}, time.Second
	c, err := New(Config{Settings: s, Node: n, GlobalLink: true})
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, n.synced)
	runUntil(c, t0, t0+int64(s.StartupSync)+1)
	assert.Equal(t, []bool{false, true}, n.synced)
	assert.True(t, c.Startup().TimedOut)
}
