package diskstore

import (
	"math/rand/v2"
	"sync"

	"conquest/pram"
)

// CrashDevice is an in-memory Device with a volatile write cache, like
// pebble's crashable in-memory file system. Writes are visible to reads at
// once but become durable only at Sync; Crash returns the device as a power
// failure would leave it. It can also lie: writes chosen by SetDropFilter are
// acknowledged but never stored, not even by a later Sync, which is what the
// data checksums must catch.
type CrashDevice struct {
	mu      sync.Mutex
	cur     []byte // what reads see: durable + pending
	durable []byte // what survives a crash
	pending []pram.PendingWrite
	drop    func(off int64, n int) bool
	syncs   int64
	writes  int64
	dropped int64
	closed  bool
}

// CrashMode chooses which unsynced writes survive Crash (pram.Survivors).
type CrashMode = pram.CrashMode

// Crash modes (pram's).
const (
	CrashLoseAll = pram.CrashLoseAll
	CrashRandom  = pram.CrashRandom
	CrashTorn    = pram.CrashTorn
)

// NewCrashDevice returns a zero-filled crashable device of size bytes.
func NewCrashDevice(size int64) *CrashDevice {
	return &CrashDevice{cur: make([]byte, size), durable: make([]byte, size)}
}

// SetDropFilter makes every later write for which drop returns true vanish:
// it is reported as done but never stored (nil: store all writes).
func (c *CrashDevice) SetDropFilter(drop func(off int64, n int) bool) {
	c.mu.Lock()
	c.drop = drop
	c.mu.Unlock()
}

// ReadAt implements Device.
func (c *CrashDevice) ReadAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, ErrClosed
	}
	if err := checkRange(off, len(p), int64(len(c.cur))); err != nil {
		return 0, err
	}
	return copy(p, c.cur[off:]), nil
}

// WriteAt implements Device.
func (c *CrashDevice) WriteAt(p []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, ErrClosed
	}
	if err := checkRange(off, len(p), int64(len(c.cur))); err != nil {
		return 0, err
	}
	c.writes++
	if c.drop != nil && c.drop(off, len(p)) {
		c.dropped++
		return len(p), nil
	}
	copy(c.cur[off:], p)
	c.pending = append(c.pending, pram.PendingWrite{Off: off, Data: append([]byte(nil), p...)})
	return len(p), nil
}

// Sync implements Device: every pending write becomes durable.
func (c *CrashDevice) Sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	for _, w := range c.pending {
		copy(c.durable[w.Off:], w.Data)
	}
	c.pending = nil
	c.syncs++
	return nil
}

// Size implements Device.
func (c *CrashDevice) Size() int64 { return int64(len(c.cur)) }

// Close implements Device.
func (c *CrashDevice) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

// Stats reports the number of syncs, writes and dropped writes so far, and
// the writes still pending (not yet synced).
func (c *CrashDevice) Stats() (syncs, writes, dropped int64, pending int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.syncs, c.writes, c.dropped, len(c.pending)
}

// Crash returns a new device holding what a power failure at this instant
// would leave: the synced contents plus, depending on mode, some of the
// pending writes (chosen with seed). The receiver is unchanged and stays
// usable; typically the caller abandons it.
func (c *CrashDevice) Crash(mode CrashMode, seed uint64) *CrashDevice {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := &CrashDevice{durable: append([]byte(nil), c.durable...)}
	for _, w := range pram.Survivors(mode, rand.New(rand.NewPCG(seed, 0x5eed)), c.pending) {
		copy(n.durable[w.Off:], w.Data)
	}
	n.cur = append([]byte(nil), n.durable...)
	return n
}

// Reopen returns a new open device with the same contents, pending writes
// included (a clean restart without power loss).
func (c *CrashDevice) Reopen() *CrashDevice {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := &CrashDevice{cur: append([]byte(nil), c.cur...), durable: append([]byte(nil), c.durable...), drop: c.drop}
	n.pending = append(n.pending, c.pending...)
	return n
}
