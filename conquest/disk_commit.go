package conquest

import (
	"sync"
	"time"

	"conquest/pram"
)

// The periodic disk commit (Options.DiskCommit; diskstore/tick.go).
//
// The arena of a mount is checkpointed every second while something
// changed, but the disk was synced only every SyncBytes written and at
// fsync: a large file written and never fsynced stayed unsynced for as
// long as the mount was idle, with the arena (and its checkpoint) already
// pointing at it, and copy-on-write's old blocks stayed held. A goroutine
// now ticks the store every DiskCommit: each tick applies the background
// sync the last one started and starts the next if anything was written,
// so it holds the write lock only for bookkeeping, never across a device
// sync. With nothing pending it takes the shared lock alone.

// diskCommit is the ticker's state; zero when DiskCommit is off.
type diskCommit struct {
	stop    chan struct{}
	reset   chan time.Duration // a new interval (SetCommit)
	done    sync.WaitGroup
	once    sync.Once
	lastErr string // the last tick error logged (the ticker goroutine only)
}

// startDiskCommit starts the ticker if every > 0 and the file system has a
// disk.
func (fs *FS) startDiskCommit(every time.Duration) {
	if every <= 0 || fs.ds == nil {
		return
	}
	fs.commit.stop = make(chan struct{})
	fs.commit.reset = make(chan time.Duration)
	fs.commit.done.Add(1)
	go func() {
		defer fs.commit.done.Done()
		pram.GuardFaults() // a fault on the arena ends the ticker (lost.go)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-fs.commit.stop:
				return
			case d := <-fs.commit.reset:
				t.Reset(d)
			case <-t.C:
				if !fs.guardedTick() {
					return
				}
			}
		}
	}()
}

// MinCommit is the shortest commit interval a mount takes (--commit,
// commit=, SetCommit): each interval checkpoints the arena and ticks the
// disk, and an interval of a nanosecond kept an idle daemon at 90% of a CPU.
const MinCommit = 10 * time.Millisecond

// SetCommit changes the commit interval of an open file system (a
// remount's commit=): how often the arena's RAM copy is checkpointed to
// its image (pram.Arena.SetCheckpointInterval; an arena mapped in place
// has no checkpoints) and the period of the disk commit. It waits for a
// tick or a checkpoint in progress. Preconditions: fs.mu not held.
func (fs *FS) SetCommit(d time.Duration) error {
	if d < MinCommit {
		return ErrInvalid
	}
	fs.a.SetCheckpointInterval(d)
	if fs.commit.reset == nil {
		return nil // no disk, or no periodic commit
	}
	select {
	case fs.commit.reset <- d:
	case <-fs.commit.stop: // closing
	}
	return nil
}

// stopDiskCommit stops the ticker and waits for a tick in progress. Close
// calls it before it takes fs.mu.
func (fs *FS) stopDiskCommit() {
	if fs.commit.stop == nil {
		return
	}
	fs.commit.once.Do(func() { close(fs.commit.stop) })
	fs.commit.done.Wait()
}

// diskTick is one tick of the periodic disk commit.
func (fs *FS) diskTick() {
	fs.mu.RLock()
	moving := !fs.closed && (len(fs.moving) > 0 || fs.foundAny())
	fs.mu.RUnlock()
	if moving {
		fs.moveQueued() // move.go
	}
	fs.mu.RLock()
	pending := !fs.closed && fs.ds.TickPending()
	fs.mu.RUnlock()
	if !pending {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return
	}
	err := fs.update(func(tx *pram.Tx) error { return fs.ds.Tick(tx) })
	if err == nil {
		fs.commit.lastErr = ""
		return
	}
	// A failing disk fails every tick the same way: log it once. The
	// next fsync reports it.
	if msg := err.Error(); msg != fs.commit.lastErr {
		fs.commit.lastErr = msg
		fs.logf("%s: the periodic disk commit: %v", fs.diskPath, err)
	}
}
