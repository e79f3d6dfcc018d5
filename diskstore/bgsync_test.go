package diskstore

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"conquest/pram"
)

// gatedSyncs holds every background sync until a permit lets it run: a
// writer that starts waiting for it gives one, as does release.
type gatedSyncs struct {
	mu      sync.Mutex
	permits chan struct{}
	crashed chan struct{} // closed: held syncs end without syncing
	ran     int
	waited  int
}

func newGatedSyncs(o *Options) *gatedSyncs {
	g := &gatedSyncs{permits: make(chan struct{}, 64), crashed: make(chan struct{})}
	o.testSyncBG = func(sync func() error) error {
		select {
		case <-g.permits:
			g.mu.Lock()
			g.ran++
			g.mu.Unlock()
			return sync()
		case <-g.crashed:
			return errors.New("power lost")
		}
	}
	o.testWait = func(waiting bool) {
		if waiting {
			g.mu.Lock()
			g.waited++
			g.mu.Unlock()
			g.release()
		}
	}
	return g
}

// release lets one held sync run.
func (g *gatedSyncs) release() { g.permits <- struct{}{} }

// newGatedEnv is a store on a CrashDevice with 4 KiB blocks, a sync every
// 64 KiB and its background syncs gated.
func newGatedEnv(t *testing.T) (*env, *CrashDevice, *gatedSyncs) {
	cd := NewCrashDevice(16 << 20)
	o := Options{SyncBytes: 64 << 10}
	g := newGatedSyncs(&o)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd, o: o})
	t.Cleanup(func() { close(g.crashed) })
	return e, cd, g
}

func (g *gatedSyncs) counts() (ran, waited int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ran, g.waited
}

// TestBackgroundSyncRewriteWaits: a block written before a background sync
// started and rewritten while it is in flight makes the writer wait for it.
// Without the wait the new record would name, as the contents of the last
// sync, a block the sync had not made durable yet; a power failure then
// zeroed the whole block, fsynced bytes the rewrites never touched included.
func TestBackgroundSyncRewriteWaits(t *testing.T) {
	e, cd, g := newGatedEnv(t)
	a, c := e.newFile(1), e.newFile(2)
	v0 := pattern(1, 0, 4*4096)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, v0) }) // fsynced
	v1 := pattern(2, 0, 512)
	if err := e.write(a, 0, v1); err != nil { // epoch E: copy-on-write, v0 quarantined
		t.Fatal(err)
	}
	// Enough elsewhere to start a background sync, which the gate holds.
	if err := e.write(c, 0, pattern(3, 0, 80<<10)); err != nil {
		t.Fatal(err)
	}
	if !e.s.inFlight() {
		t.Fatal("no background sync started")
	}
	if ran, waited := g.counts(); ran != 0 || waited != 0 {
		t.Fatalf("the gate let %d syncs through, %d waits", ran, waited)
	}
	// Rewrite another part of block 0 while the sync is in flight.
	v2 := pattern(4, 1024, 512)
	if err := e.write(a, 1024, v2); err != nil {
		t.Fatal(err)
	}
	ran, waited := g.counts()
	if waited != 1 || ran != 1 {
		t.Fatalf("the rewrite waited %d times for %d syncs, want 1 and 1", waited, ran)
	}
	// Power fails now: every write since the sync is lost. The sync the
	// rewrite waited for came after its data was written: v1 and v2 are
	// durable, and so are v0's other bytes.
	e.crash(cd.Crash(CrashLoseAll, 1))
	got, err := e.read(a, 0, 4*4096)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), v0...)
	copy(want, v1)
	copy(want[1024:], v2)
	if !bytes.Equal(got, want) {
		t.Fatalf("block 0 after the power failure: not the synced contents (zeros: %v)", bytes.Equal(got[:512], make([]byte, 512)))
	}
	if r := e.s.Recovery(); r.Checked != 1 || r.Intact != 1 {
		t.Fatalf("recovery %+v, want the rewritten block intact", r)
	}
	e.check(map[pram.Off]int64{a: 4 * 4096, c: 80 << 10})
}

