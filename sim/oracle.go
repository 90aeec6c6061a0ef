package sim

// okey is the exact sliding log of one (rule, key): the admitted requests of
// the trailing window as a ring of (time, cost) with their running sum. Each
// admit is pushed once and evicted once, so a decision costs O(1) amortised
// whatever the window and the rate.
type okey struct {
	ring    []logEntry
	head, n int
	sum     uint64
	// lastReq is the time of the key's last request, or -1.
	lastReq int64
}

type logEntry struct {
	t int64
	c uint64
}

// evict drops the admits at or before cutoff: what is left is the cost
// admitted in (cutoff, now].
func (k *okey) evict(cutoff int64) {
	for k.n > 0 {
		e := &k.ring[k.head]
		if e.t > cutoff {
			return
		}
		k.sum -= e.c
		k.head++
		if k.head == len(k.ring) {
			k.head = 0
		}
		k.n--
	}
}

// push records an admit of cost c at t (t never before an earlier push).
func (k *okey) push(t int64, c uint64) {
	if k.n == len(k.ring) {
		k.grow()
	}
	i := k.head + k.n
	if i >= len(k.ring) {
		i -= len(k.ring)
	}
	k.ring[i] = logEntry{t, c}
	k.n++
	k.sum += c
}

func (k *okey) grow() {
	nr := make([]logEntry, max(16, 2*len(k.ring)))
	for i := 0; i < k.n; i++ {
		j := k.head + i
		if j >= len(k.ring) {
			j -= len(k.ring)
		}
		nr[i] = k.ring[j]
	}
	k.ring, k.head = nr, 0
}

// tally accumulates the figures of one phase for the fleet or the central
// node.
type tally struct {
	requests, admitted, rejected uint64
	overLimit, wronglyRejected   uint64
	rejectedBelowHalf            uint64
	maxRatio                     float64
	samples                      sampleLog // admitted/limit per key per window
	// byRegion counts requests and admits by the region that served them.
	byRegion []regionTally
	// byRule holds the figures of each rule (by rule index) when the run
	// has more than one rule.
	byRule []ruleTally
}

type ruleTally struct {
	requests, admitted, overLimit, wronglyRejected uint64
	maxRatio                                       float64
}

type regionTally struct{ requests, admitted uint64 }

// served records a decision of the current phase by the region that served
// it (the topology's region index).
func (o *oracle) served(region int, admitted bool) {
	tl := o.cur
	for len(tl.byRegion) <= region {
		tl.byRegion = append(tl.byRegion, regionTally{})
	}
	tl.byRegion[region].requests++
	if admitted {
		tl.byRegion[region].admitted++
	}
}

// sampleLog holds admitted/limit samples in fixed-size blocks: a run can
// take millions, and a block never moves once allocated.
type sampleLog struct {
	blocks [][]float64
	n      int
}

// sampleBlock is the number of samples per block of a sampleLog.
const sampleBlock = 1 << 12

func (l *sampleLog) add(x float64) {
	if l.n%sampleBlock == 0 {
		l.blocks = append(l.blocks, make([]float64, 0, sampleBlock))
	}
	b := &l.blocks[len(l.blocks)-1]
	*b = append(*b, x)
	l.n++
}

// flat returns a copy of the samples in the order they were added.
func (l *sampleLog) flat() []float64 {
	out := make([]float64, 0, l.n)
	for _, b := range l.blocks {
		out = append(out, b...)
	}
	return out
}

// oracle judges every decision of one decider (the fleet, or the central
// node) against the exact trailing-window totals.
type oracle struct {
	keys []okey
	// more holds the logs of the further windows of keys of rules of
	// several windows, by key index (nil for the others).
	more   map[int][]okey
	phases []tally
	cur    *tally
	run    sampleLog // admitted/limit samples of the whole run
	// nrules is the number of rules when there are several (the figures
	// are then also kept by rule), else 0.
	nrules int
}

func newOracle(nkeys, nphases, nrules int) *oracle {
	o := &oracle{keys: make([]okey, nkeys), phases: make([]tally, nphases)}
	for i := range o.keys {
		o.keys[i].lastReq = -1
	}
	if nrules > 1 {
		o.nrules = nrules
		for i := range o.phases {
			o.phases[i].byRule = make([]ruleTally, nrules)
		}
	}
	o.cur = &o.phases[0]
	return o
}

