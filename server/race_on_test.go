//go:build race

package server

// raceDetector is set in builds with the race detector, which slows every
// request several times over: the floods are smaller there.
const raceDetector = true
