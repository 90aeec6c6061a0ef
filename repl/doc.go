// Package repl is geolimit's replication protocol as a pure state machine:
// no goroutines, no clock, no I/O. The daemon (package gossip) runs it
// around real transports and the simulator (package sim) around a simulated
// network; both drive this one implementation.
//
// Like etcd raft's RawNode, a Core is driven from outside:
//
//	c, _ := repl.New(repl.Config{Settings: repl.DefaultSettings(), Node: node, PoPLink: true, GlobalLink: true, Relay: true})
//	c.Tick(now)                  // timers: flush, anti-entropy, heartbeat turns, peer timeout
//	c.Step(now, received)        // a message arrived
//	c.SetMembers(now, others)    // the PoP's membership changed
//	for _, m := range c.Ready() { send(m) }
//
// # One voice per PoP
//
// Inside a PoP, every member sends its own counts (replica
// region/pop/node#incarnation) to the other members, so each member knows
// every member's count. Between PoPs, a PoP speaks with one voice: for each
// key it publishes the PoP total (the sum of its members' counts) as the
// count of one aggregate replica, region/pop/*#epoch. Each key's total is
// computed by one member, the one with the highest rendezvous hash of
// (member, key) over the membership view, so the work is spread over the
// members and a member that dies hands over only its own keys (their new
// owners publish them at once). The members flush together, in slots
// aligned to the clock, and take turns to speak: at each slot the owners
// forward their changed totals inside the PoP to the slot's speaker, which
// publishes them, with its own, as one message a little later
// (Config.SpeakDelay). What one node receives from other PoPs therefore
// grows with the number of PoPs, never with the number of nodes per PoP:
// one message per PoP per flush interval, one entry per changed key.
//
// The epoch keeps restarts from undercounting. A member learns its PoP's
// epoch from the others (every message inside the PoP carries it; the
// lowest one wins) and keeps it as long as any member lives, so totals stay
// monotone under one identity. A node alone in its PoP, or whose members all
// died, starts a new epoch (its incarnation): the other PoPs keep the
// former epoch's totals until their windows pass, and relay them back to the
// PoP when it asks for a sync, so the restarted PoP counts them too.
// A node with members does not publish totals until it knows the epoch:
// the first member by name starts one if it learns none within
// Config.EpochWait; the others wait to learn it.
//
// Two parts of a PoP may run epochs of their own (a node that could not
// join its PoP at start, then does): when they meet the lowest epoch wins,
// and what the side that switches published under its own epoch stays
// counted by the other PoPs beside the PoP's totals, which include it too,
// until its windows pass. That overcount is bounded by the switching side's
// counts of those windows, and only ever errs towards rejecting. Inside the
// PoP it is not counted twice: an aggregate of an epoch a member started (an
// epoch is its starter's incarnation) is an echo of that member's own
// counts.
//
// # Liveness and repair
//
//   - Heartbeats: a PoP's members take turns (slots aligned to the clock, in
//     name order), so a PoP sends one heartbeat per HeartbeatInterval. Any
//     message from a PoP counts as hearing it; a PoP silent for PeerTimeout
//     is partitioned, and the unheard set is handed to the node core (the
//     share policy) whenever it changes. A PoP whose last silence ended
//     under a new epoch restarted: while silent again it is taken for down,
//     not cut off, and handed to the node core as down (SetDown), not
//     unheard, until a silence ends under the same epoch (crash.go). With
//     region voices a PoP's heartbeats reach its region only, and each
//     region sends the others one stream, its PoPs taking turns, that says
//     which of its PoPs live (regionbeat.go).
//   - Sync: a PoP heard first or again after a silence, or a reconnect
//     makes the member that noticed ask the others for their totals and
//     re-send its own. Each member of an asked PoP re-sends the totals it
//     owns: one sync request costs each other PoP one re-send of its live
//     totals, spread over its members, and the requests of one flush
//     interval share that re-send. A heartbeat gap of more than two and a
//     half intervals asks only the PoP whose beats went missing (with
//     region voices, for a PoP of another region, that region's voice) to
//     re-send what it sends this node (sync.go): a lost message costs about
//     what it carried, not a re-send by every PoP. With region voices a
//     request reaches the PoPs of its sender's region and the voices of the
//     other regions (the transports subscribe so, following RegionVoice),
//     a PoP of another region heard first is asked through its voice, and
//     one marker of a region answers the startup sync for its PoPs.
//   - Relay: one member of each PoP sends a PoP that asks, or is heard
//     again, the totals it holds of that PoP's former epochs (a PoP heard
//     again at most once per PeerTimeout and epoch; one that asks, each
//     time it asks), and a PoP that asks the former epochs of every PoP
//     whose current epoch it knows: live nodes re-send only their current
//     epoch's totals, so a node that restarts alone in its PoP learns the
//     other PoPs' former ones only so.
//   - Startup sync (startup.go): with Config.StartupSync a node is unsynced
//     (pop.Link.SetSynced) at start until it holds its PoP's state and a
//     marker from every expected PoP, sent after that PoP's relay and
//     re-send, or until StartupSync has passed.
//   - Drift (drift.go): heartbeats carry a fingerprint of each global rule;
//     a receiver reports the rules of a remote PoP it lacks or has
//     otherwise, and the PoP's estimated clock offset.
//   - Fleet clock (fleetclock.go): the node core decides windows on the
//     node's clock plus a correction agreed from those offsets
//     (ClockCorrection); the Core's own timers keep the runtime's clock.
//   - Anti-entropy: every AntiEntropyInterval each node re-sends the own
//     counts and owned totals of the keys whose PoP total (region total,
//     for a voice's region totals) settled: no change since the round
//     before, some in the two rounds before that. A key's final total goes
//     out twice more after its own message; a key that goes on changing is
//     repaired by its next message. A node that lacks more (a start, a gap in a PoP's
//     heartbeats, a PoP heard again) asks for a sync, which re-sends
//     everything. A large store's round goes in parts of about 4096 keys
//     spread over the first half of the interval
//     (pop.Link.AntiEntropyPart). A member
//     whose view of the PoP changes publishes at once the totals whose owner
//     changed and announces the change; soon after, it and every member
//     that hears the announcement re-send every owned total: while members'
//     views differ a forward can reach no speaker, or a speaker that dies
//     before it speaks.
//
// Every delta carries absolute counts, so loss, duplication and reordering
// are harmless; a later message repairs an earlier loss.
//
// # Sparse updates
//
// With Settings.SparseUpdates (the default) a PoP publishes the total of a
// key far below its limit only once it has moved by replicated.SparseStep
// (limit / (4 x PoPs)) since it last published it, and every change of a
// key whose estimate is at a quarter of its limit or above (sparse.go,
// pop/sparse.go). The Core tells its node the PoPs it knows and the lag of
// a change at each check of the peers, once its view holds what the fleet
// counted before it started (sparseReady); anti-entropy sends a total once
// it settles, so what was left out waits until the key's total stops
// moving (or moves by a step). What the PoPs leave out of a key's
// estimate stays below half its limit, and a key at its limit is seen by
// every node above a quarter of it, so near a limit every change travels
// as without sparse updates.
//
// # Rules' modes
//
// A rule's mode set at run time (the kill switch, pop.Node.SetRuleMode)
// goes out at the node's next Tick, to the PoP's members and to every other
// PoP, in a message of its own; anti-entropy rounds, re-sends and the state
// a joining member merges carry every mode held (modes.go). Modes are a
// last-writer-wins register per rule name, so any node may pass on any.
//
// # The near-limit allowance
//
// Near a limit a node spends only its share of the headroom while its own
// admits are unseen by the others (pop.Link.SetAllowance). The Core tells
// its node the figures that takes: how many nodes may admit a key (the live
// members of the PoP and, for global rules, how many PoPs: this one and the
// PoPs heard and not partitioned, plus the expected ones not heard yet until
// the first check of the peers), and the horizon after which a flush's
// counts are held by every other node. It measures the horizon from what arrives: the age of each
// message (the receiver's clock minus its SentAt) as a decaying maximum per
// remote PoP and for the members, clamped to [0, PeerTimeout]; for global
// rules it adds, with members, one flush interval and the speaker's delay (a
// member's count reaches the other PoPs in the total its owner publishes at
// the next slot). A remote PoP not measured yet counts at one heartbeat
// interval. A skewed clock makes messages look older or younger than they
// are; the horizon is the maximum over the PoPs heard, so a PoP whose clock
// runs behind lengthens it (a stricter split, fewer admits near the limit),
// and one whose clock runs ahead shortens it only as far as the other PoPs'
// ages allow.
//
// # What is trusted
//
// A message is used only as far as its sender may speak: a member's delta
// must name a member of the own PoP; a delta between PoPs must name the PoP
// whose subject it came through; relayed state must be the own PoP's
// aggregate or, for another PoP, an epoch of it that is not its current
// one (a receiver that does not know that PoP's epoch yet drops it). A
// member's forwarded totals are published only for global
// rules the node knows, in live windows, for a slot of now. At most
// Config.MaxPoPs remote PoPs are tracked.
package repl
