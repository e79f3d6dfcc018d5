package pram

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// Faults on the mapping. A load or store through the mapping to a page its
// file no longer backs (the image, or its RAM copy, truncated under a live
// mount) or that the memory cannot deliver (a media error on persistent
// memory) raises SIGBUS, which ends a Go program unless the goroutine asked
// for a panic instead (runtime/debug.SetPanicOnFault). Every goroutine that
// touches the arena while a file system is served calls GuardFaults; the
// layers above recover the panic, ask Fault whether it was the arena's, and
// if so stop using the arena: from the first fault on, the arena is lost
// (Lost), nothing is stored to it or read from it again, and Close only
// releases it (a fault leaves locks and a transaction half done, and a
// truncated file read back as zeros would be taken for the file system).

// ErrLost is wrapped by the error Lost returns.
var ErrLost = errors.New("the arena's memory is lost")

// LostError describes the first fault on an arena's mapping.
type LostError struct {
	Path string // the file or device mapped: the image, or its RAM copy
	Off  uint64 // the offset in the arena of the faulting access
}

func (e *LostError) Error() string {
	return fmt.Sprintf("%s: %v: an access at offset %d faulted (the file was truncated or changed under the mount, or the memory failed)", e.Path, ErrLost, e.Off)
}

func (e *LostError) Unwrap() error { return ErrLost }

// GuardFaults makes a memory fault in the calling goroutine a panic that
// can be recovered, instead of the end of the process. It applies to the
// calling goroutine only and stays on for its life.
func GuardFaults() { debug.SetPanicOnFault(true) }

// Fault reports whether r, a value recovered from a panic, is a memory
// fault inside the arena's mapping. The first such fault makes the arena
// lost; later ones change nothing.
func (a *Arena) Fault(r any) bool {
	f, ok := r.(interface{ Addr() uintptr })
	if !ok {
		return false
	}
	off, in := a.offsetOf(f.Addr())
	if !in {
		return false
	}
	path := a.path
	if a.sh != nil {
		path = a.sh.path
	}
	a.lost.CompareAndSwap(nil, &LostError{Path: path, Off: off})
	return true
}

// Lost returns nil, or a *LostError when a fault on the mapping has made
// the arena unusable (Fault). It costs one atomic load.
func (a *Arena) Lost() error {
	if e := a.lost.Load(); e != nil {
		return e
	}
	return nil
}

// SimulateLost marks the arena lost as a fault at off would (tests of the
// layers above that cannot truncate a mapping safely in process).
func (a *Arena) SimulateLost(off uint64) {
	a.lost.CompareAndSwap(nil, &LostError{Path: a.path, Off: off})
}

// release is Close for a lost arena: the mapping and the descriptors are
// let go without a store, a sync or a wait (a checkpoint stopped by the
// fault may hold txMu for ever). A RAM copy is removed, so that the next
// Open starts from the image's last checkpoint, as after a power loss; an
// image mapped in place is left as the fault found it, for fsck to judge.
func (a *Arena) release() error {
	if a.sh != nil {
		a.sh.stopCheckpointer(true) // only one past waiting for txMu
	}
	err := a.unmap(a.sh != nil)
	if a.sh != nil && err == nil {
		err = fmt.Errorf("%w; removed its RAM copy %s: the next mount starts from the image's last checkpoint", a.Lost(), a.sh.path)
	} else if err == nil {
		err = a.Lost()
	}
	return err
}
