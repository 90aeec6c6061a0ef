package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/geolimit/geolimit/sim"
)

// workersPerNode is how many requests one node may have in flight; a
// request that finds them all busy waits in its node's queue
// (queuePerNode long) and is sent late, or dropped when the queue is full.
const (
	workersPerNode = 8
	queuePerNode   = 4096
)

// loadResult is what the live load recorded.
type loadResult struct {
	decisions []sim.Decision
	// spans are the decisions' round trips (same order): the node decided
	// in between.
	spans []span
	// failed counts requests that got no decision (the node down, or an
	// error), by node.
	failed map[string]uint64
	// lateMax is the most any request was sent after its scheduled time.
	lateMax time.Duration
}

// span is one request's round trip, from the run's start.
type span struct{ sent, got time.Duration }

type job struct {
	d  sim.Decision // the simulator's arrival: T, node, rule, key, cost
	at time.Time
}

// runLoad sends each arrival of schedule to its node at t0 + its time over
// POST /v1/check and records every decision at the midpoint of its round
// trip, from t0. It returns when every arrival is decided or ctx is done.
func runLoad(ctx context.Context, f *fleet, schedule []sim.Decision, t0 time.Time) *loadResult {
	res := &loadResult{failed: map[string]uint64{}}
	var mu sync.Mutex
	queues := map[string]chan job{}
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workersPerNode, IdleConnTimeout: 30 * time.Second}}
	defer client.CloseIdleConnections()
	for _, n := range f.nodes {
		q := make(chan job, queuePerNode)
		queues[n.name] = q
		for range workersPerNode {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range q {
					late := time.Since(j.at)
					d, sp, ok := check(ctx, client, n, j.d, t0)
					mu.Lock()
					res.lateMax = max(res.lateMax, late)
					if ok {
						res.decisions = append(res.decisions, d)
						res.spans = append(res.spans, sp)
					} else {
						res.failed[n.name]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	timer := time.NewTimer(0)
	<-timer.C
loop:
	for _, a := range schedule {
		at := t0.Add(a.T)
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				break loop
			case <-timer.C:
			}
		}
		select {
		case queues[a.Node] <- job{d: a, at: at}:
		default:
			mu.Lock()
			res.failed[a.Node]++
			mu.Unlock()
		}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	return res
}

type checkBody struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
	Cost uint64 `json:"cost"`
}

// check sends one request; ok is false when no decision came back.
func check(ctx context.Context, c *http.Client, n *node, a sim.Decision, t0 time.Time) (sim.Decision, span, bool) {
	body, _ := json.Marshal(checkBody{Rule: a.Rule, Key: a.Key, Cost: a.Cost})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.api+"/v1/check", bytes.NewReader(body))
	if err != nil {
		return a, span{}, false
	}
	sent := time.Now()
	res, err := c.Do(req)
	if err != nil {
		return a, span{}, false
	}
	var out struct {
		Allowed bool `json:"allowed"`
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	_ = res.Body.Close()
	got := time.Now()
	if err != nil || (res.StatusCode != http.StatusOK && res.StatusCode != http.StatusTooManyRequests) || json.Unmarshal(b, &out) != nil {
		return a, span{}, false
	}
	a.T = sent.Add(got.Sub(sent) / 2).Sub(t0)
	a.Region, a.PoP, a.Node = n.region, n.pop, n.name
	a.Admitted = out.Allowed
	return a, span{sent.Sub(t0), got.Sub(t0)}, true
}