// judge records a decision at t for key k of a rule of limit (inverse
// invLimit) and width.
func (o *oracle) judge(k *keyInfo, t int64, cost uint64, admitted bool) {
	if o.nrules == 0 {
		o.judgeKey(k, t, cost, admitted)
		return
	}
	tl := o.cur
	over, wrong := tl.overLimit, tl.wronglyRejected
	o.judgeKey(k, t, cost, admitted)
	rt := &tl.byRule[k.rule]
	rt.requests++
	rt.overLimit += tl.overLimit - over
	rt.wronglyRejected += tl.wronglyRejected - wrong
	if admitted {
		rt.admitted++
		if r := float64(o.keys[k.idx].sum) * k.invLimit; r > rt.maxRatio {
			rt.maxRatio = r
		}
	}
}

// judgeKey is judge without the figures by rule.
func (o *oracle) judgeKey(k *keyInfo, t int64, cost uint64, admitted bool) {
	ok := &o.keys[k.idx]
	ok.lastReq = t
	ok.evict(k.cutoff(t))
	tl := o.cur
	tl.requests++
	if k.more != nil {
		o.judgeMore(k, t, cost, admitted)
		return
	}
	if admitted {
		tl.admitted++
		ok.push(t, cost)
		if ok.sum > k.limit {
			tl.overLimit++
		}
		if r := float64(ok.sum) * k.invLimit; r > tl.maxRatio {
			tl.maxRatio = r
		}
		return
	}
	tl.rejected++
	if ok.sum+cost <= k.limit {
		tl.wronglyRejected++
	}
	if 2*(ok.sum+cost) <= k.limit {
		tl.rejectedBelowHalf++
	}
}

// judgeMore is judge for a key of a rule of several windows: an admit is
// over the limit when it takes any window's trailing total over that
// window's limit, a reject wrong when the request fit in every window. The
// admitted/limit ratios are of the rule's first window.
func (o *oracle) judgeMore(k *keyInfo, t int64, cost uint64, admitted bool) {
	if o.more == nil {
		o.more = map[int][]okey{}
	}
	logs := o.more[k.idx]
	if logs == nil {
		logs = make([]okey, len(k.more))
		o.more[k.idx] = logs
	}
	ok := &o.keys[k.idx]
	over, fits := ok.sum+cost > k.limit, ok.sum+cost <= k.limit
	for i := range logs {
		logs[i].evict(t - k.more[i].width)
		over = over || logs[i].sum+cost > k.more[i].limit
		fits = fits && logs[i].sum+cost <= k.more[i].limit
	}
	tl := o.cur
	if !admitted {
		tl.rejected++
		if fits {
			tl.wronglyRejected++
		}
		if 2*(ok.sum+cost) <= k.limit {
			tl.rejectedBelowHalf++
		}
		return
	}
	tl.admitted++
	ok.push(t, cost)
	for i := range logs {
		logs[i].push(t, cost)
	}
	if over {
		tl.overLimit++
	}
	if r := float64(ok.sum) * k.invLimit; r > tl.maxRatio {
		tl.maxRatio = r
	}
}

// sample adds one admitted/limit sample per key of keys that saw a request
// in the window (t-width, t]: to phase inPhase, or to the whole run when
// inPhase is -1.
func (o *oracle) sample(keys []*keyInfo, t int64, inPhase int) {
	for _, k := range keys {
		ok := &o.keys[k.idx]
		cut := k.cutoff(t)
		if ok.lastReq < 0 || ok.lastReq <= cut {
			continue
		}
		ok.evict(cut)
		r := float64(ok.sum) * k.invLimit
		if inPhase < 0 {
			o.run.add(r)
		} else {
			o.phases[inPhase].samples.add(r)
		}
	}
}

// trailing returns the cost admitted for k in (t-width, t] (for a calendar
// rule, since the start of the period that holds t).
func (o *oracle) trailing(k *keyInfo, t int64) uint64 {
	ok := &o.keys[k.idx]
	ok.evict(k.cutoff(t))
	return ok.sum
}

func (o *oracle) requestsSoFar() uint64 {
	var n uint64
	for i := range o.phases {
		n += o.phases[i].requests
	}
	return n
}
