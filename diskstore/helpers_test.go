package diskstore

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"conquest/alloc"
	"conquest/internal/racetest"
	"conquest/pram"
)

// env is an arena with a heap and a store over a device, in t's temp dir.
type env struct {
	t    testing.TB
	path string
	a    *pram.Arena
	h    *alloc.Heap
	dev  Device
	s    *Store
	o    Options

	logMu sync.Mutex
	logs  []string
}

type envOpts struct {
	arenaSize uint64 // default 64 MiB
	blockSize uint32 // default 64 KiB
	dev       Device // default a 64 MiB MemDevice
	o         Options
}

func newEnv(t testing.TB, eo envOpts) *env {
	t.Helper()
	if eo.arenaSize == 0 {
		eo.arenaSize = 64 << 20
	}
	if eo.blockSize == 0 {
		eo.blockSize = DefaultBlockSize
	}
	if eo.dev == nil {
		eo.dev = NewMemDevice(64 << 20)
	}
	e := &env{t: t, path: filepath.Join(t.TempDir(), "arena"), dev: eo.dev, o: eo.o}
	e.o.Logf = e.logf
	var params [pram.NumParams]uint64
	params[ParamThreshold] = 1 << 20
	params[ParamBlockSize] = uint64(eo.blockSize)
	params[ParamDiskBlocks] = BlockCount(eo.dev.Size(), eo.blockSize)
	a, err := pram.Format(e.path, pram.Options{Size: eo.arenaSize, Features: pram.FeatureDisk, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	e.a = a
	t.Cleanup(func() { e.a.Close() })
	tx := a.Begin()
	h, err := alloc.Format(tx)
	if err != nil {
		tx.Abort()
		t.Fatal(err)
	}
	s, err := Format(tx, h, eo.dev, eo.blockSize, e.o)
	if err != nil {
		tx.Abort()
		t.Fatal(err)
	}
	s.Commit(tx)
	e.h, e.s = h, s
	return e
}

func (e *env) logf(format string, args ...any) {
	e.logMu.Lock()
	e.logs = append(e.logs, fmt.Sprintf(format, args...))
	e.logMu.Unlock()
}

func (e *env) logged(sub string) bool {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	for _, l := range e.logs {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// do runs f in a transaction: committed if f succeeds, aborted (store and
// arena) if it fails or panics (pram.ErrTxFull), like the core's wrapper.
func (e *env) do(f func(tx *pram.Tx) error) (err error) {
	tx := e.a.Begin()
	defer func() {
		if r := recover(); r != nil {
			e.s.Abort(tx)
			if re, ok := r.(error); ok {
				err = fmt.Errorf("panic: %w", re)
				return
			}
			panic(r)
		}
	}()
	if err := f(tx); err != nil {
		e.s.Abort(tx)
		return err
	}
	e.s.Commit(tx)
	return nil
}

func (e *env) must(f func(tx *pram.Tx) error) {
	e.t.Helper()
	if err := e.do(f); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) newFile(owner uint64) pram.Off {
	e.t.Helper()
	var seg pram.Off
	e.must(func(tx *pram.Tx) (err error) {
		seg, err = e.s.NewFile(tx, owner)
		return err
	})
	return seg
}

func (e *env) write(seg pram.Off, off int64, data []byte) error {
	return e.do(func(tx *pram.Tx) error { return e.s.Write(tx, seg, off, data) })
}

func (e *env) flush(seg pram.Off) error {
	return e.do(func(tx *pram.Tx) error { return e.s.Flush(tx, seg) })
}

func (e *env) read(seg pram.Off, off int64, n int) ([]byte, error) {
	p := make([]byte, n)
	_, err := e.s.ReadAt(seg, p, off, nil)
	return p, err
}

// check runs the full consistency walk (heap and store) over files (segment
// list → size) and returns its errors.
func (e *env) checkErrs(files map[pram.Off]int64, verify bool) []error {
	c := e.h.NewChecker()
	k := e.s.NewChecker(c, CheckOptions{VerifyData: verify})
	for seg, size := range files {
		k.File(seg, size)
	}
	errs := k.Finish()
	return append(errs, c.Finish()...)
}

func (e *env) check(files map[pram.Off]int64) {
	e.t.Helper()
	if errs := e.checkErrs(files, true); len(errs) > 0 {
		for _, err := range errs {
			e.t.Error(err)
		}
		e.t.FailNow()
	}
}

// crash simulates a crash of the daemon: the arena is abandoned (a Tx in
// flight rolls back at Open), the store's volatile state is lost, and the
// store is opened again on dev (typically CrashDevice.Crash()).
func (e *env) crash(dev Device) {
	e.t.Helper()
	if err := e.a.Abandon(); err != nil {
		e.t.Fatal(err)
	}
	e.reopen(dev)
}

// restart closes everything cleanly and opens again on the same device.
func (e *env) restart() {
	e.t.Helper()
	if err := e.s.Close(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.a.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.reopen(reopenDev(e.t, e.dev))
}

// reopenDev opens a closed test device again.
func reopenDev(t testing.TB, dev Device) Device {
	switch d := dev.(type) {
	case *MemDevice:
		return d.Reopen()
	case *CrashDevice:
		return d.Reopen()
	case *FaultDevice:
		return NewFaultDevice(reopenDev(t, d.dev), nil)
	case *hookDevice:
		return &hookDevice{reopenDev(t, d.Device), d.hook}
	case *fileDevice:
		n, err := OpenDevice(d.path, DeviceOptions{Direct: map[bool]DirectMode{true: DirectOn, false: DirectOff}[d.direct]})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Fatalf("cannot reopen %T", dev)
	return nil
}

func (e *env) reopen(dev Device) {
	e.t.Helper()
	a, err := pram.Open(e.path)
	if err != nil {
		e.t.Fatal(err)
	}
	e.a = a
	h, err := alloc.Open(a)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := Open(h, dev, e.o)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := s.GiveBack(); err != nil { // as a mount does (PunchFree)
		e.t.Fatal(err)
	}
	e.h, e.s, e.dev = h, s, dev
}

// pattern is deterministic non-zero data identifying (tag, offset).
func pattern(tag uint32, off int64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		x := uint64(off+int64(i))*0x9e3779b97f4a7c15 + uint64(tag)*0x7f4a7c15
		b[i] = byte(x>>56) | 1
	}
	return b
}

// isPattern reports whether b equals pattern(tag, off, len(b)), without
// allocating and stopping at the first difference.
func isPattern(b []byte, tag uint32, off int64) bool {
	x := uint64(off)*0x9e3779b97f4a7c15 + uint64(tag)*0x7f4a7c15
	for _, c := range b {
		if c != byte(x>>56)|1 {
			return false
		}
		x += 0x9e3779b97f4a7c15
	}
	return true
}

func isErr(err, target error) bool { return err != nil && errors.Is(err, target) }

// skipGatherUnderRace skips an exhaustive test's GatherInMemory run under
// the race detector. That mode is reachable only from tests (the core and
// the CLI always use DurableOnProcessCrash), the runs are single-threaded,
// and under -race each costs tens of seconds (TestFaultEveryOp's took 28
// s); `make test` runs them in its second step, without -race
// (internal/racetest).
func skipGatherUnderRace(t *testing.T, d Durability) {
	t.Helper()
	if racetest.Reduced(t) && d == GatherInMemory {
		t.Skip("GatherInMemory (a test-only mode) runs without -race only (make test's second step)")
	}
}
