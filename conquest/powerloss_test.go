package conquest

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"conquest/diskstore"
	"conquest/pram"
)

// powerLossEnv is a file system for power-loss tests: a 16 MiB arena, whose
// image open wraps in a CrashImage (img) when asked, and a crash device of
// the given size (live); checkpoints are made at fsync only (and when the
// disk is full, see update).
type powerLossEnv struct {
	path string
	live *diskstore.CrashDevice
	img  *pram.CrashImage
	open func(d diskstore.Device, wrap bool) *FS
	// commit is Options.DiskCommit for the opens that follow (0: none).
	commit time.Duration
}

func newPowerLossEnv(t *testing.T, diskSize int64, logf func(string, ...any)) *powerLossEnv {
	t.Helper()
	e := &powerLossEnv{path: filepath.Join(t.TempDir(), "arena")}
	dev := diskstore.NewCrashDevice(diskSize)
	must(t, Mkfs(e.path, "", MkfsOptions{PramSize: 16 << 20, Device: dev, LargeFileThreshold: 64 << 10, DiskBlockSize: 4096}))
	e.open = func(d diskstore.Device, wrap bool) *FS {
		o := Options{Logf: logf, Device: d, Disk: diskstore.Options{SyncBytes: 256 << 10}, DiskCommit: e.commit}
		o.Arena.Interval = -1
		if wrap {
			o.Arena.WrapImage = func(f pram.ImageFile) pram.ImageFile {
				e.img = pram.NewCrashImage(f, pram.CrashLoseAll, nil)
				return e.img
			}
		}
		fs, err := Open(e.path, "", o)
		must(t, err)
		return fs
	}
	e.live = dev.Reopen()
	return e
}

// powerLoss fails the power under fs: the arena's changes since its last
// checkpoint and the disk's unsynced writes are lost. It opens the file
// system again (closed at the test's end) and checks it.
func (e *powerLossEnv) powerLoss(t *testing.T, fs *FS) *FS {
	t.Helper()
	fs.stopDiskCommit() // the power is gone: no tick may touch the arena
	e.img.PowerLoss(pram.CrashLoseAll, nil)
	must(t, fs.a.Abandon())
	must(t, pram.RemoveShadow(e.path, ""))
	fs = e.open(e.live.Crash(diskstore.CrashLoseAll, 1), false)
	t.Cleanup(func() { fs.Close() })
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check: %v", errs)
	}
	return fs
}

// TestPowerLossKeepsSyncedFiles: a large file fsync'd, then deleted or
// overwritten (not fsync'd), then other files written, with the disk synced
// as they go (which ends the quarantine of copy-on-write's old blocks):
// after a power loss the arena is as of its last checkpoint, where the file
// still has its old blocks, so no other file may have reused them. The
// file reads back as it was fsync'd, and the check is clean.
func TestPowerLossKeepsSyncedFiles(t *testing.T) {
	for _, change := range []string{"delete", "overwrite", "truncate"} {
		t.Run(change, func(t *testing.T) {
			e := newPowerLossEnv(t, 24<<20, t.Logf)
			fs := e.open(e.live, true)
			old := pattern(1<<20, 1)
			x := makeFile(t, fs, "x", old)
			must(t, fs.Fsync(x, false))
			switch change {
			case "delete":
				must(t, fs.Unlink(RootIno, "x"))
				fs.Forget(x, 1)
			case "overwrite":
				h := openRW(t, fs, x, O_RDWR)
				writeFile(t, fs, x, h, 0, pattern(1<<20, 2))
				fs.Release(x, h)
			case "truncate":
				_, err := fs.SetAttr(x, SetAttr{Valid: SetSize, Size: 0}, user)
				must(t, err)
			}
			for i := range 12 {
				makeFile(t, fs, fmt.Sprint("y", i), pattern(1<<20, byte(10+i)))
			}
			// The power fails: the arena's changes since its last
			// checkpoint and the disk's unsynced writes are lost.
			fs = e.powerLoss(t, fs)
			wantContent(t, fs, "/x", old)
		})
	}
}

// TestFullDiskCheckpointsBeforeReuse: on a disk whose only free blocks are
// those of a file deleted since the last checkpoint, a write does not take
// them at once (a power loss would bring the file back with another's
// bytes in its blocks, read as EIO): it makes a checkpoint first, which
// makes the delete durable, and then succeeds. After a power loss the
// deleted file stays deleted and everything reads without error.
func TestFullDiskCheckpointsBeforeReuse(t *testing.T) {
	var logged strings.Builder
	var logMu sync.Mutex
	e := newPowerLossEnv(t, 8<<20, func(f string, args ...any) {
		logMu.Lock()
		fmt.Fprintf(&logged, f+"\n", args...)
		logMu.Unlock()
		t.Logf(f, args...)
	})
	fs := e.open(e.live, true)
	x := makeFile(t, fs, "x", pattern(5<<20, 1))
	must(t, fs.Fsync(x, false))
	ckpts := fs.a.Shadow().Checkpoints
	must(t, fs.Unlink(RootIno, "x"))
	fs.Forget(x, 1)
	if fs.ds.HeldBlocks() == 0 {
		t.Fatal("the deleted file's blocks are not held for the checkpoint")
	}
	makeFile(t, fs, "y", pattern(5<<20, 2)) // needs x's blocks
	if fs.a.Shadow().Checkpoints == ckpts {
		t.Error("the disk filled up without a checkpoint")
	}
	logMu.Lock()
	if strings.Contains(logged.String(), "reusing") {
		t.Errorf("held blocks were reused without a checkpoint:\n%s", logged.String())
	}
	logMu.Unlock()

	fs = e.powerLoss(t, fs)
	if _, err := fs.Lookup(RootIno, "x"); err != ErrNotFound {
		t.Fatalf("the deleted file after the power loss: %v", err)
	}
	if at, err := fs.Lookup(RootIno, "y"); err == nil {
		h := openRW(t, fs, at.Ino, 0)
		readFile(t, fs, at.Ino, h) // no EIO: its blocks were its own
		fs.Release(at.Ino, h)
	}
}

