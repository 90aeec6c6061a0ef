package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/repl"
	"github.com/geolimit/geolimit/sim"
)

// Soak is the soak mode's report: memory per node over time and what the
// nodes' logs say.
type Soak struct {
	// FaultEveryS is the time between two faults.
	FaultEveryS float64 `json:"fault_every_s"`
	// RSS are the nodes' resident set sizes over time (every rssStep).
	RSS []RSSSample `json:"rss"`
	// Memory compares, per node, the mean RSS of the first span after
	// warm-up with that of the last (a process restarted in between
	// starts afresh, so the comparison is of the fleet's memory, not of
	// one process's).
	Memory []NodeMemory `json:"memory"`
	// Panics and ErrorLines are what the nodes' logs hold.
	Panics     []string       `json:"panics"`
	ErrorLines map[string]int `json:"error_lines"`
	// ErrorSamples are a few distinct error messages.
	ErrorSamples []string `json:"error_samples"`
}

// RSSSample is one node's RSS at a time (0: not running).
type RSSSample struct {
	AtS  float64 `json:"at_s"`
	Node string  `json:"node"`
	KB   int64   `json:"kb"`
}

// NodeMemory is one node's mean RSS at the start and at the end.
type NodeMemory struct {
	Node    string  `json:"node"`
	FirstKB int64   `json:"first_kb"`
	LastKB  int64   `json:"last_kb"`
	Ratio   float64 `json:"ratio"`
}

const rssStep = 5 * time.Second

// soakScenario is the soak's fleet and load: 6 nodes in 3 regions, two
// global keys at 1.7 times their limit (share), and a seeded random fault
// every faultEvery: a region cut off, or a node killed, each undone
// halfway to the next fault.
func soakScenario(d time.Duration, seed uint64, faultEvery time.Duration) (*sim.Scenario, error) {
	sc := &sim.Scenario{
		Name: "soak", Description: "seeded random faults under steady load", Seed: seed, Duration: d,
		Topology: []sim.Region{
			{Region: "eu", PoPs: []sim.PoPSpec{{Name: "ams", Nodes: 2}}},
			{Region: "us", PoPs: []sim.PoPSpec{{Name: "iad", Nodes: 2}}},
			{Region: "ap", PoPs: []sim.PoPSpec{{Name: "sin", Nodes: 2}}},
		},
		Network: sim.Network{
			IntraPoP:    sim.Link{Latency: 200 * time.Microsecond, Jitter: 100 * time.Microsecond},
			InterRegion: sim.Link{Latency: 30 * time.Millisecond, Jitter: 10 * time.Millisecond},
		},
		Replication: sim.DefaultReplication(),
		Rules: []config.Rule{{Name: "api", Key: config.KeySpec{"ip"}, Limit: 300, Window: config.Duration(10 * time.Second),
			Scope: "global", OnPartition: "share"}},
		Traffic: []sim.Traffic{{Rule: "api", Keys: 2, Rate: 100, Pattern: "poisson"}},
	}
	sc.Replication.Settings = repl.DefaultSettings()
	sc.Replication.PeerTimeout = time.Second
	// A PoP's members drop a killed node after 5-7 s live (memberlist);
	// the live run's measure of each crash replaces this in the
	// simulator's run (simAgain).
	sc.Replication.FailureDetection = 6 * time.Second
	regions := []string{"eu", "us", "ap"}
	nodes := []string{"ams-1", "ams-2", "iad-1", "iad-2", "sin-1", "sin-2"}
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	for at := faultEvery; at+faultEvery/2 < d; at += faultEvery {
		undo := at + faultEvery/2
		if rng.IntN(2) == 0 {
			sc.Events = append(sc.Events,
				sim.Event{At: at, Partition: [][]string{{regions[rng.IntN(len(regions))]}}},
				sim.Event{At: undo, Heal: true})
		} else {
			n := nodes[rng.IntN(len(nodes))]
			sc.Events = append(sc.Events,
				sim.Event{At: at, Crash: []string{n}},
				sim.Event{At: undo, Restart: []string{n}})
		}
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("chaos: soak scenario: %w", err)
	}
	return sc, nil
}

// maxSoak bounds a soak.
const maxSoak = 4 * time.Hour

