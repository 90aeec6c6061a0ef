// Package gossip replicates a pop.Node's counts: transports that only move
// bytes and report membership (memberlist inside a PoP, NATS between PoPs and
// regions; package memhub holds an in-memory network for tests), and the
// Replicator, the runtime that owns the goroutines around the synchronous
// core.
//
//	opts := gossip.DefaultOptions() // repl.DefaultSettings and queue bounds
//	opts.Node = node.Link() // a *pop.Node
//	opts.PoP = gossip.MemberlistConnect(gossip.MemberlistConfig{Self: id, Name: "ams-1#7", Bind: "10.0.0.1:7946", Join: peers, SecretKeys: keys})
//	opts.Global = gossip.NATSConnect(gossip.NATSConfig{Self: id, Name: "ams-1", URL: "nats://127.0.0.1:4222"})
//	r, err := gossip.Start(ctx, opts)
//	defer r.Close()
//	r.Partitioned() // remote PoPs silent for longer than PeerTimeout
//
// Every FlushInterval the Replicator sends the node's changed counts:
// pop-scope rules to the own PoP's members, global rules to the members and
// on NATS (subject <prefix>.delta.<region>.<pop>) to every other PoP. Counts
// are absolute, so loss, duplication and reordering are harmless; all own
// live counts are re-sent every AntiEntropyInterval, when a member joins,
// when NATS reconnects, when a silent PoP is heard again and when its
// heartbeats went missing (the last three also ask the others to resend
// theirs, on <prefix>.sync.<region>.<pop>). Heartbeats on
// <prefix>.hb.<region>.<pop> tell which PoPs are heard. A message whose sender
// is not of the PoP it came from is dropped and counted. A PoP that asks for a
// resync, or is heard again, also gets back what others hold of its own
// replicas (on <prefix>.state.<region>.<pop>), so a restarted node of a PoP
// without other members learns its former incarnation's counts. With region
// voices (Settings.RegionVoices and NATSConfig.RegionVoices) a node hears
// the PoP totals, heartbeats and sync requests of its own region only (and
// every region's sync requests while its PoP speaks for its region:
// RegionSpeaker), and one PoP per region publishes the region's totals on
// <prefix>.region.<region>.<pop> (region.go).
package gossip
