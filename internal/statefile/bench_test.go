package statefile_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/internal/statefile"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/wire"
)

// BenchmarkStateFile writes and reads the state of a node of 500k keys of
// a global and a pop-scope rule, streamed (SnapshotEach and Write, then
// Open and Deltas) and whole in memory (Snapshot, then Read), and reports
// the most heap in use above the node's own while it writes (write-MB) and
// while it reads (read-MB; what the node merges is its own either way, so
// the read only counts the entries):
//
//	go test ./internal/statefile -run '^$' -bench StateFile -benchtime 1x
func BenchmarkStateFile(b *testing.B) {
	const keys = 500_000
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC).UnixNano()
	self := identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "a", Incarnation: 1}
	rules := []pop.Rule{
		{Name: "api", Limit: 1000, Window: time.Minute, Cost: 1, Scope: pop.ScopeGlobal},
		{Name: "ip", Limit: 1000, Window: time.Minute, Cost: 1, Scope: pop.ScopePoP},
	}
	n, err := pop.New(pop.Config{Self: self, Rules: rules})
	require.NoError(b, err)
	n.Link().SetEpoch(1)
	for i := range keys {
		k := "10.0." + strconv.Itoa(i)
		for _, r := range rules {
			_, err := n.Decide(now, r.Name, k, 1)
			require.NoError(b, err)
		}
	}
	path := filepath.Join(b.TempDir(), "state")
	h := statefile.Header{Self: self, SavedAt: now}
	for _, streamed := range []bool{true, false} {
		b.Run(map[bool]string{true: "streamed", false: "in-memory"}[streamed], func(b *testing.B) {
			for range b.N {
				w := newPeak()
				if streamed {
					require.NoError(b, statefile.Write(path, h, w.watch(n.SnapshotEach(now))))
				} else {
					require.NoError(b, statefile.Write(path, h, w.watch(statefile.FromSlice(statefile.Collect(n.SnapshotEach(now))))))
				}
				r := newPeak()
				entries := 0
				if streamed {
					f, err := statefile.Open(path)
					require.NoError(b, err)
					require.NoError(b, f.Deltas(func(d *wire.Delta) error {
						r.sample()
						entries += len(d.Entries)
						return nil
					}))
					require.NoError(b, f.Close())
				} else {
					st, err := statefile.Read(path)
					require.NoError(b, err)
					r.sample()
					for _, d := range st.Deltas {
						entries += len(d.Entries)
					}
				}
				require.Equal(b, 2*keys, entries)
				fi, err := os.Stat(path)
				require.NoError(b, err)
				b.ReportMetric(float64(fi.Size())/(1<<20), "file-MB")
				b.ReportMetric(w.mb(), "write-MB")
				b.ReportMetric(r.mb(), "read-MB")
			}
		})
	}
}

// peak samples the heap in use.
type peak struct {
	base, max uint64
	every     int
}

func newPeak() *peak {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return &peak{base: ms.HeapInuse, max: ms.HeapInuse}
}

// mb is the most heap in use above the first sample, in MiB.
func (p *peak) mb() float64 { return float64(p.max-p.base) / (1 << 20) }

func (p *peak) sample() {
	if p.every++; p.every%64 != 1 {
		return
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p.max = max(p.max, ms.HeapInuse)
}

// watch samples the heap at every delta of seq.
func (p *peak) watch(seq func(func(*wire.Delta) bool)) func(func(*wire.Delta) bool) {
	return func(yield func(*wire.Delta) bool) {
		for d := range seq {
			p.sample()
			if !yield(d) {
				return
			}
		}
	}
}
