//go:build !race

package server

// raceDetector is set in builds with the race detector (race_on_test.go).
const raceDetector = false
