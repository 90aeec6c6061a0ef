package pop

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
)

// BenchmarkMemoryRSS fills a node with 1M keys through Decide, flushing
// every 32 768 decisions as the daemon does, and reports what the process
// grew by per key: resident memory (VmRSS from /proc/self/status) and live
// heap, each read after runtime.GC and debug.FreeOSMemory (rss-B/key,
// heap-B/key); resident memory after runtime.GC alone, with what the Go
// runtime keeps for itself at the default GOGC (rss-gc-B/key); and the peak
// resident memory while filling (VmHWM, reset first; peak-B/key). The
// store's part: its slot tables (table-B/key, on the heap or off it) and its
// arenas of long keys (arena-B/key).
// released-B/key is what the process still holds per key once every key
// has expired and Tick has swept them. Run it with -benchtime=1x:
//
//	go test ./pop -run '^$' -bench MemoryRSS -benchtime=1x
func BenchmarkMemoryRSS(b *testing.B) {
	const n = 1_000_000
	for _, c := range []struct {
		name string
		key  func(i int) string
	}{
		{"ipv4", func(i int) string {
			return "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
		}},
		{"24-byte", func(i int) string { return fmt.Sprintf("user:%019d", i) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				measureMemory(b, n, c.key)
			}
		})
	}
}

// measureMemory makes each key as it decides it, as the daemon parses it
// from a request: the keys are garbage once decided, and no list of them
// adds to the live heap the GC paces itself by.
func measureMemory(b *testing.B, n int, key func(int) string) {
	b.Helper()
	w := time.Minute
	now := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC).UnixNano()
	rss0, heap0 := settledMemory(b)
	peakReset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	nd, err := New(Config{
		Self:    identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1},
		Rules:   []Rule{{Name: "api", Limit: 100, Window: w, Cost: 1, Scope: ScopeGlobal}},
		MaxKeys: 2 * n,
	})
	if err != nil {
		b.Fatal(err)
	}
	all := func(string) bool { return true }
	for i := range n {
		if _, err := nd.Decide(now, "api", key(i), 1); err != nil {
			b.Fatal(err)
		}
		if i%32768 == 32767 {
			nd.Link().Flush(now, all)
		}
	}
	nd.Link().Flush(now, all)
	if got := nd.Stats().Store.Keys; got != n {
		b.Fatalf("holds %d keys, want %d", got, n)
	}
	runtime.GC()
	rssGC, peak := procStatus(b, "VmRSS:"), procStatus(b, "VmHWM:")
	rss1, heap1 := settledMemory(b)
	st := nd.Stats().Store
	later := now + 3*int64(w)
	nd.Tick(later)
	nd.Link().Flush(later, all)
	if got := nd.Stats().Store.Keys; got != 0 {
		b.Fatalf("holds %d keys after they expired", got)
	}
	rss2, _ := settledMemory(b)
	per := func(x, y uint64) float64 { return (float64(y) - float64(x)) / float64(n) }
	b.ReportMetric(per(rss0, rss1), "rss-B/key")
	b.ReportMetric(per(heap0, heap1), "heap-B/key")
	b.ReportMetric(per(rss0, rss2), "released-B/key")
	b.ReportMetric(per(rss0, rssGC), "rss-gc-B/key")
	b.ReportMetric(float64(st.TableBytes)/float64(n), "table-B/key")
	b.ReportMetric(float64(st.ArenaBytes)/float64(n), "arena-B/key")
	if peakReset {
		b.ReportMetric(per(rss0, peak), "peak-B/key")
	}
	runtime.KeepAlive(nd)
}

// settledMemory returns the process's resident memory and live heap, in
// bytes, after a garbage collection that returns free memory to the OS.
func settledMemory(b *testing.B) (rss, heap uint64) {
	b.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return procStatus(b, "VmRSS:"), ms.HeapAlloc
}

// procStatus returns a field of /proc/self/status in kB, as bytes.
func procStatus(b *testing.B, field string) uint64 {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status:", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte(field)); ok {
			kb, err := strconv.ParseUint(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}
