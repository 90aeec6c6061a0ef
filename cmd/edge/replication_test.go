package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip"
	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// examplePorts rewrites every 127.0.0.1:<port> of the example configs to a
// free port, the same one for the same port across files.
type examplePorts map[string]string

func (p examplePorts) rewrite(t *testing.T, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	re := regexp.MustCompile(`127\.0\.0\.1:(\d{4,5})`)
	out := re.ReplaceAllStringFunc(string(b), func(m string) string { return p.addr(t, m) })
	path := filepath.Join(t.TempDir(), filepath.Base(src))
	require.NoError(t, os.WriteFile(path, []byte(out), 0o600))
	return path
}

// addr returns a 127.0.0.1 address that was free a moment ago
// (gossiptest.FreeAddr), the same one for the same name.
func (p examplePorts) addr(t *testing.T, name string) string {
	t.Helper()
	if p[name] == "" {
		p[name] = gossiptest.FreeAddr(t)
	}
	return p[name]
}

type daemon struct {
	api    string
	errb   *syncBuffer
	done   chan error
	cancel context.CancelFunc
}

// stop cancels the daemon's run and waits for it to return.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	d.cancel()
	select {
	case err := <-d.done:
		assert.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Error("run did not return after cancel")
	}
}

func startDaemon(t *testing.T, path string, args ...string) *daemon {
	t.Helper()
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{errb: &syncBuffer{}, done: make(chan error, 1), cancel: cancel}
	if len(args) == 0 {
		args = []string{"-watch-interval", "0"}
	}
	args = append([]string{"-config", path}, args...)
	go func() { d.done <- run(ctx, args, &out, d.errb) }()
	re := regexp.MustCompile(`api listening on (http://\S+)`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			d.api = m[1]
			return d
		}
		select {
		case err := <-d.done:
			t.Fatalf("%s: run: %v\n%s", path, err, d.errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no api listener\n%s", path, d.errb.String())
		}
		time.Sleep(5 * time.Millisecond) // a poll (by hand: it also stops when run returns)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	require.NoError(t, json.Unmarshal(b, v), string(b))
}

// postAdmitted checks body at api until it is admitted. Near a rule's limit
// (login: 4 of 5) a node may defer a request until its own earlier admits
// have reached the other replicas (the near-limit allowance): it answers 429
// with a short retry_after_ms, then admits. A denial that asks for longer
// than a second, or nothing admitted within ten seconds, fails the test.
func postAdmitted(t *testing.T, api, body string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, res := post(t, api+"/v1/check", body)
		if code == http.StatusOK {
			return
		}
		require.Equal(t, http.StatusTooManyRequests, code, res)
		var a struct {
			RetryAfterMS int64 `json:"retry_after_ms"`
		}
		require.NoError(t, json.Unmarshal([]byte(res), &a), res)
		require.LessOrEqual(t, a.RetryAfterMS, int64(1000), "a deferral, not the limit: %s", res)
		require.True(t, time.Now().Before(deadline), "not admitted within 10s: %s", res)
		time.Sleep(time.Duration(a.RetryAfterMS+1) * time.Millisecond) // as the answer asks
	}
}

func keyTotal(t *testing.T, api, rule, key string) uint64 {
	var v struct {
		Windows []struct {
			Total uint64 `json:"total"`
		} `json:"windows"`
	}
	getJSON(t, api+"/v1/keys/"+rule+"/"+key, &v)
	var sum uint64
	for _, w := range v.Windows {
		sum += w.Total
	}
	return sum
}

// TestMultiRegionExamples runs the shipped examples/multi-region configs
// and their open form, examples/multi-region-open (ports rewritten to free
// ones): three regions, each with an embedded nats-server linked by
// gateways, and a PoP of two nodes on memberlist. Global counts converge
// everywhere, pop counts stay in the PoP, and status and metrics show the
// replication. On the authenticated links, another PoP's heartbeats cannot
// be spoofed.
func TestMultiRegionExamples(t *testing.T) {
	for _, dir := range []string{"multi-region", "multi-region-open"} {
		t.Run(dir, func(t *testing.T) { testMultiRegionExample(t, "examples/"+dir) })
	}
}

