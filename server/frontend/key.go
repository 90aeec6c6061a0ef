package frontend

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/geolimit/geolimit/crdt"
)

// Keys: one (rule, value) pair is one counter, whichever front end carries
// it. Every front end turns the value a request names (a JSON key, a header,
// a path, an Envoy descriptor's entries, an SPOE argument) into the key
// counted with Key, and nothing else:
//
//   - a value of 1 to crdt.MaxKeyLen bytes that does not start with
//     "sha256:" is the key, as it is;
//   - any other value (longer, or starting with "sha256:") is replaced by
//     "sha256:" and the hex SHA-256 digest of the whole value.
//
// So a long value counts alike through the API, the proxy and the rate
// limit service, and the keys that start with "sha256:" are all digests of
// values: a client that sends "sha256:<digest of some value>" is hashed too
// and gets a counter of its own, never the value's. Keys made of several
// parts are composed first (ComposeKey), then bounded. Idempotency keys are
// bounded the same way (IdempotencyKey). Checks.Add applies both to every
// check a front end makes, and GET /v1/keys looks a value up through Key:
// a key is normalised exactly once (Key is not idempotent on the hashed
// form, by design).

// HashedPrefix starts every key that Key hashed.
const HashedPrefix = "sha256:"

// Key returns the key counted for the value v (see the comment above); v
// itself when it is short and not in the hashed form, with no allocation.
func Key(v string) string {
	if len(v) <= crdt.MaxKeyLen && !strings.HasPrefix(v, HashedPrefix) {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return HashedPrefix + hex.EncodeToString(sum[:])
}

// IdempotencyKey is the idempotency key remembered for the value v: bounded
// as keys are (Key), so that every front end remembers one value alike.
func IdempotencyKey(v string) string { return Key(v) }

// ComposeKey joins the parts of a composite key: each part's '\' and '|'
// are escaped with a '\', and the parts are joined by '|'. Two different
// lists of parts never give one key; a part without either byte is kept as
// it is, so "acme|bob" is the key of ("acme", "bob") and
// "acme\|bob|x" that of ("acme|bob", "x").
func ComposeKey(parts []string) string {
	n := len(parts)
	for _, p := range parts {
		n += len(p)
	}
	var b strings.Builder
	b.Grow(n)
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		for {
			j := strings.IndexAny(p, `|\`)
			if j < 0 {
				b.WriteString(p)
				break
			}
			b.WriteString(p[:j])
			b.WriteByte('\\')
			b.WriteByte(p[j])
			p = p[j+1:]
		}
	}
	return b.String()
}
