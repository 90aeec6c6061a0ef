package main

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"
)

// The simulator holds the stores of every node of a fleet in one process:
// a fleet of hundreds of PoPs takes gigabytes, read at random, so that
// nearly every merge misses the TLB and walks page tables that miss the
// caches too. Huge pages (2 MB) cut those walks: the simulator asks the
// kernel (transparent huge pages, "madvise" mode or "always") to back its
// large anonymous mappings, the Go heap and the stores' tables, with them,
// and to collapse what is already there (MADV_COLLAPSE, Linux 6.1), once a
// second as the heap grows. Where the kernel cannot, nothing changes; the
// reports are the same either way.

const (
	madvHugePage = 14 // MADV_HUGEPAGE
	madvCollapse = 25 // MADV_COLLAPSE
	hugeMin      = 2 << 20
)

// hugePages advises huge pages at once and then every second until stop
// is closed.
func hugePages(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		adviseHuge()
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// adviseHuge advises huge pages for every private writable anonymous
// mapping of at least hugeMin bytes.
func adviseHuge() {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// start-end perms offset dev inode [path]
		f := bytes.Fields(sc.Bytes())
		if len(f) < 5 || string(f[1]) != "rw-p" || len(f) > 5 {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		a, err1 := strconv.ParseUint(string(lo), 16, 64)
		z, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || z < a+hugeMin {
			continue
		}
		// Errors are ignored: the kernel may not have huge pages.
		syscall.Syscall(syscall.SYS_MADVISE, uintptr(a), uintptr(z-a), madvHugePage)
		syscall.Syscall(syscall.SYS_MADVISE, uintptr(a), uintptr(z-a), madvCollapse)
	}
}
