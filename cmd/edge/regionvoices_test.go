package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
)

// withRegionVoices turns replication.region_voices on in the node config
// at path.
func withRegionVoices(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := string(b)
	require.Equal(t, 1, strings.Count(s, "\nreplication:\n"), path)
	s = strings.Replace(s, "\nreplication:\n", "\nreplication:\n  region_voices: true\n", 1)
	require.NoError(t, os.WriteFile(path, []byte(s), 0o600))
}

// TestMultiRegionExampleRegionVoices runs the shipped examples/multi-region
// configs (three regions linked by gateways, a PoP of two nodes in eu, the
// PoP users' NATS permissions) with replication.region_voices on: a count
// made in every region reaches every node, other regions' counts held as
// their regions' totals, and status and metrics show the region voices.
func TestMultiRegionExampleRegionVoices(t *testing.T) {
	const rel = "examples/multi-region"
	e := gossiptest.CopyExample(t, filepath.Join("..", "..", rel), rel)
	files := []string{"eu-ams-1.yaml", "us-iad-1.yaml", "ap-sin-1.yaml", "eu-ams-2.yaml"} // the NATS hosts first
	var ds []*daemon
	for _, f := range files {
		withRegionVoices(t, e.Path(f))
		ds = append(ds, startDaemon(t, e.Path(f)))
	}
	defer func() {
		for _, d := range ds {
			d.stop(t)
		}
	}()
	type status struct {
		Region             string                       `json:"region"`
		RemotePoPs         []struct{ Partitioned bool } `json:"remote_pops"`
		RegionVoices       bool                         `json:"region_voices"`
		RegionVoicesChosen string                       `json:"region_voices_chosen"`
		RegionVoice        bool                         `json:"region_voice"`
		RegionEpoch        uint64                       `json:"region_epoch"`
		Transports         []struct {
			Scope            string `json:"scope"`
			MessagesReceived uint64 `json:"messages_received"`
			Forged           uint64 `json:"forged_messages"`
		} `json:"transports"`
	}
	require.Eventually(t, func() bool {
		for _, d := range ds {
			var st status
			getJSON(t, d.api+"/v1/status", &st)
			if len(st.RemotePoPs) != 2 || st.RemotePoPs[0].Partitioned || st.RemotePoPs[1].Partitioned || !st.RegionVoice || st.RegionEpoch == 0 {
				return false
			}
		}
		return true
	}, 15*time.Second, poll, "every region hears the others; each region's one PoP is its voice")

	const key = "198.51.100.9"
	for i := range 12 {
		code, body := post(t, ds[i%len(ds)].api+"/v1/check", `{"rule":"api","key":"`+key+`"}`)
		require.Equal(t, http.StatusOK, code, body)
	}
	require.Eventually(t, func() bool {
		for _, d := range ds {
			if keyTotal(t, d.api, "api", key) != 12 {
				return false
			}
		}
		return true
	}, 15*time.Second, poll, "the count crosses every region")

	// At us/iad, eu's and ap's counts are their regions' totals.
	var v struct {
		Windows []struct {
			Replicas map[string]uint64 `json:"replicas"`
		} `json:"windows"`
	}
	getJSON(t, ds[1].api+"/v1/keys/api/"+key, &v)
	got := map[string]uint64{}
	for _, w := range v.Windows {
		for r, n := range w.Replicas {
			region, _, _ := strings.Cut(r, "/")
			got[region] += n
			if region != "us" {
				assert.True(t, strings.HasPrefix(r, region+"/*/*#"), "another region's count held as its region's total: %s", r)
			}
		}
	}
	assert.Equal(t, map[string]uint64{"eu": 6, "us": 3, "ap": 3}, got)

	var st status
	getJSON(t, ds[1].api+"/v1/status", &st)
	assert.True(t, st.RegionVoices)
	assert.Equal(t, "set", st.RegionVoicesChosen)
	require.Len(t, st.Transports, 2) // us/iad is a PoP of one node: no memberlist
	assert.Equal(t, "region", st.Transports[1].Scope)
	assert.NotZero(t, st.Transports[1].MessagesReceived)
	assert.Zero(t, st.Transports[1].Forged)

	res, err := http.Get(ds[1].api + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, m := range []string{
		`geolimit_replication_messages_received_total{scope="region",transport="nats"}`,
		`geolimit_replication_forged_messages_total{scope="region",transport="nats"} 0`,
		`geolimit_replication_region_lag_seconds_count{transport="nats"}`,
	} {
		assert.Contains(t, string(b), m)
	}
	assertMetricsDocumented(t, string(b))
}

// TestKillSwitchReachesThreeRegionsRegionVoices is the kill switch of
// TestKillSwitchReachesThreeRegions with region voices on: a rule's mode
// set at one node of eu reaches every node of every region (modes travel
// on the region subjects, which the PoP users may publish and subscribe
// to), and so does the return to the file's mode.
func TestKillSwitchReachesThreeRegionsRegionVoices(t *testing.T) {
	const rel = "examples/multi-region"
	e := gossiptest.CopyExample(t, filepath.Join("..", "..", rel), rel)
	tok := filepath.Join(t.TempDir(), "api-token")
	require.NoError(t, os.WriteFile(tok, []byte(killToken+"\n"), 0o600))
	names := []string{"eu-ams-1", "us-iad-1", "ap-sin-1", "eu-ams-2"} // the NATS hosts first
	ds := map[string]*daemon{}
	for _, n := range names {
		p := e.Path(n + ".yaml")
		withRegionVoices(t, p)
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString("api: {token_file: " + tok + "}\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
		ds[n] = startDaemon(t, p)
	}
	defer func() {
		for _, d := range ds {
			d.stop(t)
		}
	}()
	require.Eventually(t, func() bool {
		for _, d := range ds {
			code, body := authDo(t, http.MethodGet, d.api+"/v1/status", "")
			require.Equal(t, http.StatusOK, code, body)
			var st struct {
				RemotePoPs  []struct{ Partitioned bool } `json:"remote_pops"`
				RegionEpoch uint64                       `json:"region_epoch"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &st))
			if len(st.RemotePoPs) != 2 || st.RemotePoPs[0].Partitioned || st.RemotePoPs[1].Partitioned || st.RegionEpoch == 0 {
				return false
			}
		}
		return true
	}, 15*time.Second, poll, "every region hears the others")
	for _, rd := range []struct{ from, mode, want string }{{"eu-ams-1", "off", "off"}, {"ap-sin-1", "config", "enforce"}} {
		code, body := authDo(t, http.MethodPut, ds[rd.from].api+"/v1/rules/api/mode", `{"mode":"`+rd.mode+`"}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Eventually(t, func() bool {
			for _, d := range ds {
				if m, _ := ruleMode(t, d.api, "api"); m != rd.want {
					return false
				}
			}
			return true
		}, 10*time.Second, poll, "mode %s set at %s reaches every region", rd.mode, rd.from)
	}
}
