//go:build race

package sim

// raceDetector is set in builds with the race detector.
const raceDetector = true