// RunSoak runs a soak of duration d: the soak scenario live and in the
// simulator, with the nodes' RSS sampled and their logs read afterwards.
func RunSoak(ctx context.Context, d time.Duration, seed uint64, opts Options) (*Report, error) {
	if d < 30*time.Second || d > maxSoak {
		return nil, fmt.Errorf("chaos: -soak: between 30s and %s, got %s", maxSoak, d)
	}
	faultEvery := 10 * time.Second
	sc, err := soakScenario(d, seed, faultEvery)
	if err != nil {
		return nil, err
	}
	opts.soak = &Soak{FaultEveryS: faultEvery.Seconds(), ErrorLines: map[string]int{}}
	rep, err := Run(ctx, sc, opts)
	if err != nil {
		return nil, err
	}
	rep.Soak = opts.soak
	return rep, nil
}

// sampleRSS records every node's RSS every rssStep until ctx is done.
func (f *fleet) sampleRSS(ctx context.Context, s *Soak, t0 time.Time, mu *sync.Mutex) {
	tick := time.NewTicker(rssStep)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		at := round3(time.Since(t0).Seconds())
		for _, n := range f.nodes {
			kb := int64(0)
			if pid := n.pidNow(); pid != 0 {
				kb = rssKB(pid)
			}
			mu.Lock()
			s.RSS = append(s.RSS, RSSSample{AtS: at, Node: n.name, KB: kb})
			mu.Unlock()
		}
	}
}

// rssKB reads VmRSS from /proc/PID/status (0 when it cannot).
func rssKB(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// summarise fills Memory from RSS over a run of duration d: the mean of
// the first span after warm-up against the mean of the last span.
func (s *Soak) summarise(d time.Duration) {
	warm := min(time.Minute, d/10).Seconds()
	span := min(5*time.Minute, d/4).Seconds()
	end := d.Seconds()
	type acc struct{ first, last, nf, nl int64 }
	by := map[string]*acc{}
	for _, r := range s.RSS {
		if r.KB == 0 {
			continue
		}
		a := by[r.Node]
		if a == nil {
			a = &acc{}
			by[r.Node] = a
		}
		if r.AtS >= warm && r.AtS < warm+span {
			a.first += r.KB
			a.nf++
		}
		if r.AtS >= end-span {
			a.last += r.KB
			a.nl++
		}
	}
	for _, n := range sortedNames(by) {
		a := by[n]
		m := NodeMemory{Node: n}
		if a.nf > 0 {
			m.FirstKB = a.first / a.nf
		}
		if a.nl > 0 {
			m.LastKB = a.last / a.nl
		}
		if m.FirstKB > 0 {
			m.Ratio = round3(float64(m.LastKB) / float64(m.FirstKB))
		}
		s.Memory = append(s.Memory, m)
	}
}

// scanLogs reads the nodes' logs for panics and error lines.
func (f *fleet) scanLogs(s *Soak) {
	seen := map[string]bool{}
	for _, n := range f.nodes {
		fh, err := os.Open(n.logPath)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:"):
				s.Panics = append(s.Panics, n.name+": "+line)
			case strings.Contains(line, `"level":"ERROR"`):
				s.ErrorLines[n.name]++
				msg := line
				var rec struct {
					Msg string `json:"msg"`
				}
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg != "" {
					msg = rec.Msg
				}
				// Group messages by their first words (ports and
				// attempts differ).
				key := strings.Join(strings.Fields(msg)[:min(4, len(strings.Fields(msg)))], " ")
				if !seen[key] && len(s.ErrorSamples) < 10 {
					seen[key] = true
					s.ErrorSamples = append(s.ErrorSamples, n.name+": "+msg)
				}
			}
		}
		_ = fh.Close()
	}
	if s.Panics == nil {
		s.Panics = []string{}
	}
}

func (s *Soak) writeTable(w io.Writer) {
	fmt.Fprintf(w, "soak: a fault every %gs; panics: %d; error lines by node: %v\n", s.FaultEveryS, len(s.Panics), s.ErrorLines)
	for _, p := range s.Panics {
		fmt.Fprintf(w, "  panic %s\n", p)
	}
	for _, e := range s.ErrorSamples {
		fmt.Fprintf(w, "  error %s\n", e)
	}
	fmt.Fprintf(w, "RSS (kB), mean of the first span after warm-up -> of the last:")
	for _, m := range s.Memory {
		fmt.Fprintf(w, " %s %d -> %d (%.2f);", m.Node, m.FirstKB, m.LastKB, m.Ratio)
	}
	fmt.Fprintln(w)
}
