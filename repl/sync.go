package repl

import (
	"time"

	"github.com/geolimit/geolimit/identity"
)

// Sync: asking the other PoPs for their totals, and pacing the re-sends
// they ask for.

// maxRequesters bounds the nodes of one remote PoP whose sync requests are
// paced one by one; beyond it, a request is paced after the latest answer.
const maxRequesters = 64

// Reconnected tells the Core that the global link came back after an
// outage: the other PoPs are asked for their totals and get this PoP's.
func (c *Core) Reconnected(now int64) {
	c.askSync(now)
	c.doWork(now)
}

// coalesce is how long a sync request or a re-send of the owned totals
// waits for others asked for meanwhile: one flush interval, at most 50ms.
func (c *Core) coalesce() int64 { return int64(min(c.cfg.FlushInterval, 50*time.Millisecond)) }

// askSync schedules asking the other PoPs for their totals (and re-sending
// this node's owned totals to them).
func (c *Core) askSync(now int64) { c.askSyncFor(now, false) }

// askSyncFor is askSync; remote says a message from another PoP is the
// reason, so the re-send is paced (see remoteResend).
func (c *Core) askSyncFor(now int64, remote bool) {
	if c.syncAt == 0 {
		c.syncAt = max(now+c.coalesce(), 1)
	}
	if remote {
		c.remoteResend(now)
	} else {
		c.scheduleResend(now)
	}
}

// remoteResend schedules a re-send of the owned totals that another PoP's
// message asked for (see remoteResendAt).
func (c *Core) remoteResend(now int64) {
	if c.resendAt == 0 {
		c.remoteResendAt(now + c.coalesce())
	}
}

// remoteResendAt schedules a re-send of the owned totals at at or later,
// paced so that messages from outside the PoP cannot make it re-send its
// totals more than once per SyncInterval, however many PoPs or nodes ask or
// appear: the requests of one interval share its re-send (a heal, where
// several PoPs ask within one moment, costs one). It returns when the
// re-send is due.
func (c *Core) remoteResendAt(at int64) int64 {
	if c.resendTAT > at {
		at = c.resendTAT
		c.stats.ResendsDeferred++
	}
	at = max(at, 1)
	if c.resendAt == 0 || at < c.resendAt {
		c.resendAt = at
	}
	return c.resendAt
}

// scheduleResend schedules re-sending this node's owned totals to the other
// PoPs, for a reason inside the PoP: within one coalescing interval, even if
// a paced re-send was due later.
func (c *Core) scheduleResend(now int64) {
	if at := max(now+c.coalesce(), 1); c.resendAt == 0 || at < c.resendAt {
		c.resendAt = at
	}
}

// lastAnswer returns when the last answer to requester's sync requests was
// due (0: none within the last interval), making room for requester in
// p.answered: entries older than interval are dropped, and when the table
// is still full, the latest answer to any node of the PoP counts.
func (p *peer) lastAnswer(requester identity.Replica, now, interval int64) int64 {
	if p.answered == nil {
		p.answered = map[identity.Replica]int64{}
	}
	if at, ok := p.answered[requester]; ok {
		return at
	}
	if len(p.answered) < maxRequesters {
		return 0
	}
	var latest int64
	for r, at := range p.answered {
		if now-at >= interval {
			delete(p.answered, r)
		} else {
			latest = max(latest, at)
		}
	}
	if len(p.answered) < maxRequesters {
		return 0
	}
	for r := range p.answered {
		delete(p.answered, r) // make room: the pacing holds through latest
		break
	}
	return latest
}
