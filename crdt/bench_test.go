package crdt

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/geolimit/geolimit/identity"
)

// benchKeys returns n IPv4 keys and the same keys shuffled, back to back
// in one buffer (requests arrive in no particular order, and the daemon
// decides on a key it has just parsed, which is in cache).
func benchKeys(n int) (created, shuffled []string) {
	created = make([]string, n)
	buf := make([]byte, 0, 16*n)
	for i := range created {
		created[i] = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255)
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(n)
	offs := make([]int, n+1)
	for i, j := range order {
		buf = append(buf, created[j]...)
		offs[i+1] = len(buf)
	}
	all := string(buf)
	shuffled = make([]string, n)
	for i := range shuffled {
		shuffled[i] = all[offs[i]:offs[i+1]]
	}
	return created, shuffled
}

func benchStore(b *testing.B, keys []string) *Store {
	b.Helper()
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: 4 * len(keys)})
	for _, k := range keys {
		st.Admit(0, k, at(1), 1<<40, 1, true)
	}
	return st
}

// BenchmarkAdmit decides and counts one of 100k keys far from its limit.
func BenchmarkAdmit(b *testing.B) {
	created, keys := benchKeys(100_000)
	st := benchStore(b, created)
	now := Now{Index: 1, Elapsed: W / 2, Width: W}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st.Admit(0, keys[i%len(keys)], now, 1<<40, 1, true)
	}
}

// BenchmarkAdmitSplit is BenchmarkAdmit with the near-limit allowance of a
// fleet of 40 nodes: far from their limit the keys cost the slot's test only.
func BenchmarkAdmitSplit(b *testing.B) {
	created, keys := benchKeys(100_000)
	st := benchStore(b, created)
	now := Now{Index: 1, Elapsed: W / 2, Width: W}
	a := &Allowance{Horizon: int64(200 * time.Millisecond), Members: 2, PoPs: 20}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st.AdmitSplit(0, keys[i%len(keys)], now, 1<<40, 1, true, a)
	}
	if st.Stats().HotKeys != 0 {
		b.Fatal("keys far from their limit took allowance state")
	}
}

// BenchmarkAdmitSplitAtLimit decides keys at their limit, every decision
// split: 1 000 keys the other PoPs hold at 0.9 of a limit of 1 000, over a
// fleet of 40 nodes, with this node's path as slow as the fleet's slowest
// and with it quicker (its share paced: Allowance.Reach).
func BenchmarkAdmitSplitAtLimit(b *testing.B) {
	for _, c := range []struct {
		name  string
		reach int64
	}{{"reach=horizon", 0}, {"reach=2x", int64(400 * time.Millisecond)}} {
		b.Run(c.name, func(b *testing.B) {
			st := settled(NewStore(StoreConfig{Self: rep("self", 1), Seed: 3}))
			keys := make([]string, 1000)
			for i := range keys {
				keys[i] = "k" + strconv.Itoa(i)
				for p := range 3 {
					id, ok := st.Intern(identity.PoPReplica(identity.PoPID{Region: "far", PoP: strconv.Itoa(p)}, 1))
					if !ok || st.Merge(0, keys[i], 1, 1, id, 300) != Merged {
						b.Fatal("merge")
					}
				}
			}
			now := Now{Index: 1, Elapsed: W / 2, Width: W}
			a := &Allowance{Horizon: int64(200 * time.Millisecond), Members: 2, PoPs: 20, Reach: c.reach}
			for _, k := range keys {
				for range 10 {
					st.AdmitSplit(0, k, now, 1000, 1, true, a)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				st.AdmitSplit(0, keys[i%len(keys)], now, 1000, 1, true, a)
			}
			if st.Stats().HotKeys == 0 {
				b.Fatal("no key was split")
			}
		})
	}
}

// BenchmarkAdmitFlood decides new keys in a full store of 100k keys whose
// keys are not being limited: every decision makes room by evicting one.
func BenchmarkAdmitFlood(b *testing.B) {
	created, _ := benchKeys(100_000)
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: len(created)})
	st.SetProtect(0, 1<<40)
	for _, k := range created {
		st.Admit(0, k, at(1), 1<<40, 1, true)
	}
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = "flood-" + strconv.Itoa(i)
	}
	now := Now{Index: 1, Elapsed: W / 2, Width: W}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st.Admit(0, keys[i&(len(keys)-1)], now, 1<<40, 1, true)
	}
}

// BenchmarkAdmitSplitFirstAdmits decides the first admits of new keys of a
// small limit over a fleet of 40 nodes (a cold start's, or new clients'):
// a key's first admit takes no hot entry, though its next ones may be
// split (its first split learns what it needs from the shard's records).
func BenchmarkAdmitSplitFirstAdmits(b *testing.B) {
	created, _ := benchKeys(1 << 17)
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: 2 * len(created)})
	now := Now{Index: 1, Elapsed: W / 2, Width: W}
	a := &Allowance{Horizon: int64(200 * time.Millisecond), Members: 2, PoPs: 20}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(created) == 0 && i > 0 {
			b.StopTimer()
			st = NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: 2 * len(created)})
			b.StartTimer()
		}
		st.AdmitSplit(0, created[i%len(created)], now, 50, 1, true, a)
	}
}

// BenchmarkDeny decides requests of keys at their limit, all denied: one
// key (its hot entry counts the denials, OwnDemand), and 65 536 keys, four
// times what the hot table holds, so that a denied key's entry is made and
// another's evicted now and then. With asked, the cost the rule was asked
// is counted too (SetCountAsked), as a global share rule's is.
func BenchmarkDeny(b *testing.B) {
	for _, n := range []int{1, 1 << 16} {
		for _, asked := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/asked=%v", n, asked), func(b *testing.B) {
				benchDeny(b, n, asked)
			})
		}
	}
}

func benchDeny(b *testing.B, n int, asked bool) {
	st := NewStore(StoreConfig{Self: rep("self", 1), MaxKeys: 2 * n})
	if asked {
		st.SetCountAsked(0, 1)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k-" + strconv.Itoa(i)
		st.Admit(0, keys[i], at(1), 1, 1, true)
	}
	now := Now{Index: 1, Elapsed: W / 2, Width: W}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if st.Admit(0, keys[i&(n-1)], now, 1, 1, true).Allowed {
			b.Fatal("admitted past its limit")
		}
	}
}
