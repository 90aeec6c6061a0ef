package crdt

import (
	"hash/maphash"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// hash mixes the rule into the key's hash so equal keys of different rules
// land apart. With a fixed seed the key's hash is xxhash mixed with the seed:
// deterministic, where maphash's seed cannot be chosen. (Admit inlines the
// maphash case by hand: with both cases hash is too big to inline.)
func (s *Store) hash(rule RuleID, key string) uint64 {
	if s.fixedSeed == 0 {
		return maphash.String(s.seed, key) ^ ruleMix(rule)
	}
	return mix64(xxhash.Sum64String(key)^s.fixedSeed) ^ ruleMix(rule)
}

// ruleMix is what a key's hash is xored with for rule: the rule times a
// 32-bit odd constant (2^32 over the golden ratio). Below MaxRules it has no
// bit above bit 44, so the top bits of a hash, which pick its shard
// (shardOf), are the key's whatever the rule: every rule's slot of one key
// lies in one shard, and a caller that reads two of them (a shared paced
// key's TAT and counts, PaceCountHashed) takes one lock. The low 32 bits,
// which pick the slot (home), still differ from rule to rule.
func ruleMix(rule RuleID) uint64 { return (uint64(rule) + 1) * 0x9e3779b9 }

// maxShardBits is the most bits of a hash shardOf reads: they lie above
// every ruleMix's.
const maxShardBits = 19

// RuleHash returns the hash of (to, key) given h, the hash of (from, key),
// without hashing the key again. Both lie in one shard.
func RuleHash(h uint64, from, to RuleID) uint64 { return h ^ ruleMix(from) ^ ruleMix(to) }

// mix64 is splitmix64's finalizer: a bijection that spreads every input bit
// over the output.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Hash returns the hash of (rule, key) and prefetches the slot where a look-up
// of it starts, so that a caller with other work to do before it decides
// (AdmitSplitHashed) overlaps that work with the memory access.
func (s *Store) Hash(rule RuleID, key string) uint64 {
	h := s.hash(rule, key)
	s.PrefetchShard(h)
	s.PrefetchSlot(h)
	return h
}

// KeyHash returns the hash of (rule, key) that the ...Hashed methods take,
// and touches no memory of the store. With PrefetchShard and PrefetchSlot it
// lets a caller with several keys to merge (a received delta) take their
// cache misses together rather than one after another: hash and
// PrefetchShard every key, then PrefetchSlot every key, then merge.
func (s *Store) KeyHash(rule RuleID, key string) uint64 { return s.hash(rule, key) }

// PrefetchShard prefetches the lines of h's shard that a merge reads,
// without waiting for them.
func (s *Store) PrefetchShard(h uint64) {
	sh := s.shardOf(h)
	prefetch(uintptr(unsafe.Pointer(sh)))
	prefetch(uintptr(unsafe.Pointer(&sh.side)))
}

// PrefetchSlot prefetches the slot where a look-up of h starts, and its
// list of remote counts; it reads h's shard (PrefetchShard it first).
func (s *Store) PrefetchSlot(h uint64) {
	sh := s.shardOf(h)
	if n := sh.n.Load(); n > 0 {
		p := uintptr(home(h, int(n)))
		prefetch(sh.base.Load() + p*unsafe.Sizeof(slot{}))
		if sb := sh.sideBase.Load(); sb != 0 {
			prefetch(sb + p*unsafe.Sizeof(sideList{}))
		}
	}
}