func testMultiRegionExample(t *testing.T, rel string) {
	e := gossiptest.CopyExample(t, filepath.Join("..", "..", rel), rel)
	var ds []*daemon
	paths := map[string]string{}
	// ams-1 and iad-1, sin-1 first: they run the embedded servers ams-2 uses.
	for _, f := range []string{"eu-ams-1.yaml", "us-iad-1.yaml", "ap-sin-1.yaml", "eu-ams-2.yaml"} {
		paths[f] = e.Path(f)
		ds = append(ds, startDaemon(t, paths[f]))
	}
	defer func() {
		for _, d := range ds {
			d.stop(t)
		}
	}()
	ams1, iad, sin, ams2 := ds[0], ds[1], ds[2], ds[3]
	require.Eventually(t, func() bool {
		for _, d := range []*daemon{ams1, iad, sin} {
			var st struct {
				RemotePoPs []struct{ Partitioned bool } `json:"remote_pops"`
			}
			getJSON(t, d.api+"/v1/status", &st)
			if len(st.RemotePoPs) != 2 || st.RemotePoPs[0].Partitioned || st.RemotePoPs[1].Partitioned {
				return false
			}
		}
		return true
	}, 10*time.Second, poll, "every region hears the others")
	sent := map[string]int{}
	for i := range 20 {
		d := ds[i%len(ds)]
		code, body := post(t, d.api+"/v1/check", `{"rule":"api","key":"198.51.100.1"}`)
		require.Equal(t, http.StatusOK, code, body)
		if (d == ams1 || d == ams2) && i < 8 { // login's limit is 5
			postAdmitted(t, d.api, `{"rule":"login","key":"198.51.100.1"}`)
			sent["login"]++
		}
	}
	require.Eventually(t, func() bool {
		for _, d := range ds {
			if keyTotal(t, d.api, "api", "198.51.100.1") != 20 {
				return false
			}
		}
		return true
	}, 10*time.Second, poll, "global counts converge in every region")
	require.Eventually(t, func() bool {
		return keyTotal(t, ams1.api, "login", "198.51.100.1") == uint64(sent["login"]) &&
			keyTotal(t, ams2.api, "login", "198.51.100.1") == uint64(sent["login"])
	}, 10*time.Second, poll, "pop counts shared by the PoP's two nodes")
	assert.Zero(t, keyTotal(t, iad.api, "login", "198.51.100.1"), "pop counts must not leave the PoP")
	assert.Zero(t, keyTotal(t, sin.api, "login", "198.51.100.1"))

	var st struct {
		Members    []struct{ Name string } `json:"members"`
		RemotePoPs []struct {
			Region      string `json:"region"`
			PoP         string `json:"pop"`
			LastHeardMS int64  `json:"last_heard_ms"`
		} `json:"remote_pops"`
		Partitions []string `json:"partitions"`
		Transports []struct {
			Transport string `json:"transport"`
			BytesSent uint64 `json:"bytes_sent"`
		} `json:"transports"`
		Epoch uint64 `json:"epoch"`
	}
	getJSON(t, ams1.api+"/v1/status", &st)
	var st2 struct {
		Epoch uint64 `json:"epoch"`
	}
	getJSON(t, ams2.api+"/v1/status", &st2)
	assert.NotZero(t, st.Epoch, "the PoP has an epoch")
	assert.Equal(t, st.Epoch, st2.Epoch, "the members of ams share it")
	require.Len(t, st.Members, 1)
	assert.True(t, strings.HasPrefix(st.Members[0].Name, "ams-2#"), st.Members[0].Name)
	require.Len(t, st.RemotePoPs, 2)
	assert.Equal(t, "ap", st.RemotePoPs[0].Region)
	assert.Equal(t, "sin", st.RemotePoPs[0].PoP)
	assert.GreaterOrEqual(t, st.RemotePoPs[0].LastHeardMS, int64(0))
	assert.Empty(t, st.Partitions)
	require.Len(t, st.Transports, 2)
	assert.Equal(t, "memberlist", st.Transports[0].Transport)
	assert.Equal(t, "nats", st.Transports[1].Transport)
	assert.NotZero(t, st.Transports[1].BytesSent)

	res, err := http.Get(ams1.api + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, m := range []string{
		`geolimit_replication_sent_bytes_total{scope="global",transport="nats"}`,
		`geolimit_replication_members 1`,
		`geolimit_replication_partitioned_pops 0`,
		`geolimit_replication_remote_pops 2`,
		`geolimit_replication_lag_seconds_count{transport="nats"}`,
		`geolimit_replication_rejected_entries_total{scope="pop",transport="memberlist"} 0`,
	} {
		assert.Contains(t, string(b), m)
	}
	assertMetricsDocumented(t, string(b))

	// Stop region ap: after peer_timeout the others list it as partitioned;
	// started again, it is heard again and learns the others' counts.
	sin.stop(t)
	if rel == "examples/multi-region" {
		// Meanwhile a client of region eu's server sends ap/sin's
		// heartbeats: without credentials it is refused, and with PoP
		// eu/ams's it may not publish on ap/sin's subjects, so ap/sin
		// still goes partitioned. (On the open example's links these
		// heartbeats keep it looking healthy.)
		stop := spoofHeartbeats(t, "nats://"+e.Addr(t, "127.0.0.1:4222"), identity.PoPID{Region: "ap", PoP: "sin"})
		defer stop()
	}
	partitions := func(d *daemon) []string {
		var st struct {
			Partitions []string `json:"partitions"`
		}
		getJSON(t, d.api+"/v1/status", &st)
		return st.Partitions
	}
	require.Eventually(t, func() bool {
		p := partitions(ams1)
		return len(p) == 1 && p[0] == "ap/sin"
	}, 10*time.Second, poll, "ap/sin partitioned")
	sin = startDaemon(t, paths["ap-sin-1.yaml"])
	ds[2] = sin
	require.Eventually(t, func() bool { return len(partitions(ams1)) == 0 && len(partitions(sin)) == 0 }, 10*time.Second, poll, "ap/sin heard again")
	// It learns the others' counts, and its former incarnation's too
	// (relayed back by the others, as it has no PoP peer).
	require.Eventually(t, func() bool {
		return keyTotal(t, sin.api, "api", "198.51.100.1") == 20
	}, 10*time.Second, poll, "the restarted region learns every count")
	assert.Equal(t, uint64(20), keyTotal(t, ams1.api, "api", "198.51.100.1"))
}

// assertMetricsDocumented checks that every geolimit_ metric family in the
// exposition text is named in docs/operations.md (the metrics table),
// literally or in a brace group such as
// geolimit_replication_{messages_sent,sent_bytes}_total.
func assertMetricsDocumented(t *testing.T, exposition string) {
	t.Helper()
	readme, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`(geolimit_[a-z_{},]+)").FindAllStringSubmatch(string(readme), -1) {
		for _, n := range expandBraces(m[1]) {
			documented[n] = true
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (geolimit_\S+) `).FindAllStringSubmatch(exposition, -1) {
		assert.True(t, documented[m[1]], "metric %s is not in docs/operations.md", m[1])
	}
}

