// Package sim is geolimit's partition simulator: a deterministic
// discrete-event simulation that runs the real node core and replication
// protocol (pop.Node and repl.Core, the same code the edge daemon runs) on a
// simulated network, and measures against an exact oracle how far over its
// limits the fleet drifts.
//
//	sc, err := sim.Load("scenarios/two-regions-cut.yaml")
//	res, err := sim.Run(sc, sim.Options{})        // same seed, same result
//	sim.WriteTable(os.Stdout, []sim.Report{res.Report})
//	sim.WriteJSON(f, []sim.Report{res.Report})
//
// The engine has a virtual clock and one event queue (time, then order of
// scheduling). Every node is a pop.Node that decides the requests, and a
// repl.Core ticked when it asks (Next) and stepped with every message that
// reaches the node, at the node's own clock (true time plus its skew); see
// wire.go. Messages are encoded with wire.Encode exactly as the transports
// would, to count bytes and split them, and delivered per link with latency,
// jitter, loss, duplication and reordering, unless a partition or a one-way
// cut drops them: inside a PoP to each member, between PoPs to every node of
// the PoP reached at once (one NATS publish).
//
// Randomness: the scenario's seed seeds one PCG source, from which the run
// draws two streams, traffic (arrivals, keys, PoPs, nodes) and network
// (delays, loss, housekeeping phases), and the seeds of the stores' hashes
// and of the protocol's timer phases. The arrival stream is therefore identical
// whatever the partition policy, so runs compared with -compare see the
// very same requests. Every map that reaches the output is sorted.
//
// Each request is also decided by one central node with zero latency (the
// "central" figures), separating the cost of distribution from the
// sliding-window estimate's own error.
//
// A Run is single-threaded; nothing in the package is shared between runs,
// so separate runs may proceed concurrently.
package sim
