package pram

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync/atomic"
	"time"
)

// Verification mode: the test suite's check that every store to a shadowed
// arena is marked for a checkpoint. A store that is not (written through a
// View, or through a slice kept across transactions) would be missing from
// the image after a power loss, and nothing else would notice until then.
//
// With it on, a checkpoint compares a random sample of the pages it does
// not write with the image, and Close (at most every 50 ms in a process)
// compares the whole image with the RAM copy after its last checkpoint; a
// difference makes Close fail, naming the first pages.
// $CONQUEST_VERIFY_CHECKPOINTS turns it on (the Makefile's test target and
// the test mains set it).
var verifyCheckpoints = os.Getenv("CONQUEST_VERIFY_CHECKPOINTS") != ""

// VerifyCheckpoints turns verification mode on or off (tests).
func VerifyCheckpoints(on bool) { verifyCheckpoints = on }

// verifyLocked compares a sample of the pages not in dirty (sorted) with
// the image, which holds the previous checkpoint, and records the first
// mismatch: a sample, because it runs with the transaction lock held (a
// whole arena read there made the tests' timings drift), and over many
// checkpoints a store that is never marked is found anyway.
// Preconditions: txMu and loose held (nothing changes the arena).
func (a *Arena) verifyLocked(dirty []uint64) {
	sh := a.sh
	if sh.verifyErr != nil {
		return
	}
	if err := a.compareImage(dirty, verifySample); err != nil {
		sh.verifyErr = err
		sh.logf("pram: %s: %v", a.path, err)
	}
}

// verifySample is how many pages a checkpoint compares.
const verifySample = 16

// compareImage compares the RAM copy with the image, but for the pages in
// skip (sorted): every page (sample 0) or sample pages picked at random.
// Pages that are holes in both are equal: only the ranges where either
// holds data are read.
func (a *Arena) compareImage(skip []uint64, sample int) error {
	size := int64(a.geo.Size)
	// Holes of the RAM copy read as zeros: compare them without touching
	// them (a read fault on tmpfs would allocate the page).
	ram := dataRanges(int(a.sh.f.Fd()), size)
	both := mergeRanges(ram, dataRanges(int(a.f.Fd()), size))
	var pages []int64 // page offsets to compare, increasing
	if sample > 0 {
		var total int64
		for _, r := range both {
			total += (r[1] - r[0] + PageSize - 1) / PageSize
		}
		for range min(int64(sample), total) {
			k := rand.Int64N(total)
			for _, r := range both {
				n := (r[1] - r[0] + PageSize - 1) / PageSize
				if k < n {
					pages = append(pages, r[0]+k*PageSize)
					break
				}
				k -= n
			}
		}
		slices.Sort(pages)
		pages = slices.Compact(pages)
	} else {
		for _, r := range both {
			for p := r[0]; p < r[1]; p += PageSize {
				pages = append(pages, p)
			}
		}
	}
	buf := make([]byte, PageSize)
	zero := make([]byte, PageSize)
	var bad []uint64
	for _, p := range pages {
		if _, found := slices.BinarySearch(skip, uint64(p)/PageSize); found {
			continue
		}
		n := min(PageSize, size-p)
		if _, err := a.sh.img.ReadAt(buf[:n], p); err != nil {
			return fmt.Errorf("verifying checkpoints: reading the image: %w", err)
		}
		for len(ram) > 0 && ram[0][1] <= p {
			ram = ram[1:]
		}
		mine := zero
		if len(ram) > 0 && ram[0][0] <= p {
			mine = a.m[p : p+n]
		}
		if !bytes.Equal(buf[:n], mine[:n]) {
			bad = append(bad, uint64(p))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("verifying checkpoints: %d pages of the RAM copy differ from the image without being marked, at offsets %v", len(bad), bad[:min(len(bad), 8)])
}

// lastCloseVerify rate-limits Close's checks across the process (tests
// open and close arenas thousands of times).
var lastCloseVerify atomic.Int64

// verifyImage is Close's check, after the last checkpoint: always when a
// checkpoint found a mismatch, else at most every 50 ms in the process.
func (a *Arena) verifyImage() error {
	sh := a.sh
	if sh.verifyErr != nil {
		return sh.verifyErr
	}
	now := time.Now().UnixNano()
	if last := lastCloseVerify.Load(); now-last < int64(50*time.Millisecond) || !lastCloseVerify.CompareAndSwap(last, now) {
		return nil
	}
	a.txMu.Lock()
	defer a.txMu.Unlock()
	return a.compareImage(nil, 0)
}

// mergeRanges is the union of two sorted lists of disjoint ranges.
func mergeRanges(x, y [][2]int64) [][2]int64 {
	var out [][2]int64
	for len(x) > 0 || len(y) > 0 {
		var r [2]int64
		if len(y) == 0 || len(x) > 0 && x[0][0] <= y[0][0] {
			r, x = x[0], x[1:]
		} else {
			r, y = y[0], y[1:]
		}
		if n := len(out); n > 0 && r[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], r[1])
		} else {
			out = append(out, r)
		}
	}
	return out
}
