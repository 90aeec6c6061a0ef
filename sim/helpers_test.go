package sim

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// builtins returns the paths of the built-in scenarios.
func builtins(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob("../scenarios/*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(paths), 8)
	return paths
}

func mustParse(t testing.TB, src string) *Scenario {
	t.Helper()
	sc, err := Parse([]byte(src))
	require.NoError(t, err)
	return sc
}
