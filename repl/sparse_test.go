package repl

import (
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/replicated"
)

// sparsePair is two single-node PoPs, ams and iad, whose global messages
// reach each other at once.
type sparsePair struct {
	t        *testing.T
	ams, iad *Core
	an, in   *pop.Node
	now      int64
	// published counts the entries of api/key ams published in deltas.
	published map[string]int
}

func newSparsePair(t *testing.T, sparse *bool) *sparsePair {
	t.Helper()
	return newSparsePairWith(t, sparse, func(*Config) {})
}

// newSparsePairWith is newSparsePair with each core's Config changed by set.
func newSparsePairWith(t *testing.T, sparse *bool, set func(*Config)) *sparsePair {
	t.Helper()
	iad1 := identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "i1", Incarnation: 1}
	w := int64(ruleWindow)
	p := &sparsePair{t: t, an: testNode(t, ams1), in: testNode(t, iad1), now: (t0/w + 1) * w, published: map[string]int{}}
	s := DefaultSettings()
	s.SparseUpdates = sparse
	var err error
	ac, ic := Config{Settings: s, Node: p.an.Link(), GlobalLink: true}, Config{Settings: s, Node: p.in.Link(), GlobalLink: true}
	set(&ac)
	set(&ic)
	if p.ams, err = New(ac); err != nil {
		t.Fatal(err)
	}
	if p.iad, err = New(ic); err != nil {
		t.Fatal(err)
	}
	return p
}

// run ticks both cores every millisecond for d, delivering their global
// messages to each other.
func (p *sparsePair) run(d time.Duration) {
	end := p.now + int64(d)
	for ; p.now < end; p.now += int64(time.Millisecond) {
		p.ams.Tick(p.now)
		p.iad.Tick(p.now)
		for _, m := range p.ams.Ready() {
			if m.Link != LinkGlobal {
				continue
			}
			if m.Kind == KindDelta && m.Delta != nil {
				for _, e := range m.Delta.Entries {
					p.published[e.Key]++
				}
			}
			m.From = ams1.PoPID
			p.iad.Step(p.now, m)
		}
		for _, m := range p.iad.Ready() {
			if m.Link == LinkGlobal {
				m.From = p.in.Link().Self().PoPID
				p.ams.Step(p.now, m)
			}
		}
	}
}

// admit counts n requests of key at ams.
func (p *sparsePair) admit(key string, n int) {
	p.t.Helper()
	for range n {
		d, err := p.an.Decide(p.now, "api", key, 1)
		if err != nil || !d.Allowed {
			p.t.Fatalf("decide %s: %+v %v", key, d, err)
		}
	}
}

// total returns n's total of key over its live windows.
func (p *sparsePair) total(n *pop.Node, key string) uint64 {
	p.t.Helper()
	v, err := n.View(p.now, "api", key)
	if err != nil {
		p.t.Fatal(err)
	}
	var sum uint64
	for _, w := range v.Windows {
		sum += w.Total
	}
	return sum
}

