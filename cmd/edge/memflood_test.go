package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// TestDeltaFloodRSS is a load test, run on request:
//
//	GEOLIMIT_FLOOD_BYTES=1100000000 go test ./cmd/edge -run TestDeltaFloodRSS -v -timeout 20m
//
// It builds the daemon, runs it with limits.max_memory 64 MiB (or
// GEOLIMIT_FLOOD_BUDGET bytes) and an open embedded NATS server, and
// publishes that many bytes of well-formed replication deltas at it: the
// totals of 1 000 invented PoPs for random keys of a global rule, as any
// publisher on an unauthenticated NATS can. It reports the daemon's peak
// Go heap (go_memstats_heap_alloc_bytes of its /metrics, live and not yet
// collected) and resident memory (from /proc), and fails when the heap
// passes the budget plus 10 % or the resident memory the budget plus
// 100 MB. (It runs for about three minutes at 300 MB; TestSketchWithinMemoryBudget
// in crdt checks the store's part of the bound in a second.)
func TestDeltaFloodRSS(t *testing.T) {
	total, _ := strconv.ParseInt(os.Getenv("GEOLIMIT_FLOOD_BYTES"), 10, 64)
	if total <= 0 {
		t.Skip("a load test: set GEOLIMIT_FLOOD_BYTES=1100000000 to run it")
	}
	budget := int64(64 << 20)
	if b, _ := strconv.ParseInt(os.Getenv("GEOLIMIT_FLOOD_BUDGET"), 10, 64); b > 0 {
		budget = b
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "edge")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())
	natsAddr, apiAddr := gossiptest.FreeAddr(t), gossiptest.FreeAddr(t)
	cfg := filepath.Join(dir, "edge.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`
node: {id: victim-1, region: eu, pop: ams}
listen: {api: %q}
nats: {embedded: {listen: %q}}
limits: {max_memory: %d}
rules:
  - {name: api, limit: 1000, window: 1m, scope: global}
`, apiAddr, natsAddr, budget)), 0o600))
	cmd := exec.Command(bin, "-config", cfg, "-watch-interval", "0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.Contains(sc.Text(), "nats on") {
	}
	go func() {
		for sc.Scan() {
		}
	}()

	nc, err := nats.Connect("nats://" + natsAddr)
	require.NoError(t, err)
	defer nc.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now().UnixNano()
	win := now / int64(time.Minute)
	var sent, peak, heapPeak int64
	sample := func() {
		peak = max(peak, rss(t, cmd.Process.Pid))
		heapPeak = max(heapPeak, heapAlloc(t, apiAddr))
	}
	for i := 0; sent < total; i++ {
		pop := identity.PoPID{Region: "x" + strconv.Itoa(i%10), PoP: "p" + strconv.Itoa(i%1000)}
		d := wire.Delta{Sender: identity.PoPReplica(pop, 1), SentAt: now, Epoch: 1}
		for range 2000 {
			d.Entries = append(d.Entries, crdt.Entry{Rule: "api", Key: "k" + strconv.Itoa(rng.IntN(1_000_000)), Window: win, Count: uint64(1 + rng.IntN(900))})
		}
		msgs, err := wire.Encode(&d, 1<<20)
		require.NoError(t, err)
		for _, m := range msgs {
			require.NoError(t, nc.Publish(gossip.DeltaSubject("geolimit", pop), m))
			sent += int64(len(m))
		}
		if i%50 == 0 {
			require.NoError(t, nc.Flush())
			sample()
		}
	}
	require.NoError(t, nc.Flush())
	for range 20 { // the last messages are merged
		// Deliberate: the peak is sampled while the tail of the flood is
		// applied, which the daemon does not report as an event.
		time.Sleep(250 * time.Millisecond)
		sample()
	}
	t.Logf("%d MB of deltas published: the daemon's peak heap %d MB, peak RSS %d MB, against a budget of %d MB", sent>>20, heapPeak>>20, peak>>20, budget>>20)
	require.LessOrEqual(t, heapPeak, budget+budget/10, "the heap within limits.max_memory + 10 %")
	require.Less(t, peak, budget+100<<20)
}

// heapAlloc reads go_memstats_heap_alloc_bytes from the daemon's /metrics.
func heapAlloc(t *testing.T, apiAddr string) int64 {
	res, err := http.Get("http://" + apiAddr + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_alloc_bytes "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return int64(f)
		}
	}
	t.Fatal("no go_memstats_heap_alloc_bytes")
	return 0
}

// rss reads a process's resident set size from /proc.
func rss(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	require.NotNil(t, m)
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}
