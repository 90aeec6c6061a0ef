package repl

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
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
	c.syncAll = true
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
	c.resendWhat |= resendAll
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
	c.resendWhat |= resendAll
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

// Scoped sync requests. A heartbeat gap says that messages from one PoP
// went missing, not from every PoP: the sync request it causes names the
// PoP whose totals may be missing, and only that PoP re-sends them, so a
// lost message costs about what it carried. With region voices, what a
// PoP of another region sends this node is its region's totals: the
// request names the region ("region/*"), and only its voice re-sends them.
// A request that names no one (a start, an epoch, a PoP heard again after
// a silence, a reconnect) asks every PoP, as ever; a node of an older
// version takes a scoped request for such a one (it costs more, never
// less). The scope rides as control entries (startup.go).

// syncScopeKey prefixes the key of a control entry naming a PoP
// ("region/pop") or a region's voice ("region/*") that a sync request asks.
const syncScopeKey = "sync-of/1:"

// What a re-send sends (Core.resendWhat).
const (
	resendPoPTotals    = 1 << iota // the owned PoP totals
	resendRegionTotals             // the owned region totals, as the region's voice
	resendRegionTo                 // the owned region totals, to the PoPs in regionTo only
	resendAll          = resendPoPTotals | resendRegionTotals
)

// maxSyncScope bounds the PoPs one sync request names; beyond it, the
// request asks every PoP.
const maxSyncScope = 16

// askSyncOf schedules asking only from, a PoP whose heartbeats went
// missing or, with remote, that is heard again after a silence (a restart,
// a cut that healed), to re-send what it sends this node: its PoP totals
// or, from another region with region voices, its region's totals through
// the region's voice. What this node sends from may have been lost too: it
// re-sends that, its owned PoP totals or, as its region's voice, its
// region totals: to every PoP after a heartbeat gap (a region's stream
// reaches this node through one PoP at a time, and the gap was every PoP
// of that region's: publishing them to the gap's PoP alone left the
// others to ask in turn, and a two-sided surge went from 1.07 to 1.13 of
// its limit in its heal), to from alone when it is heard again
// (regionAnswer; the heartbeat that ends a silence shows a gap too, and
// publishes them to every PoP then). What went missing is from's and this
// node's, not every PoP's: asking every PoP, and publishing the PoP
// totals, cost each node of a fleet the live totals of every region at
// each restart of a PoP anywhere. remote paces the re-send as one asked
// for from outside the PoP (remoteResendAt).
func (c *Core) askSyncOf(now int64, from identity.PoPID, remote bool) {
	target, what := from.String(), uint8(resendPoPTotals)
	if c.regionVoices() && from.Region != c.selfPoP.Region {
		target, what = from.Region+"/"+identity.RegionPoP, 0
		if c.region.voice {
			what = resendRegionTotals
			if remote {
				what = c.regionAnswer(from, what)
			}
		}
	}
	switch {
	case what == 0:
	case remote:
		if c.resendAt == 0 {
			c.remoteResendAt(now + c.coalesce())
		}
	default:
		if at := max(now+c.coalesce(), 1); c.resendAt == 0 || at < c.resendAt {
			c.resendAt = at
		}
	}
	c.resendWhat |= what
	c.scopeSync(now, target)
}

// scopeSync schedules a sync request that names target ("region/pop", or
// "region/*" for a region's voice) among the PoPs it asks.
func (c *Core) scopeSync(now int64, target string) {
	if c.syncAt == 0 {
		c.syncAt = max(now+c.coalesce(), 1)
	}
	if c.syncAll {
		return
	}
	for _, s := range c.syncScope {
		if s == target {
			return
		}
	}
	if len(c.syncScope) >= maxSyncScope {
		c.syncAll = true
		return
	}
	c.syncScope = append(c.syncScope, target)
}

// appendSyncScope adds the scope of a sync request to its entries.
func (c *Core) appendSyncScope(es []crdt.Entry) []crdt.Entry {
	scope := slices.Clone(c.syncScope)
	slices.Sort(scope)
	for _, s := range scope {
		es = append(es, crdt.Entry{Rule: controlRule, Key: syncScopeKey + s, Count: 1})
	}
	return es
}

