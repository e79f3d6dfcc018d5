package diskstore

import (
	"bytes"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"conquest/pram"
)

// tickUntilSettled ticks until the background sync a tick started has been
// applied, as the core's periodic commit does.
func tickUntilSettled(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.must(e.s.Tick)
		if !e.s.inFlight() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the background sync a tick started never completed")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTickSyncsIdleWrites: blocks written short of SyncBytes, never fsynced,
// on a store that then stays idle. A tick starts a background sync without
// waiting for it; a later tick applies it: nothing is left unsynced, the
// old block of a rewrite leaves the quarantine and is free again, and a
// power failure keeps everything written before the tick. Without ticks
// the new file read back as zeros after the power failure and the old block
// stayed quarantined for as long as nothing else was written.
func TestTickSyncsIdleWrites(t *testing.T) {
	e, cd, g := newGatedEnv(t)
	a, b := e.newFile(1), e.newFile(2)
	v0 := pattern(1, 0, 4*4096)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, v0) }) // fsynced
	v1 := pattern(2, 0, 4096)
	if err := e.write(a, 0, v1); err != nil { // copy-on-write: v0's block quarantined
		t.Fatal(err)
	}
	vb := pattern(3, 0, 24<<10)
	if err := e.write(b, 0, vb); err != nil {
		t.Fatal(err)
	}
	st := e.s.Stats()
	if st.UnsyncedBytes == 0 || st.QuarantinedBlocks != 1 || e.s.inFlight() {
		t.Fatalf("before the tick: %d unsynced bytes, %d quarantined blocks, sync in flight %v; want some, 1, false",
			st.UnsyncedBytes, st.QuarantinedBlocks, e.s.inFlight())
	}
	if !e.s.TickPending() {
		t.Fatal("TickPending is false with unsynced writes")
	}
	e.must(e.s.Tick)
	if !e.s.inFlight() {
		t.Fatal("the tick started no background sync")
	}
	e.must(e.s.Tick) // the gate holds the sync: the tick must not wait for it
	if ran, waited := g.counts(); ran != 0 || waited != 0 {
		t.Fatalf("ticks let %d syncs run and waited %d times, want 0 and 0", ran, waited)
	}
	g.release()
	tickUntilSettled(t, e)
	st = e.s.Stats()
	if st.UnsyncedBytes != 0 || st.QuarantinedBlocks != 0 {
		t.Fatalf("after the sync: %d unsynced bytes, %d quarantined blocks, want 0 and 0", st.UnsyncedBytes, st.QuarantinedBlocks)
	}
	if want := st.DataBlocks - 4 - 6; st.FreeBlocks > want {
		t.Fatalf("%d free blocks, more than the %d the two files leave", st.FreeBlocks, want)
	}
	if e.s.TickPending() {
		t.Fatal("TickPending is still true on an idle store with everything synced")
	}
	syncs := st.Syncs
	e.must(e.s.Tick)
	if e.s.inFlight() || e.s.Stats().Syncs != syncs {
		t.Fatal("a tick with nothing written started a sync")
	}

	e.crash(cd.Crash(CrashLoseAll, 1))
	got, err := e.read(a, 0, 4*4096)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), v0...)
	copy(want, v1)
	if !bytes.Equal(got, want) {
		t.Fatal("the rewritten file after the power failure is not what was written before the tick")
	}
	if got, err := e.read(b, 0, len(vb)); err != nil || !bytes.Equal(got, vb) {
		t.Fatalf("the new file after the power failure: %v, equal %v", err, bytes.Equal(got, vb))
	}
	e.check(map[pram.Off]int64{a: 4 * 4096, b: int64(len(vb))})
}

// TestTickOffWithoutBackgroundSyncs: with ForegroundSync (or GatherInMemory)
// there is no background sync to start, and Tick does nothing.
func TestTickOffWithoutBackgroundSyncs(t *testing.T) {
	for _, o := range []Options{{ForegroundSync: true}, {Durability: GatherInMemory}} {
		e := newEnv(t, envOpts{blockSize: 4096, o: o})
		a := e.newFile(1)
		if err := e.write(a, 0, pattern(1, 0, 8192)); err != nil {
			t.Fatal(err)
		}
		syncs := e.s.Stats().Syncs
		if e.s.TickPending() {
			t.Fatalf("%+v: TickPending is true", o)
		}
		e.must(e.s.Tick)
		if e.s.inFlight() || e.s.Stats().Syncs != syncs {
			t.Fatalf("%+v: the tick synced", o)
		}
	}
}

