package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/gossip/gossiptest"
)

// calendarRule is a monthly quota in New York: the daemons run on the
// wall clock, and a month's boundary does not fall inside a test run
// (skipOnMonthEnd).
const calendarRule = `
rules:
  - {name: monthly, limit: 5, calendar: {period: month, time_zone: America/New_York}, scope: pop}
`

// skipOnMonthEnd skips a test started in the last minute of a month in New
// York, when the boundary could fall inside it and hand out a new month's
// quota legitimately.
func skipOnMonthEnd(t *testing.T) {
	nyc, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	now := time.Now().In(nyc)
	if end := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, nyc); end.Sub(now) < time.Minute {
		t.Skip("the month ends within the run")
	}
}

// spendMonthly posts n checks of key to api and returns how many were
// admitted.
func spendMonthly(t *testing.T, api, key string, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		code, body := post(t, api+"/v1/check", `{"rule":"monthly","key":"`+key+`"}`)
		require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, code, body)
		if code == http.StatusOK {
			admitted++
		}
	}
	return admitted
}

// TestCalendarRestartWithPeers: a node of a two-node PoP spends a key's
// monthly quota and restarts (a new incarnation, no state file): it learns
// the month's counts from its peer on joining, and neither node admits
// what was spent again.
func TestCalendarRestartWithPeers(t *testing.T) {
	skipOnMonthEnd(t)
	g1, g2 := gossiptest.FreeAddr(t), gossiptest.FreeAddr(t)
	cfg := func(id, bind, join string) string {
		p := filepath.Join(t.TempDir(), id+".yaml")
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf(`
node: {id: %s, region: eu, pop: ams}
listen: {api: 127.0.0.1:0}
nats: {disabled: true}
gossip: {bind: %q, join: [%q]}
replication: {flush_interval: 20ms}
`+calendarRule, id, bind, join)), 0o600))
		return p
	}
	members := func(d *daemon) int {
		var st struct {
			Members []struct{ Name string } `json:"members"`
		}
		getJSON(t, d.api+"/v1/status", &st)
		return len(st.Members)
	}
	n1 := startDaemon(t, cfg("ams-1", g1, g2))
	n2 := startDaemon(t, cfg("ams-2", g2, g1))
	defer n2.stop(t)
	require.Eventually(t, func() bool { return members(n1) == 1 }, 10*time.Second, poll, "the two nodes form one PoP")
	for range 5 {
		// Near the limit a node of two may defer a request until its
		// earlier admits have reached the other (a short retry_after_ms).
		postAdmitted(t, n1.api, `{"rule":"monthly","key":"customer"}`)
	}
	require.Eventually(t, func() bool { return keyTotal(t, n2.api, "monthly", "customer") == 5 }, 10*time.Second, poll,
		"n1's admissions reach n2")
	n1.stop(t)

	n1 = startDaemon(t, cfg("ams-1", g1, g2))
	defer n1.stop(t)
	require.Eventually(t, func() bool { return members(n1) == 1 }, 10*time.Second, poll, "the restarted node rejoins")
	require.Eventually(t, func() bool { return keyTotal(t, n1.api, "monthly", "customer") == 5 }, 10*time.Second, poll,
		"the restarted node learns the month's counts")
	assert.Zero(t, spendMonthly(t, n1.api, "customer", 5), "the restarted node admits nothing spent this month again")
	assert.Zero(t, spendMonthly(t, n2.api, "customer", 5))
}

// TestCalendarStateFileRestart: a lone node with state.file restarts
// without forgetting a month's spent quota.
func TestCalendarStateFileRestart(t *testing.T) {
	skipOnMonthEnd(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "edge.yaml")
	require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf(`
node: {id: ams-1, region: eu, pop: ams}
listen: {api: 127.0.0.1:0}
nats: {disabled: true}
state: {file: %q, interval: 20ms}
`+calendarRule, filepath.Join(dir, "state"))), 0o600))
	d := startDaemon(t, p)
	require.Equal(t, 5, spendMonthly(t, d.api, "customer", 6))
	require.Equal(t, 2, spendMonthly(t, d.api, "other", 2))
	d.stop(t)

	d = startDaemon(t, p)
	defer d.stop(t)
	assert.Equal(t, uint64(5), keyTotal(t, d.api, "monthly", "customer"))
	assert.Zero(t, spendMonthly(t, d.api, "customer", 5), "nothing spent this month is admitted again")
	assert.Equal(t, 3, spendMonthly(t, d.api, "other", 5), "the rest of the month's quota, no more")
}

// TestCheckConfigCalendar: -check-config accepts a calendar rule and
// refuses a bad time zone, or calendar with window, naming the field.
func TestCheckConfigCalendar(t *testing.T) {
	var out bytes.Buffer
	ok := "rules: [{name: plan, limit: 1000, calendar: {period: month, time_zone: Europe/Paris}}]\n"
	require.NoError(t, run(t.Context(), []string{"-config", writeFile(t, ok), "-check-config"}, &out, io.Discard))
	assert.Equal(t, "config ok: 1 rules\n", out.String())
	for bad, want := range map[string]string{
		"rules: [{name: plan, limit: 1000, calendar: {period: month, time_zone: Europe/Pariss}}]\n": `rules[0].calendar.time_zone: unknown time zone "Europe/Pariss"`,
		"rules: [{name: plan, limit: 1000, window: 720h, calendar: {period: month}}]\n":             "rules[0].window: set together with calendar",
	} {
		err := run(t.Context(), []string{"-config", writeFile(t, bad), "-check-config"}, io.Discard, io.Discard)
		require.Error(t, err)
		assert.Contains(t, err.Error(), want)
	}
}
