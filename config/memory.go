package config

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// MinMaxMemory is the least limits.max_memory accepted, in bytes.
const MinMaxMemory = 64 << 20

// MemoryBudget returns limits.max_memory, or when it is 0 one derived from
// the machine: half of the memory the process may use (the cgroup's limit,
// or the physical memory without one), at least MinMaxMemory. It reads
// /sys/fs/cgroup and /proc/meminfo; where neither can be read it returns
// 1 GiB.
func (l Limits) MemoryBudget() int64 {
	if l.MaxMemory != 0 {
		return l.MaxMemory
	}
	avail := machineMemory()
	if avail <= 0 {
		return 1 << 30
	}
	return max(avail/2, MinMaxMemory)
}

// machineMemory returns the memory the process may use: the smaller of the
// cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes) and the physical
// memory; 0 when neither is known.
func machineMemory() int64 {
	phys := int64(0)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					phys = kb << 10
				}
			}
		}
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v <= 0 { // "max": no limit
			continue
		}
		if phys == 0 || v < phys {
			return v
		}
	}
	return phys
}
