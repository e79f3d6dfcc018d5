package conquest

import (
	"fmt"
	"path/filepath"
	"testing"

	"conquest/diskstore"
	"conquest/pram"
)

// TestPowerLossKeepsSyncedFiles: a large file fsync'd, then deleted or
// overwritten (not fsync'd), then other files written, with the disk synced
// as they go (which ends the quarantine of copy-on-write's old blocks):
// after a power loss the arena is as of its last checkpoint, where the file
// still has its old blocks, so no other file may have reused them. The
// file reads back as it was fsync'd, and the check is clean.
func TestPowerLossKeepsSyncedFiles(t *testing.T) {
	for _, change := range []string{"delete", "overwrite", "truncate"} {
		t.Run(change, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "arena")
			dev := diskstore.NewCrashDevice(24 << 20)
			must(t, Mkfs(path, "", MkfsOptions{PramSize: 16 << 20, Device: dev, LargeFileThreshold: 64 << 10, DiskBlockSize: 4096}))
			var img *pram.CrashImage
			open := func(d diskstore.Device, wrap bool) *FS {
				o := Options{Logf: t.Logf, Device: d, Disk: diskstore.Options{SyncBytes: 256 << 10}}
				o.Arena.Interval = -1 // checkpoints at fsync only
				if wrap {
					o.Arena.WrapImage = func(f pram.ImageFile) pram.ImageFile {
						img = pram.NewCrashImage(f, pram.CrashLoseAll, nil)
						return img
					}
				}
				fs, err := Open(path, "", o)
				must(t, err)
				return fs
			}
			live := dev.Reopen()
			fs := open(live, true)
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
			img.PowerLoss(pram.CrashLoseAll, nil)
			must(t, fs.a.Abandon())
			must(t, pram.RemoveShadow(path, ""))
			fs = open(live.Crash(diskstore.CrashLoseAll, 1), false)
			defer fs.Close()
			if errs := fs.Check(); len(errs) > 0 {
				t.Fatalf("Check: %v", errs)
			}
			wantContent(t, fs, "/x", old)
		})
	}
}
