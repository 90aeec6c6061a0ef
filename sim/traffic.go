package sim

import (
	"math"
	"strconv"

	"github.com/geolimit/geolimit/pop"
)

type pattern uint8

const (
	patConstant pattern = iota
	patPoisson
	patOnOff
	patRamp
)

// keyInfo is one (rule, key) the run knows: its oracle slot and what judging
// a decision on it needs.
type keyInfo struct {
	idx      int
	rule     int
	ruleName string
	key      string
	limit    uint64
	invLimit float64
	width    int64
	scope    uint8
	// more are the rule's further windows (a rule of several): the oracle
	// judges an admit over the limit when any window's exact trailing total
	// exceeds its limit, and a reject wrong when every window had room.
	more []winLimit
	// cal is the calendar of a calendar rule's key (calendar.go), shared by
	// the rule's keys; nil for a sliding window.
	cal *calPeriods
}

// winLimit is one further window of a rule: its limit and width.
type winLimit struct {
	limit uint64
	width int64
}

// source generates one traffic stream's arrivals, keys and PoPs. It draws
// from the run's traffic random stream only, in arrival order, so the
// arrival stream does not depend on decisions or on the network.
type source struct {
	idx     int
	name    string
	pattern pattern
	keys    []*keyInfo
	cost    uint64
	alias   *aliasTable // Zipf spread; nil for uniform
	start   int64
	end     int64
	rate    float64 // requests per second now (before ramp or on/off)
	rampTo  float64
	on, off int64
	next    int64   // next arrival, or never
	nextF   float64 // next arrival as a float (constant pattern)
	anycast bool
	weights []float64 // share per PoP index (normalised)
	cum     []float64 // cumulative shares over the PoPs that are up
	cumPoP  []int32
	uHome   []float64 // anycast: each key's draw for its home PoP
	uAlt    []float64 // anycast: each key's draw for a PoP while home is down
	cur     []int32   // anycast: each key's PoP now
	track   int
	changes []Change
}

// rateAt returns the stream's instantaneous rate at t.
func (s *source) rateAt(t int64) float64 {
	if s.pattern == patRamp && s.end > s.start {
		f := float64(t-s.start) / float64(s.end-s.start)
		return s.rate + (s.rampTo-s.rate)*f
	}
	return s.rate
}

// schedule draws the next arrival after t (from scratch when restart is set,
// as after a rate change).
func (s *source) schedule(g *rng, t int64, restart bool) {
	for {
		switch s.pattern {
		case patConstant:
			if s.rate <= 0 {
				s.next = never
				return
			}
			if restart {
				s.nextF = float64(t)
			}
			s.nextF += 1e9 / s.rate
			s.next = int64(s.nextF)
		default:
			rmax := s.rate
			if s.pattern == patRamp {
				rmax = max(s.rate, s.rampTo)
			}
			if rmax <= 0 {
				s.next = never
				return
			}
			c := t + int64(g.ExpFloat64()*1e9/rmax) + 1
			if s.pattern == patOnOff {
				cycle := s.on + s.off
				if ph := (c - s.start) % cycle; ph >= s.on {
					// Poisson is memoryless: start afresh at the next on-period.
					t = c - ph + cycle - 1
					restart = true
					continue
				}
			}
			if s.pattern == patRamp && g.Float64()*rmax >= s.rateAt(c) {
				t = c
				continue
			}
			s.next = c
		}
		if s.next >= s.end {
			s.next = never
		}
		return
	}
}

// pickKey draws the key of the next request.
func (s *source) pickKey(g *rng) int {
	switch {
	case len(s.keys) == 1:
		return 0
	case s.alias != nil:
		return s.alias.draw(g)
	}
	return g.IntN(len(s.keys))
}

// pickPoP returns the PoP a request for key k reaches, or -1 when every PoP
// is down.
func (s *source) pickPoP(g *rng, k int) int32 {
	if s.anycast {
		return s.cur[k]
	}
	switch len(s.cum) {
	case 0:
		return -1
	case 1:
		return s.cumPoP[0]
	}
	return s.cumPoP[pick(s.cum, g.Float64()*s.cum[len(s.cum)-1])]
}