// With sparse updates (the default), once the peers are known a key far
// below its limit (1000 among 2 PoPs: step 125, every change from 250) is
// published only when it has moved by the step, so the other PoP's view lags
// by less than the step; a key near its limit is published at every flush;
// anti-entropy sends the rest once it settled. Off, every change is
// published.
func TestSparseUpdates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sparse *bool
	}{{"default", nil}, {"off", new(bool)}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newSparsePair(t, tc.sparse)
			// Every change is published for an anti-entropy interval
			// after start.
			p.run(DefaultAntiEntropyInterval / 2)
			p.admit("early", 1)
			p.run(100 * time.Millisecond)
			if got := p.total(p.in, "early"); got != 1 {
				t.Fatalf("a change before the first anti-entropy interval: iad holds %d, want 1", got)
			}
			p.run(DefaultAntiEntropyInterval/2 + time.Second)

			// 10 a flush interval, 20 flushes: 200 in all.
			for range 20 {
				p.admit("far", 10)
				p.run(50 * time.Millisecond)
				lag := p.total(p.an, "far") - p.total(p.in, "far")
				if tc.sparse == nil && lag >= replicated.SparseStep(1000, 2) {
					t.Fatalf("iad lags ams by %d, want below the step %d", lag, replicated.SparseStep(1000, 2))
				}
				if tc.sparse != nil && lag != 0 {
					t.Fatalf("off: iad lags ams by %d", lag)
				}
			}
			wantPub := 20
			if tc.sparse == nil {
				wantPub = 1 // 130 is published, 200 is not
			}
			if p.published["far"] != wantPub {
				t.Errorf("far published %d times, want %d", p.published["far"], wantPub)
			}
			st := p.ams.Stats()
			if tc.sparse == nil && (st.SparseVoices != 2 || st.SparseSkipped != 19 || st.SparseHeld != 1) {
				t.Errorf("stats: %d voices, %d left out, %d held; want 2, 19, 1", st.SparseVoices, st.SparseSkipped, st.SparseHeld)
			}
			if tc.sparse != nil && (st.SparseVoices != 0 || st.SparseSkipped != 0) {
				t.Errorf("off: stats %d voices, %d left out", st.SparseVoices, st.SparseSkipped)
			}
			// Near the limit: every change is seen after a flush.
			p.admit("far", 100)
			for range 5 {
				p.admit("far", 3)
				p.run(60 * time.Millisecond)
				if a, i := p.total(p.an, "far"), p.total(p.in, "far"); a != i {
					t.Fatalf("at %d of 1000, iad holds %d", a, i)
				}
			}
			// Anti-entropy repairs what was left out once it settled:
			// the first round that finds no change since the one before.
			p.admit("tail", 5)
			p.run(DefaultAntiEntropyInterval)
			if got := p.total(p.in, "tail"); tc.sparse == nil && got != 0 {
				t.Errorf("one anti-entropy round after its change iad holds %d of tail, want 0 (left out, not settled yet)", got)
			}
			p.run(DefaultAntiEntropyInterval + time.Second)
			if got := p.total(p.in, "tail"); got != 5 {
				t.Errorf("after anti-entropy iad holds %d of tail, want 5", got)
			}
		})
	}
}

// Sparse updates start once a node's view holds what the fleet counted
// before it started: without the PoPs expected known, one anti-entropy
// interval after start; with them, at once on a cold start of the whole
// fleet, or once every expected PoP answered the startup sync.
func TestSparseFromTheStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		at   time.Duration // sparse by then, not a second before it (0: at one of the first checks of the peers)
	}{
		{"no PoPs expected", func(*Config) {}, DefaultAntiEntropyInterval},
		{"cold start", func(c *Config) {
			c.ExpectedPoPs = []string{"eu/ams", "us/iad"}
			c.ColdStart = true
		}, 0},
		{"startup sync answered", func(c *Config) {
			c.ExpectedPoPs = []string{"eu/ams", "us/iad"}
			c.Relay, c.StartupSync = true, 3*time.Second
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newSparsePairWith(t, nil, tc.set)
			start := p.now
			for p.ams.Stats().SparseVoices == 0 {
				if time.Duration(p.now-start) > DefaultAntiEntropyInterval+time.Second {
					t.Fatal("no sparse updates an anti-entropy interval after start")
				}
				p.run(10 * time.Millisecond)
			}
			took := time.Duration(p.now - start)
			if tc.at == 0 && took > 2*time.Second {
				t.Errorf("sparse after %s, want at one of the first checks of the peers", took)
			}
			if tc.at > 0 && took < tc.at-time.Second {
				t.Errorf("sparse after %s, want not before %s", took, tc.at)
			}
			if tc.name == "startup sync answered" && !p.ams.Startup().Synced {
				t.Error("sparse before the startup sync ended")
			}
		})
	}
}