// syncAsks returns what a sync request asks of this node's PoP: every
// owned total (a request that names no one; from another region under
// region voices, the region totals when this PoP is the voice, else
// nothing), the PoP totals (it names this PoP), the region totals (it
// names this region's voice, and this PoP is the voice), or nothing (0: it
// names others only); scoped says it names some.
func (c *Core) syncAsks(d *wire.Delta) (what uint8, scoped bool) {
	self := c.selfPoP.String()
	voice := c.selfPoP.Region + "/" + identity.RegionPoP
	for _, e := range d.Entries {
		if e.Rule != controlRule || !strings.HasPrefix(e.Key, syncScopeKey) {
			continue
		}
		scoped = true
		switch e.Key[len(syncScopeKey):] {
		case self:
			what |= resendPoPTotals
		case voice:
			if c.region.voice {
				what |= resendRegionTotals
			}
		}
	}
	if !scoped {
		what = resendAll
		if c.regionVoices() && d.Sender.Region != c.selfPoP.Region {
			// A PoP of another region counts this PoP's totals in its
			// region's, which its voice sends: a re-send of them reaches
			// this region only, never the PoP that asked.
			what = 0
			if c.region.voice {
				what = resendRegionTotals
			}
		}
	}
	return what, scoped
}

// resendWants turns the re-send due into work: a PoP totals' re-send
// without the region totals when only region mates asked for it.
func (c *Core) resendWants() {
	what := c.resendWhat
	c.resendWhat = 0
	if what == 0 {
		what = resendAll
	}
	if what&resendPoPTotals != 0 {
		if what&resendRegionTotals == 0 && c.want&wantGlobalAE == 0 {
			c.want |= wantNoRegion
		}
		c.want |= wantGlobalAE
	}
	if what&resendRegionTotals != 0 {
		c.want |= wantRegionAE
	}
	if what&resendRegionTo != 0 {
		c.want |= wantRegionTo
	}
}

// Answers for a region. A PoP that asks every PoP for its totals (a start,
// a restart, a reconnect) needs of another region only that region's
// totals, which its voice publishes to every PoP of the fleet: a re-send
// there costs every node of the fleet the region's live totals, for one
// PoP's sake. So the voice sends them to the PoPs that asked alone, on the
// subject of relayed state (KindState, To), and only when more PoPs asked
// at once than maxRegionTo (a fleet starting together) publishes them to
// all. Its own region's PoPs hold the PoP totals its region totals
// sum, and are sent none.

// minRegionTo is the least number of PoPs a re-send answers one by one
// (maxRegionTo).
const minRegionTo = 8

// maxRegionTo bounds the PoPs answered one by one in a re-send: a quarter
// of the PoPs this node knows, at least minRegionTo; beyond it, the region
// totals go to every PoP at once, which costs the fleet less than as many
// messages to one PoP each.
func (c *Core) maxRegionTo() int { return max(minRegionTo, len(c.peers.m)/4) }

// regionAnswer returns how this PoP answers, with its region totals, a
// sync request of PoP from that asks what: unchanged, or with
// resendRegionTotals replaced by an answer to from alone (resendRegionTo)
// or dropped (from is of this region).
func (c *Core) regionAnswer(from identity.PoPID, what uint8) uint8 {
	if what&resendRegionTotals == 0 || !c.regionVoices() {
		return what
	}
	if from.Region == c.selfPoP.Region {
		return what &^ resendRegionTotals
	}
	if c.regionTo == nil {
		c.regionTo = map[identity.PoPID]bool{}
	}
	if c.resendWhat&resendRegionTotals != 0 || (!c.regionTo[from] && len(c.regionTo) >= c.maxRegionTo()) {
		return what // a re-send to every PoP is due: it answers from too
	}
	c.regionTo[from] = true
	return what&^resendRegionTotals | resendRegionTo
}

// regionTotalsTo sends the owned region totals to each PoP in regionTo,
// as this PoP speaks for its region.
func (c *Core) regionTotalsTo(now int64) {
	to := c.regionTo
	c.regionTo = nil
	if !c.region.voice || c.region.epoch == 0 || len(to) == 0 {
		return
	}
	d := c.node.RegionAntiEntropyPart(now, c.ownsKey, 0, 1, false)
	if len(d.Entries) == 0 {
		return
	}
	ids := make([]identity.PoPID, 0, len(to))
	for id := range to {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Less(ids[j]) })
	for _, id := range ids {
		c.stats.RegionAnswers++
		c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindState, To: id, Reliable: true, Delta: &d})
	}
}
