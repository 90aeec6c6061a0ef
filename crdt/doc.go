// Package crdt is geolimit's store of windowed G-counters keyed by (rule,
// key, window), and the counts section of the wire format (package wire puts
// it in envelopes). The replicas that own the entries are named by package
// identity.
//
// Each (rule, key, window) is a G-counter: replica -> count. Its value is the
// sum over replicas and two counters merge by taking the per-replica maximum.
// Only the owning replica raises its own entry, so merging absolute values is
// commutative, associative and idempotent: loss, duplication and reordering of
// deltas are harmless.
//
// Replicas come in two kinds. A node replica (region/pop/node#incarnation) owns
// one node's counts; nodes of one PoP (its members) exchange these. A PoP
// replica (region/pop/*#epoch, see identity.PoPReplica) owns a PoP's aggregate: for
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
//	self := identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: inc}
//	st := crdt.NewStore(crdt.StoreConfig{Self: self, MaxKeys: 1 << 20})
//	res := st.Admit(rule, "203.0.113.7", crdt.Now{Index: w, Elapsed: e, Width: W}, 100, 1, true)
//	res = st.AdmitSplit(rule, key, now, 100, 1, true, &crdt.Allowance{Horizon: lag, Replicas: n})
//	st.FlushAt(now, horizon, func(e crdt.FlushEntry) { /* batch e.Count and/or e.PoP as e.Changed says */ })
//	id, _ := st.Intern(remote)
//	st.Merge(rule, key, w, w, id, count)
package crdt