// expandBraces expands one level of {a,b,...} groups: x_{a,b}_y gives x_a_y
// and x_b_y.
func expandBraces(s string) []string {
	i := strings.IndexByte(s, '{')
	j := strings.IndexByte(s, '}')
	if i < 0 || j < i {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[i+1:j], ",") {
		out = append(out, expandBraces(s[:i]+alt+s[j+1:])...)
	}
	return out
}

// spoofHeartbeats connects to url as PoP eu/ams's user of the example
// (after checking that a client without credentials is refused) and
// publishes heartbeats of PoP id every 100ms until the returned function is
// called; the server must refuse them as a permissions violation.
func spoofHeartbeats(t *testing.T, url string, id identity.PoPID) func() {
	t.Helper()
	_, err := nats.Connect(url, nats.Timeout(5*time.Second))
	require.Error(t, err, "a client without credentials")
	assert.Contains(t, strings.ToLower(err.Error()), "authorization violation")
	violations := make(chan error, 1)
	nc, err := nats.Connect(url, nats.UserInfo("eu-ams", "eu-ams-example-password"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case violations <- err:
			default:
			}
		}))
	require.NoError(t, err)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			parts, err := wire.Encode(&wire.Delta{Sender: identity.Replica{PoPID: id, Node: "sin-1", Incarnation: 1}, SentAt: time.Now().UnixNano()}, 1<<20)
			if err == nil {
				_ = nc.Publish(gossip.HeartbeatSubject("", id), parts[0])
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		nc.Close()
		select {
		case err := <-violations:
			assert.Contains(t, strings.ToLower(err.Error()), "permissions violation")
		default:
			t.Error("the spoofed heartbeats were not refused")
		}
	}
}
