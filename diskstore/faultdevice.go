package diskstore

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
)

// Op is a set of device operations, for injectors.
type Op uint8

// Device operations.
const (
	OpRead Op = 1 << iota
	OpWrite
	OpSync
	OpAny = OpRead | OpWrite | OpSync
)

// FaultKind is what an injector makes an operation do.
type FaultKind int

// Fault kinds.
const (
	FaultNone    FaultKind = iota
	FaultEIO               // the operation fails with EIO and does nothing
	FaultShort             // a write stores only its first half and reports io.ErrShortWrite; a read returns half and io.ErrUnexpectedEOF
	FaultNoSpace           // a write fails with ENOSPC and does nothing
	FaultDrop              // a write reports success but stores nothing (a lying disk); a sync does nothing
	FaultCorrupt           // a read returns the data with one byte flipped (bit rot)
)

// Injector decides the fate of one device operation. Implementations are
// safe for concurrent use.
type Injector interface {
	Inject(op Op, off int64, n int) FaultKind
}

// InjectorFunc adapts a function to Injector.
type InjectorFunc func(op Op, off int64, n int) FaultKind

// Inject implements Injector.
func (f InjectorFunc) Inject(op Op, off int64, n int) FaultKind { return f(op, off, n) }

// OnNth fires kind on the nth operation (counting from 1) among those in
// ops, once.
func OnNth(ops Op, nth int64, kind FaultKind) Injector {
	var count atomic.Int64
	return InjectorFunc(func(op Op, off int64, n int) FaultKind {
		if op&ops == 0 {
			return FaultNone
		}
		if count.Add(1) == nth {
			return kind
		}
		return FaultNone
	})
}

// FromNth fires kind on the nth operation among ops and on every later one:
// a device that has died.
func FromNth(ops Op, nth int64, kind FaultKind) Injector {
	var count atomic.Int64
	return InjectorFunc(func(op Op, off int64, n int) FaultKind {
		if op&ops == 0 {
			return FaultNone
		}
		if count.Add(1) >= nth {
			return kind
		}
		return FaultNone
	})
}

// WithProbability fires kind on each operation among ops with probability p,
// drawn from a generator seeded with seed (reproducible for one goroutine).
func WithProbability(ops Op, p float64, seed uint64, kind FaultKind) Injector {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return InjectorFunc(func(op Op, off int64, n int) FaultKind {
		if op&ops == 0 {
			return FaultNone
		}
		mu.Lock()
		defer mu.Unlock()
		if r.Float64() < p {
			return kind
		}
		return FaultNone
	})
}

// InRange fires kind on operations among ops that touch [begin, end) of the
// device: a bad region, or with FaultNoSpace a thin-provisioned device that
// is full beyond begin.
func InRange(ops Op, begin, end int64, kind FaultKind) Injector {
	return InjectorFunc(func(op Op, off int64, n int) FaultKind {
		if op&ops == 0 || op == OpSync || off >= end || off+int64(n) <= begin {
			return FaultNone
		}
		return kind
	})
}

// Any combines injectors: the first that fires wins. Every injector sees
// every operation, so their counters stay in step.
func Any(inj ...Injector) Injector {
	return InjectorFunc(func(op Op, off int64, n int) FaultKind {
		k := FaultNone
		for _, i := range inj {
			if f := i.Inject(op, off, n); k == FaultNone {
				k = f
			}
		}
		return k
	})
}

// FaultDevice wraps a Device and injects faults chosen by an Injector, like
// pebble's errorfs. The zero injector injects nothing.
type FaultDevice struct {
	dev      Device
	mu       sync.RWMutex
	inj      Injector
	injected atomic.Int64
	ops      atomic.Int64
}

// NewFaultDevice wraps dev; inj may be nil.
func NewFaultDevice(dev Device, inj Injector) *FaultDevice {
	return &FaultDevice{dev: dev, inj: inj}
}

// SetInjector replaces the injector (nil: none).
func (f *FaultDevice) SetInjector(inj Injector) {
	f.mu.Lock()
	f.inj = inj
	f.mu.Unlock()
}

// Injected is the number of faults injected so far.
func (f *FaultDevice) Injected() int64 { return f.injected.Load() }

// Ops is the number of operations seen so far.
func (f *FaultDevice) Ops() int64 { return f.ops.Load() }

func (f *FaultDevice) decide(op Op, off int64, n int) FaultKind {
	f.ops.Add(1)
	f.mu.RLock()
	inj := f.inj
	f.mu.RUnlock()
	if inj == nil {
		return FaultNone
	}
	k := inj.Inject(op, off, n)
	if k != FaultNone {
		f.injected.Add(1)
	}
	return k
}

func injectedErr(op string, off int64, err error) error {
	return fmt.Errorf("injected %s fault at %d: %w", op, off, err)
}

// ReadAt implements Device.
func (f *FaultDevice) ReadAt(p []byte, off int64) (int, error) {
	switch f.decide(OpRead, off, len(p)) {
	case FaultEIO, FaultNoSpace:
		return 0, injectedErr("read", off, syscall.EIO)
	case FaultShort:
		n, _ := f.dev.ReadAt(p[:len(p)/2], off)
		return n, injectedErr("read", off, io.ErrUnexpectedEOF)
	case FaultCorrupt:
		n, err := f.dev.ReadAt(p, off)
		if len(p) > 0 {
			p[len(p)/3] ^= 0x20
		}
		return n, err
	}
	return f.dev.ReadAt(p, off)
}

// WriteAt implements Device.
func (f *FaultDevice) WriteAt(p []byte, off int64) (int, error) {
	switch f.decide(OpWrite, off, len(p)) {
	case FaultEIO:
		return 0, injectedErr("write", off, syscall.EIO)
	case FaultNoSpace:
		return 0, injectedErr("write", off, syscall.ENOSPC)
	case FaultShort:
		n, _ := f.dev.WriteAt(p[:len(p)/2], off)
		return n, injectedErr("write", off, io.ErrShortWrite)
	case FaultDrop:
		return len(p), nil
	}
	return f.dev.WriteAt(p, off)
}

// Sync implements Device.
func (f *FaultDevice) Sync() error {
	switch f.decide(OpSync, 0, 0) {
	case FaultEIO, FaultShort, FaultNoSpace:
		return injectedErr("sync", 0, syscall.EIO)
	case FaultDrop:
		return nil
	}
	return f.dev.Sync()
}

// Size implements Device.
func (f *FaultDevice) Size() int64 { return f.dev.Size() }

// Close implements Device.
func (f *FaultDevice) Close() error { return f.dev.Close() }
