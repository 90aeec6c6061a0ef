// Package sim is geolimit's partition simulator: a deterministic
// discrete-event simulation that runs the real node core (pop.Node, the same
// code the edge daemon runs) on a simulated network, and measures against an
// exact oracle how far over its limits the fleet drifts.
//
//	sc, err := sim.Load("scenarios/two-regions-cut.yaml")
//	res, err := sim.Run(sc, sim.Options{})        // same seed, same result
//	sim.WriteTable(os.Stdout, []sim.Report{res.Report})
//	sim.WriteJSON(f, []sim.Report{res.Report})
//
// The engine has a virtual clock and one event queue (time, then order of
// scheduling). Every node is a pop.Node driven through Decide, Flush,
// AntiEntropy, Apply, State and Tick at its own clock (true time plus its
// skew). Deltas are encoded with crdt.Encode exactly as the transports
// would, to count bytes and split messages, and delivered per link with
// latency, jitter, loss, duplication and reordering, unless a partition or a
// one-way cut drops them. Heartbeats tell each node which remote PoPs it
// hears (see hearing.go: the one place where that is decided and handed to
// the node core).
//
// Randomness: the scenario's seed seeds one PCG source, from which the run
// draws two streams: traffic (arrivals, keys, PoPs, nodes) and network
// (delays, loss, timer phases). The arrival stream is therefore identical
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
