package frontend

import (
	"sync/atomic"
	"time"

	"github.com/geolimit/geolimit/pop"
)

// The penalty box (block_for) and failing closed (on_unsure) as the daemon
// reports them: answer fields and metrics.

// GuardMetrics are one rule's penalty-box and unsure counters, read with
// atomic loads at scrape time.
type GuardMetrics struct {
	// Blocks are denials that started a block, BlockedDenials denials of a
	// blocked key, Unsure denials of a rule failing closed by pop.Unsure.
	Blocks, BlockedDenials atomic.Uint64
	Unsure                 [4]atomic.Uint64
}

// Record counts a decision of the penalty box or of failing closed.
func (g *GuardMetrics) Record(d pop.Decision) {
	switch {
	case d.BlockStarted:
		g.Blocks.Add(1)
	case d.Blocked:
		g.BlockedDenials.Add(1)
	case d.Unsure != pop.UnsureNone:
		g.Unsure[d.Unsure&3].Add(1)
	}
}

// AppendGuards appends the answer fields of a blocked or unsure decision:
// "blocked":true, "blocked_until_ms" (Unix milliseconds) and
// "unsure":"<reason>", and "off":true for a rule switched off at run time.
// Other decisions get none.
func AppendGuards(b []byte, d pop.Decision) []byte {
	if d.Off {
		b = append(b, `,"off":true`...)
	}
	if d.Blocked {
		b = append(b, `,"blocked":true`...)
	}
	if d.Unsure != pop.UnsureNone {
		b = append(b, `,"unsure":"`...)
		b = append(b, d.Unsure.String()...)
		b = append(b, '"')
	}
	return b
}

// BlockedUntilFields are the penalty-box fields of GET /v1/keys.
type BlockedUntilFields struct {
	// BlockedUntil is RFC 3339 (UTC, nanoseconds); absent when not blocked.
	BlockedUntil string `json:"blocked_until,omitempty"`
	// BlockedUntilMS is Unix milliseconds; absent when not blocked.
	BlockedUntilMS int64 `json:"blocked_until_ms,omitempty"`
}

func BlockedUntil(until int64) BlockedUntilFields {
	if until == 0 {
		return BlockedUntilFields{}
	}
	return BlockedUntilFields{
		BlockedUntil:   time.Unix(0, until).UTC().Format(time.RFC3339Nano),
		BlockedUntilMS: CeilDiv(until, int64(time.Millisecond)),
	}
}
