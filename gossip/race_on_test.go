//go:build race

package gossip

// raceDetector is set in builds with the race detector, which slows every
// decision and replication step several times over.
const raceDetector = true