// TestBackgroundSyncPowerLossInFlight: a power failure while a background
// sync is in flight, before it reached the disk, with records of both tags
// live: everything written since the last completed sync goes back to that
// sync's contents (or zeros), fsynced data is intact, and the next epoch
// starts beyond both tags.
func TestBackgroundSyncPowerLossInFlight(t *testing.T) {
	e, cd, g := newGatedEnv(t)
	a, b := e.newFile(1), e.newFile(2)
	va := pattern(1, 0, 64<<10)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, va) }) // fsynced
	// WriteThrough's own write started a sync, which its flush waited for.
	ran0, waited0 := g.counts()
	before := e.s.epoch()
	// Tag E: rewrites of a, then enough to start the sync.
	if err := e.write(a, 8192, pattern(2, 8192, 8192)); err != nil {
		t.Fatal(err)
	}
	if err := e.write(b, 0, pattern(3, 0, 64<<10)); err != nil {
		t.Fatal(err)
	}
	if !e.s.inFlight() || e.s.tag() != before+1 || e.s.epoch() != before {
		t.Fatalf("in flight %v, epoch %d, tag %d (epoch before %d)", e.s.inFlight(), e.s.epoch(), e.s.tag(), before)
	}
	// Tag E+1: other blocks of a, and b grows.
	if err := e.write(a, 32<<10, pattern(4, 32<<10, 8192)); err != nil {
		t.Fatal(err)
	}
	if err := e.write(b, 64<<10, pattern(5, 64<<10, 16<<10)); err != nil {
		t.Fatal(err)
	}
	if ran, waited := g.counts(); ran != ran0 || waited != waited0 {
		t.Fatalf("%d syncs ran, %d waits: the workload should not wait", ran-ran0, waited-waited0)
	}
	tags := map[uint64]int{}
	for _, seg := range []pram.Off{a, b} {
		if err := e.s.unsyncedOf(seg).walk(func(r rec) bool { tags[r[1]]++; return true }); err != nil {
			t.Fatal(err)
		}
	}
	if tags[before] == 0 || tags[before+1] == 0 {
		t.Fatalf("records by tag %v: want both %d and %d", tags, before, before+1)
	}
	e.check(map[pram.Off]int64{a: 64 << 10, b: 80 << 10})
	e.crash(cd.Crash(CrashLoseAll, 1))
	if got, err := e.read(a, 0, 64<<10); err != nil || !bytes.Equal(got, va) {
		t.Fatalf("fsynced file after the power failure: %v", err)
	}
	if got, err := e.read(b, 0, 80<<10); err != nil || !bytes.Equal(got, make([]byte, 80<<10)) {
		t.Fatalf("never synced file after the power failure: %v", err)
	}
	r := e.s.Recovery()
	if r.Restored != 4 || r.Unreadable != 0 || r.Damaged != 0 {
		t.Fatalf("recovery %+v: want a's 4 rewritten blocks restored", r)
	}
	if e.s.epochWord()&epochStarted != 0 || e.s.epoch() <= before+1 {
		t.Fatalf("after recovery the epoch word is %#x", e.s.epochWord())
	}
	e.check(map[pram.Off]int64{a: 64 << 10, b: 80 << 10})
}

// TestBackgroundSyncEndsEpoch: a background sync that completes makes what
// it covered stale (the quarantine it held is freed by the next write), and
// Fsync of a file whose records it covers needs no sync of its own.
func TestBackgroundSyncEndsEpoch(t *testing.T) {
	e, cd, g := newGatedEnv(t)
	a := e.newFile(1)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, pattern(1, 0, 128<<10)) })
	if err := e.write(a, 0, pattern(2, 0, 96<<10)); err != nil { // rewrites: quarantine, then a sync
		t.Fatal(err)
	}
	if !e.s.inFlight() || e.s.Stats().QuarantinedBlocks != 24 {
		t.Fatalf("in flight %v, stats %+v", e.s.inFlight(), e.s.Stats())
	}
	syncs, _, _, _ := cd.Stats()
	g.release()
	if err := e.flush(a); err != nil {
		t.Fatal(err)
	}
	if n, _, _, _ := cd.Stats(); n != syncs+1 {
		t.Fatalf("fsync made %d syncs of its own beside the background one", n-syncs-1)
	}
	if err := e.write(a, 200<<10, pattern(3, 200<<10, 4096)); err != nil { // tidies
		t.Fatal(err)
	}
	if st := e.s.Stats(); st.QuarantinedBlocks != 0 {
		t.Fatalf("quarantine not freed after the background sync: %+v", st)
	}
	e.check(map[pram.Off]int64{a: 204 << 10})
}

// TestBackgroundSyncFailure: a background sync that fails is retried at
// once by the next writer, and the failure reaches the next Fsync as EIO,
// once.
func TestBackgroundSyncFailure(t *testing.T) {
	md := NewMemDevice(16 << 20)
	var fail sync.Once
	failed := false
	o := Options{SyncBytes: 64 << 10}
	o.testSyncBG = func(sync func() error) error {
		err := sync()
		fail.Do(func() { failed, err = true, errors.New("injected EIO") })
		return err
	}
	e := newEnv(t, envOpts{blockSize: 4096, dev: md, o: o})
	a := e.newFile(1)
	if err := e.write(a, 0, pattern(1, 0, 80<<10)); err != nil {
		t.Fatal(err)
	}
	e.must(func(tx *pram.Tx) error { return e.s.settle(true) })
	if !failed {
		t.Fatal("no background sync ran")
	}
	if !e.logged("a background sync failed") {
		t.Fatalf("not logged: %q", e.logs)
	}
	if err := e.flush(a); !isErr(err, ErrIO) {
		t.Fatalf("fsync after a failed background sync: %v, want EIO", err)
	}
	if err := e.flush(a); err != nil {
		t.Fatalf("second fsync: %v", err)
	}
	if st := e.s.Stats(); st.IOErrors != 1 {
		t.Fatalf("stats %+v", st)
	}
	e.check(map[pram.Off]int64{a: 80 << 10})
}

