package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Bad flags fail at once with an error that names them, starting nothing.
func TestRunRejectsBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{nil, "-scenario: required"},
		{[]string{"-scenario", "no-such-scenario"}, `-scenario "no-such-scenario": no such file, nor a built-in scenario`},
		{[]string{"-soak", "1m", "-scenario", "live/cut-share"}, "give one of them"},
		{[]string{"-soak", "-1s"}, "-soak: must be positive"},
		{[]string{"-soak", "1s"}, "-soak: between 30s and"},
		{[]string{"-scenario", "two-regions-cut"}, "network.inter_pop: region eu has several PoPs"},
		{[]string{"-scenario", "live/cut-share", "extra"}, `unexpected argument "extra"`},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), c.args, &out, &errb)
		assert.ErrorContains(t, err, c.err, c.args)
		assert.Empty(t, out.String(), c.args)
	}
}
