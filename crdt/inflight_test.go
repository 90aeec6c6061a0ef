package crdt

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleInflight(rng *rand.Rand, n int) []Inflight {
	rules := []string{"uploads", "api"}
	out := make([]Inflight, 0, n)
	for i := 0; i < n; i++ {
		out = append(out, Inflight{
			Rule:    rules[rng.IntN(len(rules))],
			Key:     "10.0.0." + strconv.Itoa(rng.IntN(256)),
			Count:   uint64(rng.IntN(50)),
			Version: rng.Uint64N(1 << 40),
		})
	}
	return out
}

func TestDeltaInflightRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, tc := range []struct {
		name            string
		entries, blocks int
		inflight        int
		maxBytes        int
	}{
		{name: "alone", inflight: 3},
		{name: "with counts and blocks", entries: 4, blocks: 2, inflight: 5},
		{name: "split over messages", inflight: 400, maxBytes: 1400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := sampleDelta(rng, tc.entries)
			d.Blocks = sampleBlocks(rng, tc.blocks)
			d.Inflight = sampleInflight(rng, tc.inflight)
			msgs, err := Encode(d, tc.maxBytes)
			require.NoError(t, err)
			var back Delta
			for _, m := range msgs {
				if tc.maxBytes > 0 {
					assert.LessOrEqual(t, len(m), tc.maxBytes)
				}
				part, err := Decode(m)
				require.NoError(t, err)
				assert.Equal(t, d.Sender, part.Sender)
				back.Entries = append(back.Entries, part.Entries...)
				back.Blocks = append(back.Blocks, part.Blocks...)
				back.Inflight = append(back.Inflight, part.Inflight...)
			}
			sameEntries(t, d.Entries, back.Entries)
			sameBlocks(t, d.Blocks, back.Blocks)
			sameMultiset(t, d.Inflight, back.Inflight)
		})
	}
}

func TestDeltaInflightRefused(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	d := sampleDelta(rng, 0)
	d.Inflight = []Inflight{{Rule: "uploads", Key: "", Count: 1, Version: 1}}
	_, err := Encode(d, 0)
	require.Error(t, err, "an empty key is not encoded")
	d.Inflight = []Inflight{{Rule: "", Key: "k", Count: 1, Version: 1}}
	_, err = Encode(d, 0)
	require.Error(t, err, "an empty rule name is not encoded")

	d.Inflight = sampleInflight(rng, 2)
	msgs, err := Encode(d, 0)
	require.NoError(t, err)
	good := msgs[len(msgs)-1]
	for i := 1; i < len(good); i++ {
		_, err := Decode(good[:i])
		require.Error(t, err, "truncated at %d", i)
		assert.True(t, errors.Is(err, ErrDeltaMalformed), "truncated at %d: %v", i, err)
	}
}