// failedRetryEnv leaves a store whose background sync failed, and whose
// retry in the foreground failed too: no sync ended the epoch, and the
// sync-started bit stays set with no sync in flight. File a's block 0
// holds fsynced v0 on the disk and v1 (bytes [0, 512)) written since.
func failedRetryEnv(t *testing.T) (e *env, cd *CrashDevice, a, c pram.Off, v0, v1 []byte) {
	cd = NewCrashDevice(16 << 20)
	var failing atomic.Bool
	fd := NewFaultDevice(cd, InjectorFunc(func(op Op, off int64, n int) FaultKind {
		if op == OpSync && failing.Load() {
			return FaultEIO
		}
		return FaultNone
	}))
	e = newEnv(t, envOpts{blockSize: 4096, dev: fd, o: Options{SyncBytes: 64 << 10}})
	a, c = e.newFile(1), e.newFile(2)
	v0 = pattern(1, 0, 4*4096)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, v0) }) // fsynced
	failing.Store(true)
	v1 = pattern(2, 0, 512)
	if err := e.write(a, 0, v1); err != nil { // copy-on-write: v0's block quarantined
		t.Fatal(err)
	}
	if err := e.write(c, 0, pattern(3, 0, 80<<10)); err != nil { // starts a background sync
		t.Fatal(err)
	}
	if !e.s.inFlight() {
		t.Fatal("no background sync started")
	}
	if err := e.do(func(tx *pram.Tx) error { return e.s.settle(true) }); !isErr(err, ErrIO) {
		t.Fatalf("settling a failed sync whose retry fails: %v, want EIO", err)
	}
	if e.s.inFlight() || e.s.epochWord()&epochStarted == 0 {
		t.Fatalf("in flight %v, epoch word %#x: want the started bit left without a flight", e.s.inFlight(), e.s.epochWord())
	}
	failing.Store(false)
	return e, cd, a, c, v0, v1
}

// TestBackgroundSyncRetryFailsRewrite: after a failed sync and retry, a
// block rewritten since the last completed sync keeps the record that names
// its contents at that sync. Before, the next rewrite took the record for
// one of a past epoch and replaced it with one naming the never-synced copy,
// so a power failure lost the block's fsynced contents (read as zeros).
func TestBackgroundSyncRetryFailsRewrite(t *testing.T) {
	e, cd, a, c, v0, v1 := failedRetryEnv(t)
	v2 := pattern(4, 1024, 512)
	if err := e.write(a, 1024, v2); err != nil {
		t.Fatal(err)
	}
	e.crash(cd.Crash(CrashLoseAll, 1))
	got, err := e.read(a, 0, 4*4096)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), v0...)
	copy(want, v1)
	copy(want[1024:], v2)
	if !bytes.Equal(got, v0) && !bytes.Equal(got, want) {
		t.Fatalf("block 0 after the power failure: neither the fsynced nor the last contents (zeros: %v)", bytes.Equal(got[:512], make([]byte, 512)))
	}
	e.check(map[pram.Off]int64{a: 4 * 4096, c: 80 << 10})
}

// TestBackgroundSyncRetryFailsNextSync: after a failed sync and retry, the
// next sync that SyncBytes asks for covers the records of both tags (it
// runs in the foreground): a background one started then would have ended
// only the older tag, leaving records made before it live as if made after.
func TestBackgroundSyncRetryFailsNextSync(t *testing.T) {
	e, _, _, c, _, _ := failedRetryEnv(t)
	before := e.s.tag()
	if err := e.write(c, 80<<10, pattern(5, 80<<10, 80<<10)); err != nil {
		t.Fatal(err)
	}
	e.must(func(tx *pram.Tx) error { return e.s.settle(true) })
	if w := e.s.epochWord(); w&epochStarted != 0 || w <= before {
		t.Fatalf("after the next sync the epoch word is %#x, want an epoch past %d (the tag of the records made before it)", w, before)
	}
}

// TestSyncWrittenAfterFailedRetry: after a background sync failed and its
// foreground retry failed too, the blocks written before it are still not
// durable (records of both tags live). The failure is reported once, by the
// next SyncWritten; the SyncWritten after that (unmount's FlushAll, the
// fsync of a small file or a directory) used to return success without
// syncing the device, because the byte count it looks at had been moved to
// the failed sync, and a power failure then lost blocks it had promised
// durable (found by a review; Flush of the same file synced, as hasLive sees
// the records).
func TestSyncWrittenAfterFailedRetry(t *testing.T) {
	e, cd, _, c, _, _ := failedRetryEnv(t)
	if err := e.do(e.s.SyncWritten); !isErr(err, ErrIO) {
		t.Fatalf("first SyncWritten after the failed sync: %v, want the EIO reported once", err)
	}
	if err := e.do(e.s.SyncWritten); err != nil {
		t.Fatalf("second SyncWritten: %v", err)
	}
	e.crash(cd.Crash(CrashLoseAll, 1))
	got, err := e.read(c, 0, 80<<10)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern(3, 0, 80<<10)) {
		t.Fatalf("SyncWritten returned success, but after a power failure file c reads as zeros: %v (recovery %+v)",
			bytes.Equal(got, make([]byte, len(got))), e.s.Recovery())
	}
}
