// Package crdt is geolimit's store of windowed G-counters keyed by (rule,
// key, window), the replica identities that own their entries, and the
// counts section of the wire format (package wire puts it in envelopes).
//
// Each (rule, key, window) is a G-counter: replica -> count. Its value is the
// sum over replicas and two counters merge by taking the per-replica maximum.
// Only the owning replica raises its own entry, so merging absolute values is
// commutative, associative and idempotent: loss, duplication and reordering of
// deltas are harmless.
//
// Replicas come in two kinds. A node replica (region/pop/node#incarnation) owns
// one node's counts; nodes of one PoP (its members) exchange these. A PoP
// replica (region/pop/*#epoch, see PoPReplica) owns a PoP's aggregate: for
// each (rule, key, window) the PoP total, the sum of its members' counts. To
// other PoPs a PoP speaks only through its aggregate, so a receiver holds one
// entry per remote PoP rather than one per remote node. The epoch is a number
// the members of a PoP agree on (outside this package); a new epoch makes a
// new replica, so its counts are never hidden behind a former epoch's maximum.
//
// A Store tells the two kinds apart relative to its own replica: a member is
// a node replica of the own PoP other than the store itself, and a store's PoP
// total of a window is its own count plus its members' counts (Flush, Totals).
//
// The package is pure: no goroutines, no clock, no I/O, no logging (its one
// system call maps large tables outside the Go heap, see offheap.go). Window
// indexes and the replica identity are arguments, never invented here. A
// Store with StoreConfig.Seed set is deterministic: the same inputs in the
// same order give the same state and the same outputs.
//
//	self := crdt.Replica{PoPID: crdt.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: inc}
//	st := crdt.NewStore(crdt.StoreConfig{Self: self, MaxKeys: 1 << 20})
//	res := st.Admit(rule, "203.0.113.7", crdt.Now{Index: w, Elapsed: e, Width: W}, 100, 1, true)
//	res = st.AdmitSplit(rule, key, now, 100, 1, true, &crdt.Allowance{Horizon: lag, Replicas: n})
//	st.FlushAt(now, horizon, func(e crdt.FlushEntry) { /* batch e.Count and/or e.PoP as e.Changed says */ })
//	id, _ := st.Intern(remote)
//	st.Merge(rule, key, w, w, id, count)
package crdt

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Replica identifies the owner of one G-counter entry: a node of a PoP, in
// one incarnation (a number that is new at every start, so a restarted
// node's fresh counts are never hidden behind its old maximum). A replica
// whose Node is PoPNode is a PoP's aggregate instead, and its Incarnation is
// the PoP's epoch. A Replica is a plain value, safe for concurrent use.
type Replica struct {
	PoPID
	Node        string
	Incarnation uint64
}

// PoPNode is the Node name of a PoP's aggregate replica. Validate accepts it
// (an aggregate is a valid sender), but no node may be called so (ValidName
// refuses it): it would be taken for its PoP's aggregate.
const PoPNode = "*"

// PoPReplica returns the aggregate replica of PoP p in one epoch.
func PoPReplica(p PoPID, epoch uint64) Replica {
	return Replica{PoPID: p, Node: PoPNode, Incarnation: epoch}
}

// IsPoP reports whether r is an aggregate replica: a PoP's, or a region's
// (IsRegion).
func (r Replica) IsPoP() bool { return r.Node == PoPNode }

// RegionPoP is the PoP name of a region's aggregate replica
// (region/*/*#epoch, RegionReplica): like PoPNode, ValidName refuses it for
// any real PoP.
const RegionPoP = "*"

// RegionReplica returns the aggregate replica of region under region epoch
// epoch: for each (rule, key, window) the region total, the sum of its PoPs'
// totals, which one PoP of the region at a time publishes to the other
// regions.
func RegionReplica(region string, epoch uint64) Replica {
	return Replica{PoPID: PoPID{Region: region, PoP: RegionPoP}, Node: PoPNode, Incarnation: epoch}
}

// IsRegion reports whether r is a region's aggregate replica.
func (r Replica) IsRegion() bool { return r.Node == PoPNode && r.PoP == RegionPoP }

// ErrBadReplica is returned for a replica identity that cannot be valid.
var ErrBadReplica = errors.New("crdt: bad replica identity")

// String formats r as region/pop/node#incarnation.
func (r Replica) String() string {
	return r.PoPID.String() + "/" + r.Node + "#" + strconv.FormatUint(r.Incarnation, 10)
}

// Validate reports whether r's names are valid (ValidName; the Node of an
// aggregate is PoPNode, and the PoP of a region's aggregate RegionPoP).
func (r Replica) Validate() error {
	if r.IsRegion() {
		if err := ValidName(r.Region); err != nil {
			return fmt.Errorf("%w: region: %w", ErrBadReplica, err)
		}
		return nil
	}
	if err := r.PoPID.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadReplica, err)
	}
	if r.IsPoP() {
		return nil
	}
	if err := ValidName(r.Node); err != nil {
		return fmt.Errorf("%w: node: %w", ErrBadReplica, err)
	}
	return nil
}

// SamePoP reports whether r and o belong to the same PoP (nodes or aggregate).
func (r Replica) SamePoP(o Replica) bool { return r.PoPID == o.PoPID }

// ParseReplica parses region/pop/node#incarnation (Replica.String) and
// validates the result.
func ParseReplica(s string) (Replica, error) {
	name, inc, ok := strings.Cut(s, "#")
	parts := strings.Split(name, "/")
	if !ok || len(parts) != 3 {
		return Replica{}, fmt.Errorf("%w: %q is not region/pop/node#incarnation", ErrBadReplica, s)
	}
	n, err := strconv.ParseUint(inc, 10, 64)
	if err != nil {
		return Replica{}, fmt.Errorf("%w: %q: incarnation: %w", ErrBadReplica, s, err)
	}
	r := Replica{PoPID: PoPID{Region: parts[0], PoP: parts[1]}, Node: parts[2], Incarnation: n}
	return r, r.Validate()
}

// CompareReplicas orders replicas by region, PoP, node and incarnation.
func CompareReplicas(a, b Replica) int {
	if c := cmp.Compare(a.Region, b.Region); c != 0 {
		return c
	}
	if c := cmp.Compare(a.PoP, b.PoP); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Node, b.Node); c != 0 {
		return c
	}
	return cmp.Compare(a.Incarnation, b.Incarnation)
}
