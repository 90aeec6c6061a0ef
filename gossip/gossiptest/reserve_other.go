//go:build !unix

package gossiptest

import "testing"

// reservePort reserves nothing where file locks are not used: FreeAddr
// then relies on the port being free when drawn.
func reservePort(testing.TB, int) bool { return true }
