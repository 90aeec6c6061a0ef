package repl

import (
	"sort"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// The startup sync: a node that starts (a new incarnation) holds none of
// what its former incarnations counted. Its PoP's members hold their per-node
// counts and hand them over on join (memberlist push/pull, MergeState); the
// other PoPs hold its PoP's former epochs' totals and relay them when asked
// (KindState). Until both have arrived the node's decisions may undercount,
// so it counts as unsynced (pop.Link.SetSynced) for at most
// Config.StartupSync.
//
// Knowing when the relays are complete takes one addition to the protocol,
// compatible both ways: a sync request sent while the sender waits carries
// the control entry startupEntry, and the member of an asked PoP that relays
// to the requester's PoP sends, after its relay and its re-send of the totals
// it owns, a marker: a KindState without entries whose sender is the
// requester's PoP aggregate of the requester's epoch. A node of an older
// version ignores the entry and sends no marker; a node waiting for it then
// waits the whole StartupSync. Markers travel on the same NATS connection as
// the relay and the re-send, after them, and are applied in order.

// Control entries ride on messages that carry no counts (sync requests).
// Their rule name cannot name a rule (rule names hold no '/'), so a node of
// any version never counts them; their key names the control and its
// version.
const (
	controlRule  = "geolimit/control"
	startupKey   = "startup-sync/1"
	startupCount = 1
)

// startupEntry asks the receiving PoPs for a marker after their answer.
var startupEntry = crdt.Entry{Rule: controlRule, Key: startupKey, Count: startupCount}

// wantsMarker reports whether a sync request asks for a marker.
func wantsMarker(d *wire.Delta) bool {
	for _, e := range d.Entries {
		if e.Rule == controlRule && e.Key == startupKey {
			return true
		}
	}
	return false
}

// StartupState says where a node's startup sync stands.
type StartupState struct {
	// Synced: the node holds its former incarnations' counts as its PoP and
	// the other PoPs know them, or stopped waiting (TimedOut).
	Synced bool `json:"synced"`
	// TimedOut: Config.StartupSync passed before every answer arrived.
	TimedOut bool `json:"timed_out,omitempty"`
	// WaitingPoP: the own PoP's members' state has not been merged yet.
	WaitingPoP bool `json:"waiting_pop,omitempty"`
	// Waiting are the expected remote PoPs whose answer has not arrived
	// (once TimedOut: had not arrived).
	Waiting []identity.PoPID `json:"waiting,omitempty"`
	// Unknown: no remote PoPs are expected (Config.ExpectedPoPs), so which
	// PoPs exist is not known and the node waits the whole StartupSync.
	Unknown bool `json:"unknown_pops,omitempty"`
	// TookMS is how long the wait took, in milliseconds (once Synced).
	TookMS int64 `json:"took_ms"`
}

// Startup returns the state of the startup sync.
func (c *Core) Startup() StartupState {
	st := StartupState{Synced: !c.syncing, TimedOut: c.syncTimedOut}
	if st.Synced {
		st.TookMS = c.syncTook / 1e6
		st.Waiting = c.syncMissing
		st.Unknown = c.syncTimedOut && c.cfg.GlobalLink && (!c.hasExpected || !c.cfg.Relay)
		return st
	}
	st.WaitingPoP = !c.popSynced()
	if c.cfg.GlobalLink {
		st.Unknown = !c.hasExpected || !c.cfg.Relay
		st.Waiting = c.unanswered()
	}
	return st
}

// startStartup marks the node unsynced when the Core waits at start.
func (c *Core) startStartup() {
	if c.cfg.StartupSync > 0 {
		c.syncing = true
		c.node.SetSynced(false)
	}
}

// popSynced reports whether the own PoP's part of the view is in: alone in
// the PoP, or a member's state merged, and the PoP epoch known (and with
// region voices the region epoch).
func (c *Core) popSynced() bool {
	if c.epoch == 0 || (c.regionVoices() && c.region.epoch == 0) {
		return false // region voices: the region's former totals wait for it
	}
	return !c.cfg.PoPLink || c.popMerged || (c.membersKnown && len(c.members) == 1)
}

// unanswered returns the expected remote PoPs that have not sent a marker
// for the current epoch, sorted. With region voices a sync request reaches
// the PoPs of the own region and, of every other region, its voice (the
// PoP that subscribes to other regions' requests while it speaks for its
// region): what a node needs of another region is its region's totals,
// which every node there holds alike, so one marker from a region answers
// for all its PoPs.
func (c *Core) unanswered() []identity.PoPID {
	var regions map[string]bool // other regions a PoP of which marked
	if c.regionVoices() && c.epoch != 0 {
		for id, p := range c.peers.m {
			if id.Region != c.selfPoP.Region && p.marked == c.epoch {
				if regions == nil {
					regions = map[string]bool{}
				}
				regions[id.Region] = true
			}
		}
	}
	var out []identity.PoPID
	for id, p := range c.peers.m {
		if p.expected && (c.epoch == 0 || p.marked != c.epoch) && !regions[id.Region] {
			out = append(out, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// checkStartup ends the startup sync when the view is complete or
// StartupSync has passed since the first Tick.
func (c *Core) checkStartup(now int64) {
	if !c.syncing || !c.started {
		return
	}
	done := c.popSynced()
	if done && c.cfg.GlobalLink {
		done = c.hasExpected && c.cfg.Relay && len(c.unanswered()) == 0
	}
	if !done && now-c.startedAt < int64(c.cfg.StartupSync) {
		return
	}
	if !done {
		c.syncMissing = c.unanswered()
	}
	c.syncing, c.syncTimedOut, c.syncTook = false, !done, max(now-c.startedAt, 0)
	c.node.SetSynced(true)
}

// syncRequest is the sync request this node sends now.
func (c *Core) syncRequest(now int64) *wire.Delta {
	d := c.empty(now)
	if c.syncing {
		d.Entries = []crdt.Entry{startupEntry}
	}
	d.Entries = c.appendRegionEpoch(d.Entries) // region.go: what is former
	if !c.syncAll {
		d.Entries = c.appendSyncScope(d.Entries) // sync.go
	}
	return d
}

// marked records a marker from the PoP from: it has relayed and re-sent
// everything it holds for this node's epoch.
func (c *Core) marked(from identity.PoPID, d *wire.Delta) {
	if p := c.peers.get(from); p != nil && c.epoch != 0 && d.Sender.SamePoP(c.self) && d.Sender.Incarnation == c.epoch {
		p.marked = c.epoch
	}
}

// sendMarkers sends the markers asked for, once the relay to their PoPs and
// the re-send of the owned totals have gone out. The member that relays to a
// PoP sends its marker.
func (c *Core) sendMarkers(now int64) {
	if !c.cfg.Relay || !c.cfg.GlobalLink {
		clear(c.markTo)
		return
	}
	if c.epoch == 0 || c.resendAt != 0 || len(c.relayTo) > 0 {
		return // later: after the relay and the re-send
	}
	ids := make([]identity.PoPID, 0, len(c.markTo))
	for id := range c.markTo {
		if !c.relayLater[id] { // its relay waits: so does the marker that ends it
			ids = append(ids, id)
			delete(c.markTo, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Less(ids[j]) })
	for _, id := range ids {
		p := c.peers.get(id)
		if p == nil || p.epoch == 0 || !c.ownsTask("relay/"+id.String()) {
			continue
		}
		c.stats.Markers++
		c.out = append(c.out, Message{Link: LinkGlobal, Kind: KindState, To: id, Reliable: true,
			Delta: &wire.Delta{Sender: identity.PoPReplica(id, p.epoch), SentAt: now, Epoch: p.epoch}})
	}
}

// reaskStartup asks again, once per heartbeat interval while the node
// waits, when an expected PoP that has not answered is heard: a link comes
// back one direction at a time (a gateway, each side's own connection), so
// a request sent while this PoP heard the other may still have been lost.
func (c *Core) reaskStartup(now int64) {
	if !c.syncing || !c.cfg.GlobalLink || c.epoch == 0 {
		return
	}
	for _, p := range c.peers.m {
		if p.expected && p.marked != c.epoch && !c.silent(p, now) {
			c.askSync(now)
			return
		}
	}
}
