//go:build unix

package gossiptest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReservePort: a port reserved by one test cannot be reserved by
// another (here a second lock in the same process, as another process
// would take it) until the first test ends.
func TestReservePort(t *testing.T) {
	const port = 19999 // outside the range FreeAddr draws from, which other tests may hold
	t.Run("holder", func(t *testing.T) {
		require.True(t, reservePort(t, port))
		assert.False(t, reservePort(t, port), "a held port is skipped")
	})
	assert.True(t, reservePort(t, port), "released when its test ended")
}
