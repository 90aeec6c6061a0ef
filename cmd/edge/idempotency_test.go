package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
)

// memosHeld reads geolimit_idempotency_keys from the daemon's /metrics.
func memosHeld(t *testing.T, api string) int {
	t.Helper()
	res, err := http.Get(api + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^geolimit_idempotency_keys (\d+)$`).FindSubmatch(b)
	require.NotNil(t, m, "no geolimit_idempotency_keys")
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return n
}

// checkIdem posts one check with an idempotency key and returns its status
// and whether the answer says it is a repeat.
func checkIdem(t *testing.T, api, key, idem string) (int, bool) {
	t.Helper()
	code, body := post(t, api+"/v1/check", `{"rule":"pay","key":"`+key+`","idempotency_key":"`+idem+`"}`)
	var a struct {
		Repeat bool `json:"repeat"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &a), body)
	return code, a.Repeat
}

// TestIdempotencyAcrossThePoP runs two daemons of one PoP on memberlist:
// retries with one idempotency key count once on every node of the PoP,
// whichever node the first try reached.
func TestIdempotencyAcrossThePoP(t *testing.T) {
	g1, g2 := gossiptest.FreeAddr(t), gossiptest.FreeAddr(t)
	cfg := func(id, bind, join string) string {
		p := filepath.Join(t.TempDir(), id+".yaml")
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf(`
node: {id: %s, region: eu, pop: ams}
listen: {api: 127.0.0.1:0}
nats: {disabled: true}
gossip: {bind: %q, join: [%q]}
replication: {flush_interval: 20ms}
rules:
  - {name: pay, limit: 10, window: 1m, scope: pop}
`, id, bind, join)), 0o600))
		return p
	}
	n1 := startDaemon(t, cfg("ams-1", g1, g2))
	defer n1.stop(t)
	n2 := startDaemon(t, cfg("ams-2", g2, g1))
	defer n2.stop(t)
	require.Eventually(t, func() bool {
		var st struct {
			Members []struct{ Name string } `json:"members"`
		}
		getJSON(t, n1.api+"/v1/status", &st)
		return len(st.Members) == 1 // the other member
	}, 10*time.Second, poll, "the two nodes form one PoP")

	for i, first := range []*daemon{n1, n2} {
		other := map[*daemon]*daemon{n1: n2, n2: n1}[first]
		key, idem := "acct-"+strconv.Itoa(i), "charge-"+strconv.Itoa(i)
		code, repeat := checkIdem(t, first.api, key, idem)
		require.Equal(t, http.StatusOK, code)
		require.False(t, repeat)
		require.Eventually(t, func() bool { return memosHeld(t, other.api) >= i+1 }, 10*time.Second, poll,
			"the decision reaches the other node")
		for _, d := range []*daemon{other, first, other} {
			code, repeat := checkIdem(t, d.api, key, idem)
			assert.Equal(t, http.StatusOK, code)
			assert.True(t, repeat, "a retry is a repeat on either node")
		}
		require.Eventually(t, func() bool { return keyTotal(t, other.api, "pay", key) == 1 }, 10*time.Second, poll)
		assert.Equal(t, uint64(1), keyTotal(t, first.api, "pay", key), "counted once in the PoP")
		assert.Equal(t, uint64(1), keyTotal(t, other.api, "pay", key))
	}
}