// route recomputes where requests go after a PoP went down or came back or
// the shares changed. up reports whether a PoP has a node up.
func (s *source) route(up func(int) bool) {
	s.cum, s.cumPoP = s.cum[:0], s.cumPoP[:0]
	sum := 0.0
	for p, w := range s.weights {
		if w > 0 && up(p) {
			sum += w
			s.cum = append(s.cum, sum)
			s.cumPoP = append(s.cumPoP, int32(p))
		}
	}
	if !s.anycast {
		return
	}
	// Each key's home is where its own draw falls among the shares of all
	// PoPs: a change of shares moves only the keys near the boundaries that
	// moved, as anycast routes shift. A key whose home is down moves, by its
	// second draw, to a PoP that is up, and returns when its home is back.
	home := make([]float64, len(s.weights))
	total := 0.0
	for p, w := range s.weights {
		total += w
		home[p] = total
	}
	for k := range s.cur {
		h := int32(pick(home, s.uHome[k]*total))
		if up(int(h)) {
			s.cur[k] = h
			continue
		}
		s.cur[k] = -1
		if len(s.cum) > 0 {
			s.cur[k] = s.cumPoP[pick(s.cum, s.uAlt[k]*s.cum[len(s.cum)-1])]
		}
	}
}

// pick returns the index of the first bin of cumulative weights cum that u
// falls in (skipping empty bins), or the last bin.
func pick(cum []float64, u float64) int {
	prev := 0.0
	for i, c := range cum {
		if u < c && c > prev {
			return i
		}
		prev = c
	}
	return len(cum) - 1
}

// drawHomes draws each anycast key's two uniform numbers: where it lands
// among the shares, and where it goes while its home PoP is down.
func (s *source) drawHomes(g *rng) {
	s.uHome = make([]float64, len(s.keys))
	s.uAlt = make([]float64, len(s.keys))
	s.cur = make([]int32, len(s.keys))
	for k := range s.keys {
		s.uHome[k] = g.Float64()
		s.uAlt[k] = g.Float64()
	}
}

