package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSpans: the parts of a range not collapsed yet, and adding ranges
// that overlap, touch or stand apart.
func TestSpans(t *testing.T) {
	var s spans
	assert.Equal(t, [][2]uint64{{10, 20}}, s.gaps(10, 20), "empty")
	s.add(10, 20)
	s.add(30, 40)
	assert.Equal(t, spans{{10, 20}, {30, 40}}, s)
	assert.Nil(t, s.gaps(12, 18), "inside")
	assert.Equal(t, [][2]uint64{{5, 10}, {20, 30}, {40, 45}}, s.gaps(5, 45), "around both")
	assert.Equal(t, [][2]uint64{{20, 25}}, s.gaps(15, 25), "after the first")
	s.add(20, 30) // touches both
	assert.Equal(t, spans{{10, 40}}, s)
	s.add(0, 5)
	assert.Equal(t, spans{{0, 5}, {10, 40}}, s)
	assert.Nil(t, s.gaps(10, 40))
}
