package main

import (
	"bufio"
	"bytes"
	"cmp"
	"os"
	"slices"
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
// four times a second as the heap grows, and collapses into huge pages what was
// mapped since the last time (MADV_COLLAPSE, Linux 6.1), once: memory the
// Go runtime hands back and takes again stays in small pages rather than
// being copied again at every look. Where the kernel cannot, nothing
// changes; the reports are the same either way.

const (
	madvHugePage = 14 // MADV_HUGEPAGE
	madvCollapse = 25 // MADV_COLLAPSE
	hugeMin      = 2 << 20
	// hugeEvery is how often the mappings are read again: soon enough
	// that little of a new mapping is touched before it is advised, so
	// that little is copied to collapse it.
	hugeEvery = 250 * time.Millisecond
)

// hugePages advises huge pages at once and then every hugeEvery until
// stop is closed.
func hugePages(stop <-chan struct{}) {
	t := time.NewTicker(hugeEvery)
	defer t.Stop()
	var done spans
	for {
		adviseHuge(&done)
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// adviseHuge advises huge pages for every private writable anonymous
// mapping of at least hugeMin bytes, and collapses the parts of them not
// in done, which it adds to done.
func adviseHuge(done *spans) {
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
		for _, g := range done.gaps(a, z) {
			syscall.Syscall(syscall.SYS_MADVISE, uintptr(g[0]), uintptr(g[1]-g[0]), madvCollapse)
		}
		done.add(a, z)
	}
}

// spans is a sorted list of disjoint address ranges [start, end).
type spans [][2]uint64

// gaps returns the parts of [a, z) that s does not hold.
func (s spans) gaps(a, z uint64) [][2]uint64 {
	var out [][2]uint64
	for _, r := range s {
		if r[1] <= a || r[0] >= z {
			continue
		}
		if r[0] > a {
			out = append(out, [2]uint64{a, r[0]})
		}
		a = max(a, r[1])
	}
	if a < z {
		out = append(out, [2]uint64{a, z})
	}
	return out
}

// add adds [a, z) to s, merging the ranges it touches.
func (s *spans) add(a, z uint64) {
	out := (*s)[:0:0]
	for _, r := range *s {
		switch {
		case r[1] < a || r[0] > z:
			out = append(out, r)
		default:
			a, z = min(a, r[0]), max(z, r[1])
		}
	}
	out = append(out, [2]uint64{a, z})
	slices.SortFunc(out, func(x, y [2]uint64) int { return cmp.Compare(x[0], y[0]) })
	*s = out
}
