package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/window"
)

// TestPlanStackConfig: the plan stack of "Calendar quotas" in decisions.md
// is a config the daemon accepts (as -check-config does), with its plans
// as tiers of a monthly quota and a per-second burst rule beside it.
func TestPlanStackConfig(t *testing.T) {
	b, err := os.ReadFile("decisions.md")
	require.NoError(t, err)
	_, sec, ok := strings.Cut(string(b), "\n## Calendar quotas\n")
	require.True(t, ok, "the section")
	sec, _, _ = strings.Cut(sec, "\n## ")
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(sec)
	require.NotNil(t, m, "a YAML block in the section")
	c, err := config.ParseFile([]byte(m[1]))
	require.NoError(t, err)
	rs, err := c.PopRules()
	require.NoError(t, err)
	require.Len(t, rs, 2)
	plan, burst := rs[0], rs[1]
	assert.Equal(t, window.Month, plan.Calendar.Period)
	assert.Equal(t, uint64(1000), plan.LimitsFor("k", "")[0].Limit, "free")
	assert.Equal(t, uint64(100000), plan.LimitsFor("k", "pro")[0].Limit, "pro")
	assert.True(t, burst.Calendar.IsZero())
	assert.Equal(t, uint64(20), burst.Limit)
}