// TestPowerLossZeroedBlockRewritten (found by review; a block written
// with zeros is now unmapped): a block of an fsync'd large file is
// overwritten with a whole block of zeros (diskstore kept the block mapped
// with checksum 0), then with new data. writeBlocks took "mapped, checksum
// 0" for "holds no data" and wrote the new data in place, over the disk block
// that the last durable checkpoint still gives to the file with the fsync'd
// contents' checksum. A power loss before the next checkpoint brings the arena
// back to that checkpoint: the block must read as fsync'd, but its disk block
// was overwritten (no unsynced record exists in that checkpoint to repair it),
// so the read failed with EIO and the fsync'd bytes were lost.
func TestPowerLossZeroedBlockRewritten(t *testing.T) {
	e := newPowerLossEnv(t, 24<<20, t.Logf)
	fs := e.open(e.live, true)
	old := pattern(1<<20, 1)
	x := makeFile(t, fs, "x", old)
	must(t, fs.Fsync(x, false)) // device synced, checkpoint made
	h := openRW(t, fs, x, O_RDWR)
	const off = 16 * 4096 // one 4 KiB disk block, aligned
	writeFile(t, fs, x, h, off, make([]byte, 4096))
	writeFile(t, fs, x, h, off, pattern(4096, 7))
	fs.Release(x, h)
	// Another file's writes sync the disk in the background (SyncBytes).
	makeFile(t, fs, "y", pattern(1<<20, 3))
	// No fsync, no checkpoint: the power fails.
	fs = e.powerLoss(t, fs)
	wantContent(t, fs, "/x", old)
}

// TestPowerLossAbortedAppendAfterSync (found by review; Store.Abort now
// syncs the appends it undoes): one write(2) appends in place to the partial
// last block of a large file (that block was written since the last disk
// sync, so it takes an intent instead of copy-on-write), goes on past
// SyncBytes so that a disk sync lands inside the same transaction (made by
// the writer here, at a known point; a background sync that lands in time
// does the same), ending the epoch: the block's unsynced record is now
// stale. Then it fails: a pwrite further on gets ENOSPC (the image's host
// file system is full), a plain ErrNoSpace, so no checkpoint-and-retry
// follows (the write is then tried again in smaller pieces, and stores
// what fits below the full part). Store.Abort rolls the arena back and revertInPlace writes the
// block back without the append; it did not sync the disk. An fsync of a
// directory then makes a checkpoint (no disk sync needed), and the power
// fails: the arena says the block holds the file's 1000 bytes and has no
// live record, while the disk still has the synced block with the append.
// The file, which read fine before the power loss, then failed its checksum
// (Check reported it, reads returned EIO).
func TestPowerLossAbortedAppendAfterSync(t *testing.T) {
	e := newPowerLossEnv(t, 8<<20, t.Logf)
	fault := diskstore.NewFaultDevice(e.live, nil)
	o := Options{Logf: t.Logf, Device: fault, Disk: diskstore.Options{SyncBytes: 256 << 10, ForegroundSync: true}}
	o.Arena.Interval = -1
	o.Arena.WrapImage = func(f pram.ImageFile) pram.ImageFile {
		e.img = pram.NewCrashImage(f, pram.CrashLoseAll, nil)
		return e.img
	}
	fs, err := Open(e.path, "", o)
	must(t, err)
	const synced = 17 * 4096
	want := pattern(synced+1000, 1)
	x := makeFile(t, fs, "x", want[:synced])
	must(t, fs.Fsync(x, false)) // disk synced, checkpoint
	h := openRW(t, fs, x, O_RDWR)
	writeFile(t, fs, x, h, synced, want[synced:]) // new block 17: live record
	syncs := fs.ds.Stats().Syncs
	// The host file system is full from 3 MiB into the image on.
	fault.SetInjector(diskstore.InRange(diskstore.OpWrite, 3<<20, 8<<20, diskstore.FaultNoSpace))
	// The whole write fails first (its Tx aborted); then it stores what
	// fits below the fault in smaller Txs and returns short.
	extra := pattern(4<<20, 2)
	n, err := fs.Write(x, h, synced+1000, extra, false)
	if err != ErrNoSpace || n >= len(extra) {
		t.Fatalf("write: %d, %v", n, err)
	}
	fault.SetInjector(nil)
	if fs.ds.Stats().Syncs == syncs {
		t.Fatal("no disk sync landed during the write")
	}
	wantContent(t, fs, "/x", append(want[:len(want):len(want)], extra[:n]...)) // fine so far
	must(t, fs.FsyncDir(RootIno))                                              // a checkpoint, no disk sync
	fs.Release(x, h)
	fs = e.powerLoss(t, fs)
	// The fsync'd bytes and the 1000 before the write are intact; each
	// block of what the write stored holds it or zeros (not synced).
	got := readAll(t, fs, lookup(t, fs, RootIno, "x").Ino)
	if len(got) != len(want)+n || !bytes.Equal(got[:len(want)], want) {
		t.Fatalf("/x after the power loss: %d bytes, want %d starting with the %d written before the failed write", len(got), len(want)+n, len(want))
	}
	for b := len(want) / 4096 * 4096; b < len(got); b += 4096 {
		lo, hi := max(b, len(want)), min(b+4096, len(got))
		if seg := got[lo:hi]; !bytes.Equal(seg, extra[lo-len(want):hi-len(want)]) && len(bytes.Trim(seg, "\x00")) != 0 {
			t.Fatalf("/x after the power loss: bytes [%d, %d) are neither written nor zeros", lo, hi)
		}
	}
}