// keyName returns the i-th key of a stream: an IPv4-looking address for
// anycast streams, else prefix+i.
func keyName(prefix string, anycast bool, i int) string {
	if anycast {
		return "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	return prefix + strconv.Itoa(i)
}

// normalise returns share as weights per PoP index (equal when empty).
func normalise(share map[string]float64, popIndex map[string]int, npops int) []float64 {
	w := make([]float64, npops)
	if len(share) == 0 {
		for i := range w {
			w[i] = 1 / float64(npops)
		}
		return w
	}
	sum := 0.0
	for _, v := range share {
		sum += v
	}
	for name, v := range share {
		w[popIndex[name]] = v / sum
	}
	for i := range w {
		if math.IsNaN(w[i]) {
			w[i] = 0
		}
	}
	return w
}

// aliasTable draws from a discrete distribution in O(1) (Vose's alias
// method): one random number picks a column and decides between the column
// and its alias.
type aliasTable struct {
	prob  []float64 // chance of keeping the column rather than its alias
	alias []int32
}

// newZipfTable returns the distribution P(k) proportional to (k+1)^-s over
// keys 0..n-1 (math/rand's Zipf with v = 1), so key 0 is the hottest.
func newZipfTable(n int, s float64) *aliasTable {
	w := make([]float64, n)
	sum := 0.0
	for k := range w {
		w[k] = math.Pow(float64(k+1), -s)
		sum += w[k]
	}
	t := &aliasTable{prob: make([]float64, n), alias: make([]int32, n)}
	var small, large []int32
	for k := range w {
		w[k] = w[k] * float64(n) / sum
		if w[k] < 1 {
			small = append(small, int32(k))
		} else {
			large = append(large, int32(k))
		}
	}
	for len(small) > 0 && len(large) > 0 {
		l := small[len(small)-1]
		small = small[:len(small)-1]
		g := large[len(large)-1]
		t.prob[l], t.alias[l] = w[l], g
		w[g] -= 1 - w[l]
		if w[g] < 1 {
			large = large[:len(large)-1]
			small = append(small, g)
		}
	}
	for _, g := range large {
		t.prob[g], t.alias[g] = 1, g
	}
	for _, l := range small {
		t.prob[l], t.alias[l] = 1, l
	}
	return t
}

func (t *aliasTable) draw(g *rng) int {
	u := g.Float64() * float64(len(t.prob))
	i := int(u)
	if u-float64(i) < t.prob[i] {
		return i
	}
	return int(t.alias[i])
}

func (e *engine) buildTraffic() {
	popIndex := map[string]int{}
	for i, p := range e.pops {
		popIndex[p.id.PoP] = i
	}
	ruleIdx := map[string]int{}
	for i, r := range e.rules {
		ruleIdx[r.Name] = i
	}
	e.ruleKeys = make([][]*keyInfo, len(e.rules))
	byName := map[string]*keyInfo{}
	conv := map[*keyInfo]bool{}
	tracked := map[*keyInfo]bool{}
	for i := range e.sc.Traffic {
		t := &e.sc.Traffic[i]
		ri := ruleIdx[t.Rule]
		r := e.rules[ri]
		s := &source{
			idx: i, name: t.Name, cost: t.Cost,
			start: int64(t.Start), end: int64(t.End),
			rate:   float64(t.Rate) * e.opts.RateScale,
			rampTo: float64(t.RampTo) * e.opts.RateScale,
			on:     int64(t.On), off: int64(t.Off),
			anycast: t.Anycast,
			weights: normalise(t.Share, popIndex, len(e.pops)),
			track:   t.Track,
			changes: t.Changes,
		}
		if s.cost == 0 {
			s.cost = r.Cost
		}
		switch t.Pattern {
		case "constant":
			s.pattern = patConstant
		case "onoff":
			s.pattern = patOnOff
		case "ramp":
			s.pattern = patRamp
		default:
			s.pattern = patPoisson
		}
		s.keys = make([]*keyInfo, t.Keys)
		slab := make([]keyInfo, t.Keys) // the stream's new keys, side by side
		for k := range s.keys {
			name := keyName(t.KeyPrefix, t.Anycast, k)
			id := r.Name + "\x00" + name
			ki := byName[id]
			if ki == nil {
				ki = &slab[k]
				*ki = keyInfo{
					idx: len(e.keys), rule: ri, ruleName: r.Name, key: name,
					limit: r.Limit, invLimit: 1 / float64(r.Limit), width: int64(e.width(ri)), scope: uint8(r.Scope),
				}
				for _, l := range r.More {
					ki.more = append(ki.more, winLimit{limit: l.Limit, width: int64(l.Window)})
				}
				ki.cal = e.calendarOf(ri)
				byName[id] = ki
				e.keys = append(e.keys, ki)
				e.ruleKeys[ri] = append(e.ruleKeys[ri], ki)
			}
			s.keys[k] = ki
			if k < s.track && !tracked[ki] {
				tracked[ki] = true
				e.tracked = append(e.tracked, ki)
			}
			if k < 16 && r.Scope != pop.ScopeNode && !conv[ki] {
				conv[ki] = true
				e.convKeys = append(e.convKeys, ki)
			}
		}
		if t.Spread == "zipf" && t.Keys > 1 {
			s.alias = newZipfTable(t.Keys, t.ZipfS)
		}
		if s.anycast {
			s.drawHomes(e.trng)
		}
		s.route(e.popUp)
		s.schedule(e.trng, s.start, true)
		e.sources = append(e.sources, s)
	}
}

func (e *engine) popUp(p int) bool { return len(e.pops[p].live) > 0 }
