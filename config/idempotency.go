package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/geolimit/geolimit/pop"
)

// IdempotencyHeader is the conventional header of idempotency keys, the
// one to name in idempotency.header.
const IdempotencyHeader = "Idempotency-Key"

// Idempotency configures idempotency keys: a request that names one is
// decided once per (rule, key, idempotency key) within TTL, and a retry
// gets the same decision without spending anything, on any node of the
// PoP.
type Idempotency struct {
	// Header is the request header that carries the idempotency key in
	// proxy mode, forward auth and the middleware (a request that sends it
	// more than once is refused). The decision API reads the field
	// idempotency_key instead, and the rate limit service the descriptor
	// entry named by rls descriptors' idempotency_key. Empty, the default:
	// those front ends read none. Name one (IdempotencyHeader,
	// "Idempotency-Key", is the convention) only in front of an upstream
	// that honours the key itself: a client that replays one key gets its
	// remembered admission again without spending anything, and the
	// request reaches the upstream.
	Header string `yaml:"header"`
	// TTL is how long a decision is remembered for its idempotency key. At
	// most 720h. Default 24h.
	TTL Duration `yaml:"ttl"`
	// MaxKeys caps the decisions remembered, about 160 bytes each; when
	// full, the one remembered until the earliest time is forgotten first.
	// 0, the default, means limits.max_keys / 4.
	MaxKeys int `yaml:"max_keys"`
}

// MaxKeysOr returns MaxKeys, or when it is 0 the default derived from
// limits.max_keys.
func (i Idempotency) MaxKeysOr(l Limits) int {
	if i.MaxKeys != 0 {
		return i.MaxKeys
	}
	return max(l.MaxKeys/4, 1)
}

func (i *Idempotency) validate() error {
	switch {
	case strings.ContainsAny(i.Header, " \t\r\n:"):
		return fmt.Errorf("idempotency.header: %q is not a header name", i.Header)
	case i.TTL <= 0:
		return fmt.Errorf("idempotency.ttl: must be positive, got %s", i.TTL)
	case time.Duration(i.TTL) > pop.MaxIdempotencyTTL:
		return fmt.Errorf("idempotency.ttl: at most %s, got %s", pop.MaxIdempotencyTTL, i.TTL)
	case i.MaxKeys < 0:
		return fmt.Errorf("idempotency.max_keys: must be 0 (limits.max_keys / 4) or more, got %d", i.MaxKeys)
	}
	return nil
}
