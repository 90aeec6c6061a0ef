// Package inflight is the replicated state of concurrency limits: each
// node's count of the requests in flight per key, and its section of the
// wire format.
//
// A concurrency rule limits the requests in flight per key, not a rate:
// its count goes down as well as up, so it is no G-counter. Each node owns
// its own count of a key (the slots its leases hold) and sends it to the
// PoP's members as an absolute value with a Version; a receiver keeps per
// sender the value of the highest version it heard, so a newer value wins
// and a lost, duplicated or reordered message is harmless. Versions are
// the sender's: they only grow within one incarnation, and a restarted
// node is another sender.
//
// Trust: a node sends only its own counts, to its PoP's members; a
// receiver takes them only from the member that names itself their sender
// and clamps each to the rule's limit (package pop).
package inflight

// Count is one sender's in-flight count of a key under a concurrency
// rule.
type Count struct {
	// Rule is the concurrency rule's name (1 to codec.MaxRuleNameLen bytes).
	Rule string
	// Key is the key (1 to codec.MaxKeyLen bytes).
	Key string
	// Count is the slots the sender's leases of the key hold.
	Count uint64
	// Version orders the sender's values of the key: the higher one is the
	// newer. It only grows within one incarnation of the sender.
	Version uint64
}
