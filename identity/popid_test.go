package identity

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidName(t *testing.T) {
	tests := []struct {
		name, s string
		ok      bool
	}{
		{"plain", "eu-west_1", true},
		{"64 bytes", strings.Repeat("a", MaxNameLen), true},
		{"unicode", "zürich", true},
		{"other punctuation", "n:1@x+y", true},
		{"empty", "", false},
		{"65 bytes", strings.Repeat("a", MaxNameLen+1), false},
		{"dot: NATS token separator", "eu.west", false},
		{"star: NATS wildcard, the aggregate's node", "*", false},
		{"greater: NATS wildcard", "a>", false},
		{"slash: region/pop separator", "a/b", false},
		{"hash: incarnation separator", "a#1", false},
		{"space", "a b", false},
		{"tab", "a\tb", false},
		{"newline", "a\n", false},
		{"control", "a\x00", false},
		{"delete", "a\x7f", false},
		{"unicode space", "a\u00a0b", false},
		{"unicode control", "zü\u0085", false},
		{"invalid UTF-8", "zü\xff", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidName(tt.s)
			if tt.ok {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, ErrBadName)
		})
	}
}

func TestParsePoPID(t *testing.T) {
	p, err := ParsePoPID("eu/ams")
	require.NoError(t, err)
	assert.Equal(t, PoPID{Region: "eu", PoP: "ams"}, p)
	assert.Equal(t, "eu/ams", p.String())
	for _, s := range []string{"", "eu", "eu/", "/ams", "eu/ams/1", "eu.west/ams", "eu/a*"} {
		_, err := ParsePoPID(s)
		assert.ErrorIs(t, err, ErrBadName, s)
	}
	_, err = ParsePoPID("eu/ams/1")
	assert.ErrorContains(t, err, `pop: identity: bad name: "ams/1"`)
}

func TestPoPIDValidateNamesThePart(t *testing.T) {
	assert.ErrorContains(t, PoPID{Region: "eu.west", PoP: "ams"}.Validate(), `region: identity: bad name: "eu.west"`)
	assert.ErrorContains(t, PoPID{Region: "eu", PoP: ""}.Validate(), `pop: identity: bad name: ""`)
	assert.NoError(t, PoPID{Region: "eu", PoP: "ams"}.Validate())
}

func TestParseReplica(t *testing.T) {
	for _, r := range []Replica{
		{PoPID: PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 42},
		PoPReplica(PoPID{Region: "us", PoP: "iad"}, 7),
	} {
		got, err := ParseReplica(r.String())
		require.NoError(t, err, r.String())
		assert.Equal(t, r, got)
	}
	for _, s := range []string{"eu/ams/n1", "eu/ams#1", "eu/ams/n1/x#1", "eu/ams/n1#x", "eu.w/ams/n1#1", "eu/ams/**#1"} {
		_, err := ParseReplica(s)
		assert.ErrorIs(t, err, ErrBadReplica, s)
	}
}
