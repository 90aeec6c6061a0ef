package crdt

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSideEntriesFollowTheirKeys merges remote counts into keys of one
// shard while keys expire (removal shifts probe runs back), the table grows
// and shrinks, and replicas are dropped, and checks after every step that
// each key shows exactly the counts merged into it: the remote entries are
// held by slot position and must move with their slots.
func TestSideEntriesFollowTheirKeys(t *testing.T) {
	type wk struct {
		rep ReplicaID
		win int64
	}
	rng := rand.New(rand.NewPCG(7, 11))
	st := NewStore(StoreConfig{Self: rep("self", 1), Shards: 1, Seed: 3})
	reps := make([]ReplicaID, 5)
	names := map[ReplicaID]string{}
	for i := range reps {
		r := rep(fmt.Sprintf("r%d", i), 1)
		reps[i], _ = st.Intern(r)
		names[reps[i]] = r.String()
	}
	model := map[string]map[wk]uint64{}
	cur := int64(100)
	maxTable, shrunk := 0, false
	for step := range 6000 {
		switch op := rng.IntN(100); {
		case op < 2: // time passes: keys not merged into lately expire
			cur++
			st.Sweep(func(RuleID) int64 { return cur })
		case op < 3: // a replica's counts are dropped
			r := reps[rng.IntN(len(reps))]
			st.DropReplica(st.Replica(r))
			for _, m := range model {
				for k := range m {
					if k.rep == r {
						delete(m, k)
					}
				}
			}
		default:
			// Keys come and go in bursts, so the table grows and shrinks.
			n := 40 + 160*((step/1500)%2)
			key := fmt.Sprintf("k%d", rng.IntN(n))
			r, w, c := reps[rng.IntN(len(reps))], cur-1+rng.Int64N(3), 1+rng.Uint64N(100)
			if got := st.Merge(0, key, cur, w, r, c); got != Merged && got != Unchanged {
				t.Fatalf("step %d: merge: %v", step, got)
			}
			if model[key] == nil {
				model[key] = map[wk]uint64{}
			}
			model[key][wk{r, w}] = max(model[key][wk{r, w}], c)
		}
		tb := st.Stats().TableBytes
		shrunk = shrunk || tb < maxTable
		maxTable = max(maxTable, tb)
		for key, m := range model {
			if step%50 != 0 && rng.IntN(10) != 0 {
				continue // every key every 50 steps, a tenth of them between
			}
			want := map[string]uint64{}
			for k, c := range m {
				if k.win >= cur-1 {
					want[fmt.Sprintf("%d/%s", k.win, names[k.rep])] = c
				}
			}
			views, _ := st.View(0, key, cur)
			got := map[string]uint64{}
			for _, v := range views {
				for r, c := range v.Replicas {
					got[fmt.Sprintf("%d/%s", v.Index, r)] = c
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d: key %s holds %v, want %v", step, key, got, want)
			}
		}
	}
	if st.Stats().Keys == 0 || !shrunk {
		t.Fatalf("keys left %d, table shrunk %v: the test did not exercise what it is for", st.Stats().Keys, shrunk)
	}
}

// TestSideSearch checks sideSearch against a linear scan on sorted lists
// of every shape: dense and sparse replicas, one or several windows each,
// windows across a 2^32 boundary, and targets present, absent, before the
// first and after the last.
func TestSideSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	for range 3000 {
		n := rng.IntN(200)
		base := int64(1<<32-2) + int64(rng.IntN(4)) // windows across a 2^32 boundary
		var es []sideEntry
		r := ReplicaID(rng.IntN(5))
		for len(es) < n {
			r += ReplicaID(1 + rng.IntN(1+rng.IntN(20))) // dense or sparse
			for w := base - 1; w <= base+1; w++ {
				if rng.IntN(3) > 0 {
					es = append(es, newSideEntry(w, r, 1, false))
				}
			}
		}
		for range 20 {
			rep, win := ReplicaID(rng.IntN(int(r)+10)), base-1+int64(rng.IntN(3))
			want := 0
			for want < len(es) && (es[want].rep() < rep || es[want].rep() == rep && es[want].win(win) < win) {
				want++
			}
			for _, nreps := range []int{0, 1, int(r) + 10, int(r) * 3, 1 << 20} {
				if got := sideSearch(es, rep, win, nreps); got != want {
					t.Fatalf("%d entries, %d replicas: search (%d, %d) = %d, want %d", len(es), nreps, rep, win-base, got, want)
				}
			}
		}
	}
}