// TestPowerLossInPlaceAppendAfterCheckpoint: a large file written without
// fsync is in a checkpoint (a periodic one: the disk is not synced) whose disk
// data reached the disk; an append into its last block after that
// checkpoint must not go in place, or a power loss brings back the
// checkpoint with a block that fails its checksum, and recovery zeroes the
// data the checkpoint had (found by a crash review: bytes 98,304-100,000
// read as zeros, logged as "did not reach the disk").
func TestPowerLossInPlaceAppendAfterCheckpoint(t *testing.T) {
	e := newPowerLossEnv(t, 24<<20, t.Logf)
	fs := e.open(e.live, true)
	data := pattern(100000, 3)
	x := makeFile(t, fs, "x", data)
	must(t, fs.syncArena()) // a checkpoint (the periodic kind); the disk is not synced
	h := openRW(t, fs, x, O_RDWR)
	writeFile(t, fs, x, h, 100000, pattern(300, 9)) // an append into the last block
	fs.Release(x, h)
	// The power fails: the arena goes back to the checkpoint; the disk
	// happened to keep every write.
	e.img.PowerLoss(pram.CrashLoseAll, nil)
	must(t, fs.a.Abandon())
	must(t, pram.RemoveShadow(e.path, ""))
	fs = e.open(e.live.Reopen(), false)
	t.Cleanup(func() { fs.Close() })
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check: %v", errs)
	}
	in, err := fs.Lookup(RootIno, "x")
	must(t, err)
	h = openRW(t, fs, in.Ino, 0)
	defer fs.Release(in.Ino, h)
	if got := readFile(t, fs, in.Ino, h); !bytes.Equal(got, data) {
		i := 0
		for i < len(got) && i < len(data) && got[i] == data[i] {
			i++
		}
		t.Fatalf("x after the power loss: %d bytes, first difference at %d", len(got), i)
	}
}

// TestPowerLossFsyncOfAnotherFileKeepsDiskData: a large file written
// without fsync, then an fsync of something else (a small file, a
// directory, a large file with nothing unsynced): every fsync makes every
// change durable (README, "Durability contract"), so after a power loss that
// drops the disk's unsynced writes the large file reads as written. Found by
// a crash campaign (power loss over a file system that drops unsynced
// writes): the fsync of a small file only checkpointed the arena, whose
// checkpoint then held the large file's new size over blocks the disk had
// not synced, and recovery zeroed them (bytes 65,536-98,303 of a 117,411-byte
// file read as zeros).
func TestPowerLossFsyncOfAnotherFileKeepsDiskData(t *testing.T) {
	for _, other := range []string{"small", "dir", "large"} {
		t.Run(other, func(t *testing.T) {
			e := newPowerLossEnv(t, 24<<20, t.Logf)
			fs := e.open(e.live, true)
			var o Ino
			switch other {
			case "small":
				o = makeFile(t, fs, "o", []byte("hello"))
			case "dir":
				o = mkdir(t, fs, RootIno, "o").Ino
			case "large":
				o = makeFile(t, fs, "o", pattern(100000, 7))
				must(t, fs.Fsync(o, false))
			}
			data := pattern(150000, 3)
			x := makeFile(t, fs, "x", data) // not fsync'd
			if !isLarge(t, fs, x) {
				t.Fatal("x is not on the disk")
			}
			if other == "dir" {
				must(t, fs.FsyncDir(o))
			} else {
				must(t, fs.Fsync(o, false))
			}
			fs = e.powerLoss(t, fs)
			wantContent(t, fs, "/x", data)
		})
	}
}
