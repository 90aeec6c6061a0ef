package sim

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Replaying a run's own per-request log measures exactly what the run
// measured: fleet and central figures, per phase, per region and per rule.
func TestReplayReproducesTheRun(t *testing.T) {
	for _, name := range []string{"two-regions-cut", "crash-loop", "skewed-regions-1s"} {
		t.Run(name, func(t *testing.T) {
			sc, err := Load(filepath.Join("..", "scenarios", name+".yaml"))
			require.NoError(t, err)
			untilEvents(sc)
			var log bytes.Buffer
			res, err := Run(sc, Options{Log: &log, RateScale: testScale})
			require.NoError(t, err)
			ds, err := ReadLog(&log)
			require.NoError(t, err)
			require.NotEmpty(t, ds)
			got, err := Replay(sc, ds)
			require.NoError(t, err)
			want := res.Report
			assert.Equal(t, want.Figures, got.Report.Figures)
			assert.Equal(t, want.Phases, got.Report.Phases)
			assert.Equal(t, want.Central, got.Report.Central)
			require.Equal(t, len(res.Series), len(got.Series))
			for i, row := range res.Series {
				assert.Equal(t, [3]uint64{row.True, row.Central, row.Limit}, [3]uint64{got.Series[i].True, got.Series[i].Central, got.Series[i].Limit}, "row %d", i)
			}
		})
	}
}

func TestReadLogAndReplayErrors(t *testing.T) {
	for _, c := range []struct{ in, err string }{
		{"1,eu,ams,ams-1,api,k0,1", "want 8 fields"},
		{"x,eu,ams,ams-1,api,k0,1,1", "bad t_ms"},
		{"1.1234567,eu,ams,ams-1,api,k0,1,1", "bad t_ms"},
		{"1,eu,ams,ams-1,api,k0,-1,1", "bad cost"},
		{"1,eu,ams,ams-1,api,k0,1,2", "admitted must be 0 or 1"},
	} {
		_, err := ReadLog(strings.NewReader(c.in))
		assert.ErrorContains(t, err, c.err, c.in)
	}
	ds, err := ReadLog(strings.NewReader("t_ms,region,pop,node,rule,key,cost,admitted\n12.000500,eu,ams,ams-1,api,k0,1,1\n"))
	require.NoError(t, err)
	require.Equal(t, []Decision{{T: 12*time.Millisecond + 500*time.Nanosecond, Region: "eu", PoP: "ams", Node: "ams-1", Rule: "api", Key: "k0", Cost: 1, Admitted: true}}, ds)

	sc, err := Load(filepath.Join("..", "scenarios", "two-regions-cut.yaml"))
	require.NoError(t, err)
	for _, c := range []struct {
		d   Decision
		err string
	}{
		{Decision{T: -1, Region: "eu", Rule: "api", Key: "k0", Cost: 1}, "outside the run"},
		{Decision{T: time.Hour, Region: "eu", Rule: "api", Key: "k0", Cost: 1}, "outside the run"},
		{Decision{Region: "eu", Rule: "api", Key: "nope", Cost: 1}, "is not one of the scenario's"},
		{Decision{Region: "mars", Rule: "api", Key: "k0", Cost: 1}, "unknown region"},
	} {
		_, err := Replay(sc, []Decision{c.d})
		assert.ErrorContains(t, err, c.err)
	}
}
