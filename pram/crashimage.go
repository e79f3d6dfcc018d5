package pram

import (
	"errors"
	"math/rand/v2"
	"sync"
)

// CrashImage is an ImageFile with a volatile write cache, for power-loss
// tests (OpenOptions.WrapImage): writes are visible to reads at once but
// reach the wrapped file only at Sync. PowerLoss then leaves the file as a
// power failure may: with none, some or torn parts of the writes not
// synced, in any order, and fails every later call.
type CrashImage struct {
	mu      sync.Mutex
	f       ImageFile
	pending []PendingWrite
	lost    bool
	syncs   int
	// BeforeSync, if set, is called at the start of every Sync with the
	// number of syncs so far; if it returns true, the power fails there
	// instead (PowerLoss with mode and rng), and Sync fails.
	BeforeSync func(n int) (fail bool)
	mode       CrashMode
	rng        *rand.Rand
}

// PendingWrite is a write that a crash-simulating store (CrashImage here,
// diskstore's CrashDevice) holds until its next sync.
type PendingWrite struct {
	Off  int64
	Data []byte
}

// CrashMode chooses what a simulated power failure keeps of the writes not
// synced (Survivors).
type CrashMode int

// Crash modes.
const (
	// CrashLoseAll keeps nothing that was not synced.
	CrashLoseAll CrashMode = iota
	// CrashRandom keeps a random subset of the writes, applied in a random
	// order (disks reorder writes in their cache).
	CrashRandom
	// CrashTorn is CrashRandom where each kept write may be cut to a
	// random prefix of its 512-byte sectors (a torn write).
	CrashTorn
)

// Survivors is what a power failure keeps of the pending writes, in the
// order the device applied them: per mode, none, a random subset in a
// random order, or that subset with some writes torn.
func Survivors(mode CrashMode, rng *rand.Rand, pending []PendingWrite) []PendingWrite {
	if mode == CrashLoseAll || len(pending) == 0 {
		return nil
	}
	var kept []PendingWrite
	for _, i := range rng.Perm(len(pending)) {
		if rng.IntN(2) == 0 {
			continue
		}
		w := pending[i]
		if mode == CrashTorn && len(w.Data) > 512 && rng.IntN(2) == 0 {
			w.Data = w.Data[:512*rng.IntN(len(w.Data)/512+1)]
		}
		kept = append(kept, w)
	}
	return kept
}

// ErrPowerLost is what a CrashImage answers after PowerLoss.
var ErrPowerLost = errors.New("the power failed (simulated)")

// NewCrashImage wraps f. mode and rng are what a failing BeforeSync uses.
func NewCrashImage(f ImageFile, mode CrashMode, rng *rand.Rand) *CrashImage {
	return &CrashImage{f: f, mode: mode, rng: rng}
}

// ReadAt implements ImageFile.
func (c *CrashImage) ReadAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return 0, ErrPowerLost
	}
	n, err := c.f.ReadAt(p, off)
	if err != nil {
		return n, err
	}
	for _, w := range c.pending {
		lo, hi := max(off, w.Off), min(off+int64(len(p)), w.Off+int64(len(w.Data)))
		if lo < hi {
			copy(p[lo-off:hi-off], w.Data[lo-w.Off:hi-w.Off])
		}
	}
	return n, nil
}

// WriteAt implements ImageFile.
func (c *CrashImage) WriteAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return 0, ErrPowerLost
	}
	c.pending = append(c.pending, PendingWrite{off, append([]byte(nil), p...)})
	return len(p), nil
}

// Sync implements ImageFile.
func (c *CrashImage) Sync() error {
	c.mu.Lock()
	if c.lost {
		c.mu.Unlock()
		return ErrPowerLost
	}
	n := c.syncs
	c.syncs++
	hook := c.BeforeSync
	c.mu.Unlock()
	if hook != nil && hook(n) {
		c.PowerLoss(c.mode, c.rng)
		return ErrPowerLost
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.pending {
		if _, err := c.f.WriteAt(w.Data, w.Off); err != nil {
			return err
		}
	}
	c.pending = nil
	return c.f.Sync()
}

// Syncs is the number of Sync calls so far.
func (c *CrashImage) Syncs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.syncs
}

// PowerLoss writes to the wrapped file what mode keeps of the writes not
// synced, syncs it, and makes every later call fail with ErrPowerLost.
func (c *CrashImage) PowerLoss(mode CrashMode, rng *rand.Rand) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return
	}
	c.lost = true
	for _, w := range Survivors(mode, rng, c.pending) {
		_, _ = c.f.WriteAt(w.Data, w.Off)
	}
	c.pending = nil
	_ = c.f.Sync()
}

// Allocate implements ImageFile.
func (c *CrashImage) Allocate(off, n int64) error {
	if c.isLost() {
		return ErrPowerLost
	}
	return c.f.Allocate(off, n)
}

// Size implements ImageFile.
func (c *CrashImage) Size() (int64, error) {
	if c.isLost() {
		return 0, ErrPowerLost
	}
	return c.f.Size()
}

// Truncate implements ImageFile (at once: the file's length is metadata
// its file system journals).
func (c *CrashImage) Truncate(n int64) error {
	if c.isLost() {
		return ErrPowerLost
	}
	return c.f.Truncate(n)
}

// Drop implements ImageFile.
func (c *CrashImage) Drop(off, n int64) {}

func (c *CrashImage) isLost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}
