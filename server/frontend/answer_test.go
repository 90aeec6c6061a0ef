package frontend

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "<&>", "\x00\x1f\n\r\t", "é😀", "\xff\xfe", "\u2028\u2029"} {
		got := AppendString(nil, s)
		want, err := json.Marshal(s)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%q", s)
	}
}