// TestTickAfterCrashInFlight: a crash while a background sync is in flight
// (started bit set) at a moment when no file has unsynced records and the
// quarantine is empty (the only file written was deleted). Open's recovery
// used to return early without ending the epoch, so the started bit outlived
// the flight, and Tick never started a sync again: blocks written later
// stayed unsynced on an idle store for good (found by a review).
func TestTickAfterCrashInFlight(t *testing.T) {
	e, cd, _ := newGatedEnv(t)
	a := e.newFile(1)
	if err := e.write(a, 0, pattern(1, 0, 8192)); err != nil {
		t.Fatal(err)
	}
	e.must(e.s.Tick) // starts a background sync, held by the gate
	if !e.s.inFlight() {
		t.Fatal("no sync in flight")
	}
	e.must(func(tx *pram.Tx) error { return e.s.Destroy(tx, a) })
	// kill -9 (the disk's page cache survives: nothing lost on the device)
	e.crash(cd)
	if e.s.epochWord()&epochStarted != 0 {
		t.Logf("after Open the started bit is still set (epoch word %#x), no sync in flight", e.s.epochWord())
	}
	b := e.newFile(2)
	if err := e.write(b, 0, pattern(2, 0, 8192)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		e.must(e.s.Tick)
		if e.s.inFlight() {
			break
		}
	}
	if !e.s.inFlight() && e.s.Stats().UnsyncedBytes > 0 {
		t.Fatalf("ticks on an idle store never start a sync: %d bytes stay unsynced (epoch word %#x)",
			e.s.Stats().UnsyncedBytes, e.s.epochWord())
	}
}

// TestTickAfterFailedRetry: a background sync failed and so did its retry,
// and the store then stays idle. The tick syncs in the foreground: nothing
// is left unsynced and a power failure keeps what was written. Before, the
// tick did nothing in that state, and file c read as zeros after the power
// failure however many ticks had passed.
func TestTickAfterFailedRetry(t *testing.T) {
	e, cd, a, c, v0, v1 := failedRetryEnv(t)
	if !e.s.TickPending() {
		t.Fatal("TickPending is false after a failed sync")
	}
	e.must(e.s.Tick)
	if st := e.s.Stats(); st.UnsyncedBytes != 0 || e.s.epochWord()&epochStarted != 0 {
		t.Fatalf("after the tick: %d unsynced bytes, epoch word %#x", st.UnsyncedBytes, e.s.epochWord())
	}
	// The failure is still reported, once, by the next fsync.
	if err := e.do(e.s.SyncWritten); !isErr(err, ErrIO) {
		t.Fatalf("SyncWritten after the tick: %v, want the earlier EIO", err)
	}
	e.crash(cd.Crash(CrashLoseAll, 1))
	got, err := e.read(c, 0, 80<<10)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern(3, 0, 80<<10)) {
		t.Fatal("file c lost in a power failure after the tick")
	}
	want := append([]byte(nil), v0...)
	copy(want, v1)
	if got, err := e.read(a, 0, 4*4096); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("file a after the power failure: %v, or not its last contents", err)
	}
}

// TestTickBacksOffFailingDevice: while every sync fails, the ticks after a
// failed retry try again after 1, 2, 4 ... skipped ticks, each failure is
// returned, and one success ends the pauses.
func TestTickBacksOffFailingDevice(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	var failing atomic.Bool
	var syncs atomic.Int64
	fd := NewFaultDevice(cd, InjectorFunc(func(op Op, off int64, n int) FaultKind {
		if op == OpSync {
			syncs.Add(1)
			if failing.Load() {
				return FaultEIO
			}
		}
		return FaultNone
	}))
	e := newEnv(t, envOpts{blockSize: 4096, dev: fd, o: Options{SyncBytes: 64 << 10}})
	c := e.newFile(1)
	failing.Store(true)
	if err := e.write(c, 0, pattern(3, 0, 80<<10)); err != nil { // starts a background sync
		t.Fatal(err)
	}
	if err := e.do(func(tx *pram.Tx) error { return e.s.settle(true) }); !isErr(err, ErrIO) {
		t.Fatalf("settle: %v, want EIO", err)
	}
	syncs.Store(0)
	var tried []int
	for i := 0; i < 20; i++ {
		n := syncs.Load()
		err := e.do(e.s.Tick)
		if syncs.Load() != n {
			tried = append(tried, i)
			if !isErr(err, ErrIO) {
				t.Fatalf("tick %d synced a failing device and returned %v", i, err)
			}
		} else if err != nil {
			t.Fatalf("tick %d made no sync but returned %v", i, err)
		}
	}
	// Tries at ticks 0, 2, 5, 10 and 19: pauses of 1, 2, 4 and 8.
	if want := []int{0, 2, 5, 10, 19}; !slices.Equal(tried, want) {
		t.Fatalf("ticks that synced: %v, want %v", tried, want)
	}
	failing.Store(false)
	for i := 0; i < 20 && e.s.epochWord()&epochStarted != 0; i++ {
		e.must(e.s.Tick)
	}
	if st := e.s.Stats(); st.UnsyncedBytes != 0 || e.s.epochWord()&epochStarted != 0 || e.s.tickPause != 0 {
		t.Fatalf("after the device recovered: %d unsynced, epoch word %#x, pause %d", st.UnsyncedBytes, e.s.epochWord(), e.s.tickPause)
	}
}
