package pop

import "testing"

// setBeforeCount sets the hook that runs between the check of an
// all-or-nothing request and its counts (testHookBeforeCount) until the
// test ends or it is set again. Tests that set it do not run in parallel.
func setBeforeCount(t testing.TB, f func()) {
	testHookBeforeCount = f
	t.Cleanup(func() { testHookBeforeCount = nil })
}
