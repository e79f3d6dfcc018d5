package conquest

import (
	"errors"
	"time"

	"conquest/pram"
)

// A lost arena. A fault on the arena's mapping (its file truncated under
// the mount, a memory error: pram/fault.go) is recovered where the
// operations already recover panics (updateOnce, guard; the FUSE adapter
// for the rest), and from then on the file system does nothing more with
// the arena: every operation fails with ErrIO before it takes a lock, and
// Close releases the images without a store, a sync of the arena or a
// wait. A fault can stop an operation with locks held and a transaction
// half done, so nothing may take them again; and the arena's pages may
// read back as zeros if the file grows again, which must not be taken for
// the file system and checkpointed over its image.

// Lost returns nil, or the error that describes the fault that made the
// arena unusable (it wraps pram.ErrLost).
func (fs *FS) Lost() error { return fs.a.Lost() }

// NoteFault reports whether r, a value recovered from a panic, is a fault
// on the arena's mapping, which makes the arena lost. The first one is
// logged.
func (fs *FS) NoteFault(r any) bool {
	if !fs.a.Fault(r) {
		return false
	}
	fs.lostOnce.Do(func() {
		fs.lostLogf("%v: every request now fails with EIO; unmount, then run `conquest fsck`", fs.a.Lost())
	})
	return true
}

// quietWhenLost wraps logf so that nothing more is logged once the arena
// is lost (after the one message NoteFault writes through the unwrapped
// logf): every operation fails with ErrIO from then on, and the moves,
// writebacks and ticks that would log each failure say nothing the first
// message has not said.
func quietWhenLost(a *pram.Arena, logf func(format string, args ...any)) func(format string, args ...any) {
	return func(format string, args ...any) {
		if a.Lost() == nil {
			logf(format, args...)
		}
	}
}

// closeLost is Close for a lost arena: the disk commit is stopped (waited
// for a second at most: a fault may have left it blocked on a lock), the
// disk's descriptor closed after a sync of what writes put there, and the
// arena released (pram.Arena.Close of a lost arena: its RAM copy is
// removed, so the next mount starts from the image's last checkpoint).
// It returns the arena's LostError, with whatever else failed.
func (fs *FS) closeLost() error {
	if !fs.lostClosed.CompareAndSwap(false, true) {
		return nil
	}
	if fs.commit.stop != nil {
		fs.commit.once.Do(func() { close(fs.commit.stop) })
		waited := make(chan struct{})
		go func() {
			fs.commit.done.Wait()
			close(waited)
		}()
		select {
		case <-waited:
		case <-time.After(time.Second):
		}
	}
	var derr error
	if fs.ds != nil {
		derr = fs.ds.Release()
	}
	return errors.Join(fs.a.Close(), derr)
}

// guardedTick is diskTick on the disk commit's goroutine, which has asked
// for faults as panics (pram.GuardFaults). It reports false once the arena
// is lost, and the ticker then ends. Other panics are not recovered: the
// operations the tick runs recover their own.
func (fs *FS) guardedTick() (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if !fs.NoteFault(r) {
				panic(r)
			}
			ok = false
		}
	}()
	if fs.a.Lost() != nil {
		return false
	}
	fs.diskTick()
	return fs.a.Lost() == nil
}
