//go:build unix

package gossiptest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// reservePort takes an exclusive lock on a file named after port in a
// directory shared by every test process of the machine, held until tb
// ends: FreeAddr in another process (or another test of this one) skips a
// locked port. The kernel drops the lock when the process dies, so a
// crashed test reserves nothing. It reports false when the port is held.
func reservePort(tb testing.TB, port int) bool {
	tb.Helper()
	dir := filepath.Join(os.TempDir(), "geolimit-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		tb.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		tb.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	tb.Cleanup(func() { f.Close() }) // closing the file releases the lock
	return true
}
