// Package crdt holds geolimit's replicated state: a store of windowed G-counters
// keyed by (rule, key, window), and the delta batches nodes exchange.
//
// Each (rule, key, window) is a G-counter: replica -> count. Its value is the
// sum over replicas and two counters merge by taking the per-replica maximum.
// Only the owning replica raises its own entry, so merging absolute values is
// commutative, associative and idempotent: loss, duplication and reordering of
// deltas are harmless.
//
// The package is pure: no goroutines, no clock, no I/O, no logging. Window
// indexes and the replica identity are arguments, never invented here.
//
//	self := crdt.Replica{Region: "eu", PoP: "ams", Node: "ams-1", Incarnation: inc}
//	st := crdt.NewStore(crdt.StoreConfig{Self: self, MaxKeys: 1 << 20})
//	res := st.Admit(rule, "203.0.113.7", crdt.Now{Index: w, Elapsed: e, Width: W}, 100, 1, true)
//	st.Flush(func(e crdt.FlushEntry) { /* batch it */ })
//	id, _ := st.Intern(remote)
//	st.Merge(rule, key, w, w, id, count)
package crdt

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Replica identifies the owner of one G-counter entry: a node of a PoP of a
// region, in one incarnation (a number that is new at every start, so a
// restarted node's fresh counts are never hidden behind its old maximum).
type Replica struct {
	Region      string
	PoP         string
	Node        string
	Incarnation uint64
}

// MaxNameLen caps the length of the region, PoP and node names of a replica.
const MaxNameLen = 64

// ErrBadReplica is returned for a replica identity that cannot be valid.
var ErrBadReplica = errors.New("crdt: bad replica identity")

// String formats r as region/pop/node#incarnation.
func (r Replica) String() string {
	return r.Region + "/" + r.PoP + "/" + r.Node + "#" + strconv.FormatUint(r.Incarnation, 10)
}

// Validate reports whether r's names are non-empty, short and free of '/'.
func (r Replica) Validate() error {
	for _, f := range []struct{ name, v string }{{"region", r.Region}, {"pop", r.PoP}, {"node", r.Node}} {
		if f.v == "" || len(f.v) > MaxNameLen || strings.ContainsAny(f.v, "/#") {
			return fmt.Errorf("%w: %s %q must be 1-%d characters without '/' or '#'", ErrBadReplica, f.name, f.v, MaxNameLen)
		}
	}
	return nil
}

// SamePoP reports whether r and o are nodes of the same PoP.
func (r Replica) SamePoP(o Replica) bool { return r.Region == o.Region && r.PoP == o.PoP }
