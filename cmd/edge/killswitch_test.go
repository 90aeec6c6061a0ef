package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

const killToken = "a2lsbC1zd2l0Y2gtdG9rZW4tMDEyMzQ1Njc4OWFiY2RlZg=="

// authDo sends method url with body and the API token, and returns the
// status and body.
func authDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+killToken)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// ruleMode returns the mode a node decides rule in, and who set it.
func ruleMode(t *testing.T, api, rule string) (mode, setBy string) {
	t.Helper()
	code, body := authDo(t, http.MethodGet, api+"/v1/rules/"+rule+"/mode", "")
	require.Equal(t, http.StatusOK, code, body)
	var st struct {
		Mode     string `json:"mode"`
		Override *struct {
			SetBy string `json:"set_by"`
		} `json:"override"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &st), body)
	if st.Override != nil {
		setBy = st.Override.SetBy
	}
	return st.Mode, setBy
}

// TestKillSwitchReachesThreeRegions runs the shipped examples/multi-region
// (three regions, each an embedded nats-server with authenticated gateway
// links, and a PoP of two nodes on memberlist) behind an API token, sets a
// rule's mode on one node and measures how long every other node takes to
// decide in it (polling GET /v1/rules/api/mode every millisecond). Each
// round must reach every node within a second. A PoP's NATS user cannot set
// a mode in another PoP's name, and a region restarted without a state file
// learns the mode in force from the others.
func TestKillSwitchReachesThreeRegions(t *testing.T) {
	rel := "examples/multi-region"
	e := gossiptest.CopyExample(t, filepath.Join("..", "..", rel), rel)
	tok := filepath.Join(t.TempDir(), "api-token")
	require.NoError(t, os.WriteFile(tok, []byte(killToken+"\n"), 0o600))
	names := []string{"eu-ams-1.yaml", "us-iad-1.yaml", "ap-sin-1.yaml", "eu-ams-2.yaml"}
	for _, f := range names {
		f, err := os.OpenFile(e.Path(f), os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString("api: {token_file: " + tok + "}\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	ds := map[string]*daemon{}
	for _, f := range names { // the NATS hosts first
		ds[strings.TrimSuffix(f, ".yaml")] = startDaemon(t, e.Path(f))
	}
	defer func() {
		for _, d := range ds {
			d.stop(t)
		}
	}()
	require.Eventually(t, func() bool {
		for _, n := range []string{"eu-ams-1", "us-iad-1", "ap-sin-1"} {
			code, body := authDo(t, http.MethodGet, ds[n].api+"/v1/status", "")
			require.Equal(t, http.StatusOK, code, body)
			var st struct {
				RemotePoPs []struct{ Partitioned bool } `json:"remote_pops"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &st))
			if len(st.RemotePoPs) != 2 || st.RemotePoPs[0].Partitioned || st.RemotePoPs[1].Partitioned {
				return false
			}
		}
		return true
	}, 15*time.Second, poll, "every region hears the others")

	code, body := post(t, ds["eu-ams-1"].api+"/v1/rules/api/mode", `{"mode":"off"}`)
	require.Equal(t, http.StatusUnauthorized, code, "no token: %s", body)

	rounds := []struct{ from, mode string }{
		{"eu-ams-1", "off"}, {"ap-sin-1", "shadow"}, {"us-iad-1", "enforce"}, {"eu-ams-2", "off"},
		{"eu-ams-1", "config"}, {"ap-sin-1", "off"},
	}
	var worst []time.Duration
	for _, rd := range rounds {
		want := rd.mode
		if want == "config" {
			want = "enforce" // the file's mode of rule api
		}
		start := time.Now()
		code, body := authDo(t, http.MethodPut, ds[rd.from].api+"/v1/rules/api/mode", `{"mode":"`+rd.mode+`"}`)
		require.Equal(t, http.StatusOK, code, body)
		var mu sync.Mutex
		took := map[string]time.Duration{}
		var wg sync.WaitGroup
		for name, d := range ds {
			if name == rd.from {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A fine tick: it bounds the resolution of the measured time.
				if assert.Eventually(t, func() bool {
					m, _ := ruleMode(t, d.api, "api")
					return m == want
				}, 10*time.Second, time.Millisecond, "%s sees mode %s", name, rd.mode) {
					mu.Lock()
					took[name] = time.Since(start)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		var max time.Duration
		for name := range ds {
			if name == rd.from {
				continue
			}
			d, ok := took[name]
			require.True(t, ok, "%s never saw mode %s set on %s", name, rd.mode, rd.from)
			max = maxDur(max, d)
		}
		t.Logf("mode %-7s set on %s: ams-1 %v, ams-2 %v, iad-1 %v, sin-1 %v; slowest %v", rd.mode, rd.from,
			took["eu-ams-1"].Round(time.Microsecond), took["eu-ams-2"].Round(time.Microsecond),
			took["us-iad-1"].Round(time.Microsecond), took["ap-sin-1"].Round(time.Microsecond), max.Round(time.Microsecond))
		assert.Less(t, max, time.Second, "the fleet must have mode %s within a second", rd.mode)
		worst = append(worst, max)
	}
	slices.Sort(worst)
	t.Logf("kill switch propagation over %d rounds, slowest node per round: median %v, max %v",
		len(worst), worst[len(worst)/2].Round(time.Microsecond), worst[len(worst)-1].Round(time.Microsecond))

	// The last round switched api off everywhere: sin-1 admits unchecked.
	for range 3 {
		code, body := authDo(t, http.MethodPost, ds["us-iad-1"].api+"/v1/check", `{"rule":"api","key":"198.51.100.9"}`)
		require.Equal(t, http.StatusOK, code, body)
		assert.Contains(t, body, `"off":true`)
	}

	// PoP eu/ams's NATS user may publish on its own subjects only; a mode
	// message there that claims to come from ap/sin is dropped by every
	// receiver. With the example's mode authority, a write in its own name
	// is refused too: it is not signed by the authority's key. So one PoP's
	// credentials cannot switch a rule anywhere.
	nc, err := nats.Connect("nats://"+e.Addr(t, "127.0.0.1:4222"), nats.UserInfo("eu-ams", "eu-ams-example-password"))
	require.NoError(t, err)
	defer nc.Close()
	now := time.Now().UnixNano()
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	for _, d := range []*wire.Delta{
		modes.Section.With(&wire.Delta{Sender: identity.Replica{PoPID: identity.PoPID{Region: "ap", PoP: "sin"}, Node: "sin-9", Incarnation: 1}},
			modes.RuleMode{Rule: "login", Mode: modes.Off, At: now, By: identity.Replica{PoPID: identity.PoPID{Region: "ap", PoP: "sin"}, Node: "sin-9", Incarnation: 1}}),
		modes.Section.With(&wire.Delta{Sender: identity.Replica{PoPID: ams, Node: "ams-9", Incarnation: 1}},
			modes.RuleMode{Rule: "login", Mode: modes.Shadow, At: now - int64(time.Second), By: identity.Replica{PoPID: ams, Node: "ams-9", Incarnation: 1}}),
	} {
		msgs, err := wire.Encode(d, 0)
		require.NoError(t, err)
		require.NoError(t, nc.Publish(gossip.DeltaSubject("", ams), msgs[0]))
	}
	require.NoError(t, nc.Flush())
	for _, n := range []string{"us-iad-1", "ap-sin-1"} {
		require.Eventually(t, func() bool {
			_, body := authDo(t, http.MethodGet, ds[n].api+"/metrics", "")
			return strings.Contains(body, `geolimit_rule_mode_refused_total{reason="untrusted"} 1`)
		}, 10*time.Second, poll, "%s refuses eu/ams's unsigned write", n)
		m, by := ruleMode(t, ds[n].api, "login")
		assert.Equal(t, "enforce", m, "%s: login keeps its own mode", n)
		assert.Empty(t, by)
	}

	// ap/sin restarts without a state file: it learns the mode from the
	// other regions (their re-send when they hear it again).
	ds["ap-sin-1"].stop(t)
	ds["ap-sin-1"] = startDaemon(t, e.Path("ap-sin-1.yaml"))
	require.Eventually(t, func() bool {
		m, by := ruleMode(t, ds["ap-sin-1"].api, "api")
		return m == "off" && strings.HasPrefix(by, "ap/sin/sin-1#")
	}, 15*time.Second, poll, "the restarted region learns the mode its former incarnation set")
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}
