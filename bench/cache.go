package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// PhaseStart says how each timed phase is made to start from a comparable
// state. The original Conquest authors found that memory-speed
// microbenchmarks are distorted by what the previous phase left in the CPU
// caches; the same holds for dirty pages left for the kernel to write back and
// for file data left in the page cache. Before every phase (and before every
// PostMark run, whose phases are back to back as in PostMark) the runner:
//
//  1. calls sync(2) if Sync, so the previous phase's dirty data is written now
//     and not during the next phase's timing;
//  2. writes 3 to /proc/sys/vm/drop_caches if DropCaches (root only), so reads
//     come from the file system and not from the kernel's page cache; off by
//     default, because for Conquest (data in persistent RAM) and tmpfs the
//     page cache is the data;
//  3. writes one word in every cache line of a buffer of EvictBytes, so the
//     CPU caches hold that buffer and nothing of the previous phase, as if
//     other work had run in between. DefaultEvictBytes is twice the largest
//     cache the kernel reports.
type PhaseStart struct {
	Sync       bool  `json:"sync"`
	DropCaches bool  `json:"drop_caches"`
	EvictBytes int64 `json:"evict_bytes"`
}

// Settle brings the machine to the state described by ps.
func (ps PhaseStart) Settle() error {
	if ps.Sync || ps.DropCaches {
		syscall.Sync()
	}
	if ps.DropCaches {
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
			return fmt.Errorf("bench: dropping the page cache (needs root): %w", err)
		}
	}
	evictCPUCaches(ps.EvictBytes)
	return nil
}

const (
	minEvict = 8 << 20
	maxEvict = 512 << 20
)

// DefaultEvictBytes is twice the largest CPU cache listed under
// /sys/devices/system/cpu/cpu0/cache, between 8 MiB and 512 MiB; 64 MiB if
// none is listed.
func DefaultEvictBytes() int64 {
	largest := largestCPUCache("/sys/devices/system/cpu/cpu0/cache")
	if largest <= 0 {
		return 64 << 20
	}
	return min(max(2*largest, minEvict), maxEvict)
}

// largestCPUCache reads the index*/size files ("48K", "266240K") under dir.
func largestCPUCache(dir string) int64 {
	files, _ := filepath.Glob(filepath.Join(dir, "index*", "size"))
	var largest int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		mult := int64(1)
		switch {
		case strings.HasSuffix(s, "K"):
			mult, s = 1<<10, strings.TrimSuffix(s, "K")
		case strings.HasSuffix(s, "M"):
			mult, s = 1<<20, strings.TrimSuffix(s, "M")
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			largest = max(largest, n*mult)
		}
	}
	return largest
}

var evict struct {
	sync.Mutex
	buf []byte
	gen byte
}

// evictCPUCaches writes every cache line of a buffer of n bytes, kept between
// calls so its pages are already mapped and the cost is the cache traffic,
// not page faults.
func evictCPUCaches(n int64) {
	if n <= 0 {
		return
	}
	evict.Lock()
	defer evict.Unlock()
	if int64(len(evict.buf)) < n {
		evict.buf = make([]byte, n)
	}
	evict.gen++
	b := evict.buf[:n]
	for i := 0; i < len(b); i += 64 {
		b[i] = evict.gen
	}
}
