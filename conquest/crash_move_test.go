package conquest

import (
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"conquest/diskstore"
	"conquest/internal/racetest"
)

// TestCrashDuringMoveBatch: the disk commit's batch move (moveQueued: the
// files' data copied out, written and synced without a transaction, then
// each file switched to its blocks in a transaction of its own) crashed at
// every journaled store, with the disk losing, keeping in part, reordering
// or tearing its unsynced writes at the same instant. After the reopen
// (with the check of a crash of the whole system), Check is clean, every
// file has its contents and its names, each queued file is in the arena or
// on the disk (never a mix), and the files left in the arena move at the
// next batch. The batch holds files that no longer need it (cut below the
// threshold, unlinked), a hard-linked file, and a large file that was on
// the disk already. It runs with the default journal and with one of 32
// KiB.
// With the device sync of the staged writes taken out (WriteStaged), a
// crash after a file's switch finds its blocks failing their checksums
// (seen in both variants).
func TestCrashDuringMoveBatch(t *testing.T) {
	for _, tc := range []struct {
		name       string
		journalLen uint64
	}{
		{"one batch", 0},
		{"small journal", 32 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) { testCrashDuringMoveBatch(t, tc.journalLen) })
	}
}

func testCrashDuringMoveBatch(t *testing.T, journalLen uint64) {
	seed := int64(time.Now().UnixNano() & 0xffffffff)
	if s := os.Getenv("CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewSource(seed))

	dir := t.TempDir()
	P, R := filepath.Join(dir, "p"), filepath.Join(dir, "r")
	pdev := diskstore.NewCrashDevice(8 << 20)
	const threshold = 16 << 10 // moveCap 32 KiB
	must(t, Mkfs(P, "", MkfsOptions{PramSize: 8 << 20, JournalLen: journalLen, Device: pdev,
		LargeFileThreshold: threshold, DiskBlockSize: 4096}))
	opts := Options{Logf: func(string, ...any) {}, DiskCommit: time.Hour, // ticked by hand
		Disk: diskstore.Options{ForegroundSync: true}}
	open := func(path string, dev diskstore.Device) *FS {
		t.Helper()
		fs, err := Open(path, "", withDevice(opts, dev))
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		return fs
	}

	// P: files above the threshold in the arena, as a crash leaves them
	// (unqueued), beside files the batch must leave alone.
	fs := open(P, pdev)
	var names []string
	for i := range 6 + r.Intn(4) {
		name := "q" + strconv.Itoa(i)
		makeFile(t, fs, name, pattern(threshold+1+r.Intn(threshold-1), byte(i+1)))
		names = append(names, name)
		if r.Intn(2) == 0 {
			ino, err := resolve(fs, name)
			must(t, err)
			must(t, fs.Fsync(ino, false))
		}
	}
	cut := makeFile(t, fs, "cut", pattern(24<<10, 20))
	makeFile(t, fs, "gone", pattern(24<<10, 21))
	linked := makeFile(t, fs, "linked", pattern(20<<10, 22))
	_, err := fs.Link(linked, RootIno, "linked2")
	must(t, err)
	big := makeFile(t, fs, "big", pattern(100<<10, 23)) // past moveCap: moved at the write
	makeFile(t, fs, "small", pattern(3000, 24))
	if !isLarge(t, fs, big) || isLarge(t, fs, linked) {
		t.Fatal("setup: big is not on the disk, or linked is")
	}
	fs.mu.Lock()
	clear(fs.moving) // as a crash would: Close would move them
	fs.mu.Unlock()
	must(t, fs.Close())
	pdev = pdev.Reopen()
	img := readImage(t, P)

	// queue opens every file above the threshold (findMove queues them),
	// then cuts one below it and unlinks another: stale queue entries.
	queue := func(fs *FS) {
		t.Helper()
		for _, name := range append(slices.Clone(names), "cut", "gone", "linked") {
			ino, err := resolve(fs, name)
			must(t, err)
			h, err := fs.Open(ino, 0) // O_RDONLY
			must(t, err)
			fs.Release(ino, h)
		}
		_, err := fs.SetAttr(cut, SetAttr{Valid: SetSize, Size: 5000}, user)
		must(t, err)
		must(t, fs.Unlink(RootIno, "gone"))
	}

	// The clean run: count the batch's stores.
	restoreImage(t, R, img)
	fs = open(R, pdev.Reopen())
	queue(fs)
	want := snapshot(t, fs)
	k := countStores(fs, fs.moveQueued)
	for _, name := range append(slices.Clone(names), "linked") {
		ino, err := resolve(fs, name)
		must(t, err)
		if !isLarge(t, fs, ino) {
			t.Fatalf("clean run: %s did not move", name)
		}
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("clean run: Check: %v", errs)
	}
	if !sameFiles(want, snapshot(t, fs)) {
		t.Fatal("clean run: the move changed the tree")
	}
	must(t, fs.Close())
	if k == 0 {
		t.Fatal("the batch made no store")
	}

	points := 40
	if racetest.Reduced(t) {
		points = 16
	}
	ns := make([]int, 0, points)
	for n := 1; n <= k; n++ {
		if k <= points || n <= points/4 || r.Intn(k) < points/2 || n == k {
			ns = append(ns, n)
		}
	}
	moved := 0
	for _, n := range ns {
		restoreImage(t, R, img)
		dev := pdev.Reopen()
		fs := open(R, dev)
		queue(fs)
		if !crashDuring(fs, n, fs.moveQueued) {
			t.Fatalf("no crash at store %d of %d", n, k)
		}
		mode := diskstore.CrashMode(r.Intn(3))
		markCheckDue(t, R)
		checked := false
		o := opts
		o.OnCrashCheck = func(string) { checked = true }
		fs, err := Open(R, "", withDevice(o, dev.Crash(mode, uint64(r.Int63()))))
		if err != nil {
			t.Fatalf("crash at store %d/%d (mode %d): open: %v", n, k, mode, err)
		}
		if !checked {
			t.Fatalf("crash at store %d/%d: Open did not run the check after a system crash", n, k)
		}
		if errs := fs.Check(); len(errs) > 0 {
			t.Fatalf("crash at store %d/%d (mode %d): Check: %v", n, k, mode, errs)
		}
		if got := snapshot(t, fs); !sameFiles(want, got) {
			t.Fatalf("crash at store %d/%d (mode %d): the tree differs from before the batch:\n%s", n, k, mode, diffSnap(want, got))
		}
		// What stayed in the arena moves at the next batch.
		for _, name := range append(slices.Clone(names), "linked") {
			ino, err := resolve(fs, name)
			must(t, err)
			if isLarge(t, fs, ino) {
				moved++
			}
			h, err := fs.Open(ino, 0) // O_RDONLY
			must(t, err)
			fs.Release(ino, h)
		}
		fs.moveQueued()
		for _, name := range append(slices.Clone(names), "linked") {
			ino, err := resolve(fs, name)
			must(t, err)
			if !isLarge(t, fs, ino) {
				t.Fatalf("crash at store %d/%d: %s did not move at the batch after the reopen", n, k, name)
			}
		}
		if errs := fs.Check(); len(errs) > 0 {
			t.Fatalf("crash at store %d/%d: Check after the next batch: %v", n, k, errs)
		}
		if got := snapshot(t, fs); !sameFiles(want, got) {
			t.Fatalf("crash at store %d/%d: the next batch changed the tree:\n%s", n, k, diffSnap(want, got))
		}
		must(t, fs.a.Abandon())
	}
	t.Logf("%d stores, %d crashes, %d files found on the disk after them", k, len(ns), moved)
}

// sameFiles reports whether a and b have the same names, each with the
// same inode, type, links and contents; block counts may differ (a file
// moved to the disk counts its disk blocks).
func sameFiles(a, b map[string]snapEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok {
			return false
		}
		v.Blocks, w.Blocks = 0, 0
		if v != w {
			return false
		}
	}
	return true
}
