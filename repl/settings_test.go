package repl

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
)

func TestDefaultSettingsAreFreshAndValid(t *testing.T) {
	a := DefaultSettings()
	a.ExpectedPoPs = append(a.ExpectedPoPs, "eu/ams")
	b := DefaultSettings()
	assert.Empty(t, b.ExpectedPoPs, "each call returns a fresh value")
	require.NoError(t, b.Validate())
	want := b
	want.HeartbeatInterval = b.PeerTimeout / 4 // left 0, so that it follows PeerTimeout
	assert.Equal(t, want, b.WithDefaults(), "DefaultSettings holds every other default")
	assert.True(t, b.Allowance())
}

func TestSettingsZeroValues(t *testing.T) {
	got := Settings{}.WithDefaults()
	want := DefaultSettings()
	want.FlushInterval = 0                        // at once, kept
	want.HeartbeatInterval = want.PeerTimeout / 4 // derived
	assert.Equal(t, want, got)
	require.NoError(t, Settings{}.Validate(), "the zero Settings is valid: flush at once, defaults elsewhere")
	// ForgetAfter follows a long PeerTimeout.
	assert.Equal(t, 2*time.Hour, Settings{PeerTimeout: time.Hour}.WithDefaults().ForgetAfter)
}

func TestSettingsValidate(t *testing.T) {
	off := false
	tests := []struct {
		name string
		mod  func(*Settings)
		want string // "" for valid
	}{
		{"defaults", func(*Settings) {}, ""},
		{"allowance off", func(s *Settings) { s.NearLimitAllowance = &off }, ""},
		{"negative flush", func(s *Settings) { s.FlushInterval = -time.Millisecond }, "flush_interval: must not be negative, got -1ms"},
		{"flush below 1ms", func(s *Settings) { s.FlushInterval = time.Microsecond }, "flush_interval: want 0 (at once) or at least 1ms, got 1µs"},
		{"negative peer timeout", func(s *Settings) { s.PeerTimeout = -time.Second }, "peer_timeout: must be positive, got -1s"},
		{"heartbeat at peer timeout", func(s *Settings) { s.HeartbeatInterval = s.PeerTimeout }, "heartbeat_interval: 2s must be below peer_timeout 2s"},
		{"anti-entropy below flush", func(s *Settings) { s.AntiEntropyInterval = time.Millisecond }, "anti_entropy_interval: 1ms is below flush_interval 50ms"},
		{"forget before timeout", func(s *Settings) { s.ForgetAfter = time.Second }, "forget_after: 1s must be above peer_timeout 2s"},
		{"negative max pops", func(s *Settings) { s.MaxPoPs = -1 }, "max_pops: must be at least 1, got -1"},
		{"negative sync interval", func(s *Settings) { s.SyncInterval = -1 }, "sync_interval: must be positive, got -1ns"},
		{"negative startup sync", func(s *Settings) { s.StartupSync = -time.Second }, "startup_sync: must not be negative, got -1s"},
		{"negative max batch", func(s *Settings) { s.MaxBatchEntries = -1 }, "max_batch_entries: must be at least 1, got -1"},
		{"expected pop", func(s *Settings) { s.ExpectedPoPs = []string{"eu/ams"} }, ""},
		{"expected pop without region", func(s *Settings) { s.ExpectedPoPs = []string{"eu/ams", "ams"} }, `expected_pops[1]: identity: bad name: "ams" is not region/pop`},
		{"expected pop with wildcard", func(s *Settings) { s.ExpectedPoPs = []string{"eu/*"} }, `expected_pops[0]: "eu/*": pop: identity: bad name: "*" must be 1-64 bytes of printable UTF-8 without '.', '*', '>', '/', '#' or white space`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := DefaultSettings()
			tt.mod(&s)
			err := s.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.EqualError(t, err, tt.want)
		})
	}
}

// Region voices left unset are chosen by the fleet the expected PoPs
// name: on from AutoVoicesPoPs PoPs in two regions or more, the same on
// every node of the fleet; set, they are what is set.
func TestVoicesChosenByFleetShape(t *testing.T) {
	fleet := func(regions, perRegion int) []string {
		var out []string
		for r := range regions {
			for p := range perRegion {
				out = append(out, fmt.Sprintf("r%d/p%d", r, p))
			}
		}
		return out
	}
	self := identity.PoPID{Region: "r0", PoP: "p0"}
	for _, tc := range []struct {
		regions, perRegion int
		want               bool
	}{
		{1, 2, false},
		{2, 10, false},
		{4, AutoVoicesPoPs/4 - 1, false},
		{4, AutoVoicesPoPs / 4, true},
		{10, 10, true},
		{1, 100, false}, // one region: no other region to speak to
	} {
		s := Settings{ExpectedPoPs: fleet(tc.regions, tc.perRegion)}
		on, how := s.VoicesChosen(self)
		assert.Equal(t, tc.want, on, "%d regions of %d PoPs: %s", tc.regions, tc.perRegion, how)
		regions := fmt.Sprintf("%d regions", tc.regions)
		if tc.regions == 1 {
			regions = "1 region"
		}
		assert.Equal(t, fmt.Sprintf("fleet of %d PoPs in %s", tc.regions*tc.perRegion, regions), how)
		other := identity.PoPID{Region: fmt.Sprintf("r%d", tc.regions-1), PoP: "p0"}
		assert.Equal(t, on, s.Voices(other), "every PoP of the fleet chooses alike")
		s.RegionVoices = new(!tc.want)
		on, how = s.VoicesChosen(self)
		assert.Equal(t, !tc.want, on)
		assert.Equal(t, "set", how)
	}
	assert.False(t, Settings{}.Voices(self), "no PoPs named: off unless set")
	_, how := Settings{}.VoicesChosen(self)
	assert.Equal(t, "fleet of 1 PoP in 1 region", how)
	assert.True(t, Settings{RegionVoices: new(true)}.Voices(self))
}
