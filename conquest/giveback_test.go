package conquest

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"conquest/diskstore"
	"conquest/pram"
)

// TestGiveBackAfterCrashCheck: a mount gives the disk image's free space
// back to the host (diskstore.Store.GiveBack) only once the check that
// damage or a crash makes due has passed: a damaged free map may list a
// file's blocks as free, and a punch before the check would zero data that
// fsck --repair keeps (an outside review saw it when the punch came inside
// diskstore.Open). Refused as damaged, or opened with a check due and no
// OnCrashCheck, or refused for a damaged orphan list, nothing is punched;
// checked clean, the space comes back.
func TestGiveBackAfterCrashCheck(t *testing.T) {
	dir := t.TempDir()
	p, disk := filepath.Join(dir, "fs"), filepath.Join(dir, "disk")
	must(t, Mkfs(p, disk, MkfsOptions{PramSize: 32 << 20, DiskSize: 128 << 20}))
	host := func() int64 {
		var st syscall.Stat_t
		must(t, syscall.Stat(disk, &st))
		return st.Blocks * 512
	}
	var checks []string
	open := func(check bool) (*FS, error) {
		o := Options{Logf: t.Logf}
		o.Disk.PunchFree = true
		if check {
			o.OnCrashCheck = func(msg string) { checks = append(checks, msg) }
		}
		return Open(p, disk, o)
	}
	fs, err := open(true)
	must(t, err)
	kept := pattern(6<<20, 3)
	makeFile(t, fs, "kept", kept)
	makeFile(t, fs, "gone", pattern(8<<20, 4))
	must(t, fs.Unlink(RootIno, "gone"))
	d, err := fs.Mkdir(RootIno, "d", 0o755, Cred{})
	must(t, err)
	must(t, fs.Close())
	before := host()

	// Damage met while mounted (a directory's data pointer) marks a check due.
	fs, err = open(true)
	must(t, err)
	if got := host(); got >= before-6<<20 {
		t.Fatalf("a clean open gave back %d bytes of the image's %d after an 8 MiB file was deleted", before-got, before)
	}
	before = host()
	must(t, fs.Unlink(RootIno, "kept"))
	makeFile(t, fs, "kept", kept) // its blocks were free: given back, then taken again
	makeFile(t, fs, "gone", pattern(8<<20, 5))
	must(t, fs.Unlink(RootIno, "gone"))
	in, err := fs.inode(d.Ino)
	must(t, err)
	data := in.data()
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iData, 1<<40) })
	if _, err := fs.Lookup(d.Ino, "x"); !errors.Is(err, ErrIO) {
		t.Fatalf("Lookup in a damaged directory = %v, want ErrIO", err)
	}
	must(t, fs.Close())
	before = host()

	// Refused as damaged: nothing punched.
	var cd *CrashDamageError
	if _, err := open(true); !errors.As(err, &cd) {
		t.Fatalf("open with damage = %v, want a CrashDamageError", err)
	}
	if got := host(); got != before {
		t.Fatalf("an open refused as damaged changed the image from %d to %d bytes", before, got)
	}
	// A check due and none made (no OnCrashCheck): nothing punched either.
	fs, err = open(false)
	must(t, err)
	if got := host(); got != before {
		t.Fatalf("an open with a check due and none made changed the image from %d to %d bytes", before, got)
	}
	in, err = fs.inode(d.Ino)
	must(t, err)
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iData, uint64(data)) }) // mended
	must(t, fs.Close())

	// Checked clean: the space comes back, and the file left reads the same.
	checks = nil
	fs, err = open(true)
	must(t, err)
	if len(checks) == 0 {
		t.Fatal("no check ran")
	}
	if got := host(); got >= before-6<<20 {
		t.Errorf("the open that checked clean gave back %d bytes of the image's %d after an 8 MiB file was deleted", before-got, before)
	}
	wantContent(t, fs, "/kept", kept)

	// A damaged orphan list refuses the mount after the check: nothing is
	// punched before that either (a second review).
	makeFile(t, fs, "gone", pattern(8<<20, 6))
	must(t, fs.Unlink(RootIno, "gone"))
	must(t, fs.Close())
	a, err := pram.Open(p) // damaged while closed: no check is due
	must(t, err)
	tx := a.Begin()
	tx.Set64(pram.RootOff(slotOrphans), a.Root(slotOrphans)^1<<44)
	tx.Commit()
	must(t, a.Close())
	before = host()
	if _, err := open(true); !errors.Is(err, ErrOrphanList) {
		t.Fatalf("open with a damaged orphan list = %v, want ErrOrphanList", err)
	}
	if got := host(); got != before {
		t.Fatalf("an open refused for its orphan list changed the image from %d to %d bytes", before, got)
	}

	// A free map whose count does not match its extents: GiveBack punches
	// nothing, and the mount is refused rather than allocate from it (a
	// review: one that went on handed out a live file's blocks), now and
	// at the next open, which checks in full.
	a, err = pram.Open(p)
	must(t, err)
	tx = a.Begin()
	tx.Set64(pram.RootOff(slotOrphans), a.Root(slotOrphans)^1<<44) // mended
	fm := pram.Off(a.Root(diskstore.RootFreeMap))
	tx.Set64(fm+24, a.U64(fm+24)+4) // the free map's count of free blocks
	tx.Commit()
	must(t, a.Close())
	if _, err := open(false); !errors.Is(err, diskstore.ErrCorrupt) || !strings.Contains(err.Error(), "fsck --repair") {
		t.Fatalf("open with a free map that does not add up = %v, want diskstore.ErrCorrupt naming fsck --repair", err)
	}
	if _, err := open(true); !errors.As(err, &cd) || !strings.Contains(err.Error(), "free map counts") {
		t.Fatalf("the open after it = %v, want a CrashDamageError naming the free map", err)
	}
	if got := host(); got != before {
		t.Fatalf("opens refused for the free map changed the image from %d to %d bytes", before, got)
	}
	// Repaired (as fsck --repair opens it: no check, nothing punched), the
	// next mount checks clean and gives the space back.
	fs, err = Open(p, disk, Options{Logf: t.Logf})
	must(t, err)
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	if len(rep.Remaining) > 0 {
		t.Fatalf("repair left %v", rep.Remaining)
	}
	must(t, fs.Close())
	fs, err = open(true)
	must(t, err)
	if got := host(); got >= before-6<<20 {
		t.Errorf("the open after the repair gave back %d bytes of the image's %d", before-got, before)
	}
	wantContent(t, fs, "/kept", kept)
	must(t, fs.Close())
}
