package conquest

import (
	"testing"
	"time"
)

// diskSettled reports whether the store has nothing unsynced, in flight or
// quarantined (what the periodic disk commit leaves on an idle mount).
func diskSettled(fs *FS) bool {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	return !fs.ds.TickPending()
}

// tickUntilSettled runs the periodic disk commit's ticks until it has
// nothing left to do.
func tickUntilSettled(t *testing.T, fs *FS) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !diskSettled(fs) {
		if time.Now().After(deadline) {
			t.Fatal("the disk commit never settled")
		}
		fs.diskTick()
		time.Sleep(time.Millisecond)
	}
}

// TestPowerLossAfterDiskCommit: a large file written and never fsynced,
// a rewrite of an fsynced one, then the disk commit's ticks and a periodic
// checkpoint of the arena (no fsync anywhere): a power loss keeps both.
// Before the disk commit, such writes stayed unsynced for as long as the
// file system was idle while the checkpoint made the arena point at them,
// and recovery brought them back as zeros.
func TestPowerLossAfterDiskCommit(t *testing.T) {
	e := newPowerLossEnv(t, 24<<20, t.Logf)
	fs := e.open(e.live, true)
	old := pattern(300000, 1)
	y := makeFile(t, fs, "y", old)
	must(t, fs.Fsync(y, false))
	h := openRW(t, fs, y, O_RDWR)
	patch := pattern(70000, 9)
	writeFile(t, fs, y, h, 100000, patch)
	fs.Release(y, h)
	data := pattern(150000, 3)
	x := makeFile(t, fs, "x", data)
	if !isLarge(t, fs, x) || !isLarge(t, fs, y) {
		t.Fatal("the files are not on the disk")
	}
	if diskSettled(fs) {
		t.Fatal("nothing pending before the ticks")
	}
	tickUntilSettled(t, fs)
	must(t, fs.a.Sync()) // the periodic checkpoint: the arena alone
	fs = e.powerLoss(t, fs)
	wantContent(t, fs, "/x", data)
	copy(old[100000:], patch)
	wantContent(t, fs, "/y", old)
}

// TestDiskCommitTicker: Open with DiskCommit starts the ticker, which syncs
// what was written and frees copy-on-write's old blocks on an idle file
// system by itself; Close stops it.
func TestDiskCommitTicker(t *testing.T) {
	e := newPowerLossEnv(t, 24<<20, t.Logf)
	e.commit = 5 * time.Millisecond
	fs := e.open(e.live, true)
	y := makeFile(t, fs, "y", pattern(300000, 1))
	must(t, fs.Fsync(y, false))
	h := openRW(t, fs, y, O_RDWR)
	writeFile(t, fs, y, h, 0, pattern(300000, 2))
	fs.Release(y, h)
	data := pattern(200000, 3)
	makeFile(t, fs, "x", data)
	deadline := time.Now().Add(10 * time.Second)
	for !diskSettled(fs) {
		if time.Now().After(deadline) {
			fs.mu.RLock()
			st := fs.ds.Stats()
			fs.mu.RUnlock()
			t.Fatalf("the ticker left the disk unsettled: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	fs.mu.RLock()
	st := fs.ds.Stats()
	fs.mu.RUnlock()
	if st.UnsyncedBytes != 0 || st.QuarantinedBlocks != 0 {
		t.Fatalf("settled with %d unsynced bytes and %d quarantined blocks", st.UnsyncedBytes, st.QuarantinedBlocks)
	}
	must(t, fs.a.Sync())
	e.commit = 0
	fs = e.powerLoss(t, fs)
	wantContent(t, fs, "/x", data)
	wantContent(t, fs, "/y", pattern(300000, 2))
}

// TestSetCommit: SetCommit changes the period of the running disk commit
// (a remount's commit=): a file queued for a commit an hour away moves
// within moments once the interval is 20 ms; a non-positive interval is
// refused, and a closed file system takes the call without blocking.
func TestSetCommit(t *testing.T) {
	fs, _ := newMoveFS(t, fsOpt{})
	x := makeFile(t, fs, "x", pattern(100<<10, 4))
	if !isQueued(fs, x) {
		t.Fatal("not queued")
	}
	mustErr(t, fs.SetCommit(0), ErrInvalid)
	mustErr(t, fs.SetCommit(time.Nanosecond), ErrInvalid)
	must(t, fs.SetCommit(20*time.Millisecond))
	for deadline := time.Now().Add(10 * time.Second); !isLarge(t, fs, x); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not moved 10 s after the interval became 20 ms")
		}
	}
	wantContent(t, fs, "/x", pattern(100<<10, 4))
	fs.stopDiskCommit()
	done := make(chan error, 1)
	go func() { done <- fs.SetCommit(time.Second) }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("SetCommit blocked after the commit stopped")
	}
}
