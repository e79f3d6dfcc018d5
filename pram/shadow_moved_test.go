package pram

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/internal/loopdev"
	"conquest/internal/reaper"
)

// moveShadow renames the RAM copy at from, and its record, to to: what a
// change of the image file system's device number does to the copy's name
// as Open computes it.
func moveShadow(t *testing.T, from, to string) {
	t.Helper()
	if _, err := os.Stat(from + imageSuffix); err != nil {
		t.Fatalf("the RAM copy has no record of its image: %v", err)
	}
	must(t, os.Rename(from, to))
	must(t, os.Rename(from+imageSuffix, to+imageSuffix))
}

// commitString commits s at the start of the heap.
func commitString(a *Arena, s string) {
	tx := a.Begin()
	tx.SetBytes(a.Geometry().HeapOff, []byte(s))
	tx.Commit()
}

func heapString(a *Arena, n int) string { return string(a.View(a.Geometry().HeapOff, uint64(n))) }

// awayName is the name a RAM copy (at name, of the arena a) would have had
// if the image's file system had had another device number (ffff) when
// it was made.
func awayName(name string, a *Arena) string {
	return filepath.Join(filepath.Dir(name), fmt.Sprintf("%x-ffff-1.arena", a.Geometry().UUID))
}

// copyImage writes a copy of the file at from to to: another file, with
// another inode number.
func copyImage(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, b, 0o600))
}

// renameAndCopy renames the image at path to path+suffix and puts a copy
// of it at path; it returns the new name.
func renameAndCopy(t *testing.T, path, suffix string) string {
	t.Helper()
	must(t, os.Rename(path, path+suffix))
	copyImage(t, path+suffix, path)
	return path + suffix
}

// wantCopy checks whether the open arena a reused a RAM copy (reused) and,
// accordingly, holds or lacks the change s committed before a crash.
func wantCopy(t *testing.T, a *Arena, what, s string, reused bool) {
	t.Helper()
	info := a.Shadow()
	if got := heapString(a, len(s)); info.Reused != reused || (got == s) != reused {
		t.Errorf("%s: reused %v, reads %q; want reused %v (change %q)", what, info.Reused, got, reused, s)
	}
}

// TestShadowAfterDeviceChange (found by an outside review): after a crash
// of the daemon, the image's file system was mounted again and came back
// with another device number (a loop device, a FUSE file system). The RAM
// copy, named after the old number, was not found: the next Open started
// from the image's last checkpoint, losing what the copy held, and left
// the copy behind. It is now found by its record of the image's path.
func TestShadowAfterDeviceChange(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	const s = "committed, never checkpointed"
	commitString(a, s)
	name := a.Shadow().Path
	must(t, a.Abandon())
	old := awayName(name, a)
	moveShadow(t, name, old)

	b := openShadowed(t, path, OpenOptions{})
	if info := b.Shadow(); !info.Reused || info.Path != name {
		t.Errorf("after the device change: %+v; want the RAM copy reused as %s", info, name)
	}
	if got := heapString(b, len(s)); got != s {
		t.Errorf("a change committed before the crash reads %q", got)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the RAM copy under its old name is still there: %v", err)
	}
	must(t, b.Close())
	if ms, _ := filepath.Glob(filepath.Join(filepath.Dir(name), fmt.Sprintf("%x-*", a.Geometry().UUID))); len(ms) != 0 {
		t.Errorf("Close left %v", ms)
	}
}

// ext4Dir mounts a new ext4 on a loop device and returns its root: a
// second disk file system, with its own device number, for copies of an
// image. Unmounted (and the device detached) in the test's cleanup.
func ext4Dir(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4")
	}
	dev := loopdev.New(t, 64<<20)
	if out, err := exec.Command("mkfs.ext4", "-q", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	dir := t.TempDir()
	reaper.Mount(dir)
	if out, err := exec.Command("mount", dev, dir).CombinedOutput(); err != nil {
		t.Skipf("mounting an ext4: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			// An arena a failed test left open: detached now, gone
			// (and the loop device with it) when the process ends.
			t.Errorf("umount %s: %v: %s", dir, err, out)
			exec.Command("umount", "-l", dir).Run()
		}
	})
	return dir
}

// TestShadowOfCopyUnderSameName: a copy of an image (same UUID) on a file
// system that now has the device and inode numbers the original's had
// finds the original's RAM copy under its own name. It must not take it
// (the original's changes would become the copy's, and be lost to the
// original): the copy is moved aside, and the original takes it back.
func TestShadowOfCopyUnderSameName(t *testing.T) {
	path := filepath.Join(ext4Dir(t), "arena")
	a0, err := Format(path, Options{Size: 4 << 20})
	must(t, err)
	must(t, a0.Close())
	dup := filepath.Join(t.TempDir(), "copy") // another file system
	copyImage(t, path, dup)

	a := openShadowed(t, path, OpenOptions{})
	const s = "the original's change"
	commitString(a, s)
	name := a.Shadow().Path
	must(t, a.Abandon())
	dupName, err := ShadowPath(dup, "")
	must(t, err)
	moveShadow(t, name, dupName)

	c := openShadowed(t, dup, OpenOptions{})
	wantCopy(t, c, "the copy", s, false)
	must(t, c.Close())
	o := openShadowed(t, path, OpenOptions{})
	wantCopy(t, o, "the original", s, true)
	must(t, o.Close())
}

// TestShadowRenamedImageCopyInPlace (found by review of the first
// version): after a crash, the image is renamed and a copy of it put at
// its old path, on the same file system. The RAM copy under the image's
// own numbers, whose record now leads to the copy, is still the image's:
// a file on the same file system never had its numbers. The first version
// moved it aside, and the copy then took it.
func TestShadowRenamedImageCopyInPlace(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	const s = "the renamed image's change"
	commitString(a, s)
	must(t, a.Abandon())
	renamed := renameAndCopy(t, path, ".orig")
	o := openShadowed(t, renamed, OpenOptions{})
	wantCopy(t, o, "the renamed image", s, true)
	must(t, o.Close())
	c := openShadowed(t, path, OpenOptions{})
	wantCopy(t, c, "the copy", s, false)
	must(t, c.Close())
}

// TestShadowLiveCopyNotTaken (found by review of the first version): while
// the image is open, it is renamed and a copy put at its old path; opening
// the copy found the live RAM copy by its record and took it: two arenas
// in one mapping. A copy named with this file system's own device number,
// or locked by a live process, is never taken.
func TestShadowLiveCopyNotTaken(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	const s = "the live arena's change"
	commitString(a, s)
	live := a.Shadow().Path
	renameAndCopy(t, path, ".orig")
	c := openShadowed(t, path, OpenOptions{})
	wantCopy(t, c, "the copy", s, false)
	must(t, c.Close())
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live RAM copy: %v", err)
	}
	if got := heapString(a, len(s)); got != s {
		t.Errorf("the live arena reads %q", got)
	}
	must(t, a.Close())
}

// TestShadowRecordNamesFIFO (found by review of the first version): a
// record whose path is now a FIFO hung the open, which waited for a
// writer while it held the image's lock.
func TestShadowRecordNamesFIFO(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	const s = "kept"
	commitString(a, s)
	must(t, a.Abandon())
	renamed := path + ".2"
	must(t, os.Rename(path, renamed))
	must(t, unix.Mkfifo(path, 0o600))
	done := make(chan *Arena, 1)
	go func() {
		b, err := OpenWith(renamed, OpenOptions{Interval: -1, Logf: t.Logf})
		if err != nil {
			t.Error(err)
		}
		done <- b
	}()
	select {
	case b := <-done:
		if b != nil {
			if got := heapString(b, len(s)); got != s {
				t.Errorf("after the crash: %q", got)
			}
			must(t, b.Close())
		}
	case <-time.After(20 * time.Second):
		// Let the open go on (a writer ends the wait) before failing.
		if w, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatal("the open hung on the FIFO its RAM copy's record names")
	}
}

// TestShadowOfOtherArenaKept: another arena's RAM copy under this image's
// device and inode numbers (its file system had them before) is not
// removed as a leftover of an arena formatted here before: its record
// names its own image, which finds it later.
func TestShadowOfOtherArenaKept(t *testing.T) {
	path, other := formatClosed(t, 4<<20), formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	const s = "kept for its own image"
	commitString(a, s)
	name := a.Shadow().Path
	must(t, a.Abandon())
	otherName, err := ShadowPath(other, "")
	must(t, err)
	// Same key as other's copy, a's UUID.
	key := filepath.Base(otherName)[2*16+1:]
	moved := filepath.Join(filepath.Dir(name), fmt.Sprintf("%x-%s", a.Geometry().UUID, key))
	moveShadow(t, name, moved)

	c := openShadowed(t, other, OpenOptions{})
	must(t, c.Close())
	if _, err := os.Stat(moved); err != nil {
		t.Fatalf("opening another image removed this arena's RAM copy: %v", err)
	}
	// Its own image finds it once its file system has another number (the
	// name's number is this file system's, which a's image never had).
	moveShadow(t, moved, awayName(name, a))
	o := openShadowed(t, path, OpenOptions{})
	if got := heapString(o, len(s)); got != s || !o.Shadow().Reused {
		t.Errorf("after the other image's open: %q, %+v", got, o.Shadow())
	}
	must(t, o.Close())
}

// TestShadowCopyAtRecordedPathAfterDeviceChange (found by a second review):
// while the image's file system is away, another one holding an older copy
// of the image (same UUID) is mounted at the same place. The copy's path
// is the one the original's RAM copy records, and it took that copy: the
// original's returned writes went to the copy, and were lost to it. The
// record now keeps the file's identity too (inode number, birth time).
func TestShadowCopyAtRecordedPathAfterDeviceChange(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	const s = "committed, never checkpointed"
	commitString(a, s)
	name := a.Shadow().Path
	must(t, a.Abandon())
	old := awayName(name, a)
	moveShadow(t, name, old)
	// The copy at the image's path: another file (another inode number).
	orig := renameAndCopy(t, path, ".orig")
	c := openShadowed(t, path, OpenOptions{})
	wantCopy(t, c, "the copy at the image's path", s, false)
	must(t, c.Close())
	must(t, os.Rename(orig, path))
	o := openShadowed(t, path, OpenOptions{})
	wantCopy(t, o, "the original", s, true)
	must(t, o.Close())
}

// TestShadowOtherArenaSamePathKept (found by a read-through review): X's
// file system is away and another, holding a different arena Y at the same
// path and inode number, comes up under X's old device number. Opening Y
// removed X's RAM copy as a leftover of an arena formatted there before,
// by its record's path alone; the record's identity now decides.
func TestShadowOtherArenaSamePathKept(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	commitString(a, "X")
	name, uuid := a.Shadow().Path, a.Geometry().UUID
	must(t, a.Abandon())
	must(t, os.Rename(path, path+".x"))
	y, err := Format(path, Options{Size: 4 << 20})
	must(t, err)
	must(t, y.Close())
	yName, err := ShadowPath(path, "")
	must(t, err)
	moved := filepath.Join(filepath.Dir(name), fmt.Sprintf("%x-%s", uuid, filepath.Base(yName)[33:]))
	moveShadow(t, name, moved)
	c := openShadowed(t, path, OpenOptions{})
	must(t, c.Close())
	if _, err := os.Stat(moved); err != nil {
		t.Fatalf("opening Y removed X's RAM copy: %v", err)
	}
}

// TestShadowRenamedWhileOpen (found by a read-through review): the image is
// renamed while open, then the daemon dies and the image's file system
// comes back under another number. The record named the old path, so
// nothing was found; each checkpoint now writes the record again.
func TestShadowRenamedWhileOpen(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	must(t, os.Rename(path, path+".new"))
	commitString(a, "after the rename")
	must(t, a.Sync())
	commitString(a, "after the rename!")
	name := a.Shadow().Path
	must(t, a.Abandon())
	moveShadow(t, name, awayName(name, a))
	o := openShadowed(t, path+".new", OpenOptions{})
	if got := heapString(o, 17); got != "after the rename!" || !o.Shadow().Reused {
		t.Errorf("after the crash: %q, %+v", got, o.Shadow())
	}
	must(t, o.Close())
}

// restoreBackup makes an image, takes a block-level copy of it (a backup)
// after one checkpoint, makes a second checkpoint and an unsynced change,
// crashes, moves the RAM copy's name as a device change would, and puts
// the backup in the image's place, in place (the same inode, so the same
// identity). It returns the image's path and its bytes before the backup
// took their place.
func restoreBackup(t *testing.T) (path string, current []byte) {
	t.Helper()
	path = formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	commitString(a, "in the backup")
	must(t, a.Sync())
	backup, err := os.ReadFile(path)
	must(t, err)
	commitString(a, "after the back")
	must(t, a.Sync())
	commitString(a, "never synced!")
	name := a.Shadow().Path
	must(t, a.Abandon())
	moveShadow(t, name, awayName(name, a))
	current, err = os.ReadFile(path)
	must(t, err)
	must(t, os.WriteFile(path, backup, 0o600))
	return path, current
}

// TestShadowBackupNotTaken (found by a read-through review): a block-level
// copy of the image (a backup, a snapshot) keeps its path, inode number and
// birth time; brought back in the image's place under another device
// number, it would take the RAM copy, putting today's arena over its older
// disk. The record's checkpoint sequence number tells it apart: the image
// held a later checkpoint than the backup does.
func TestShadowBackupNotTaken(t *testing.T) {
	path, current := restoreBackup(t)

	b := openShadowed(t, path, OpenOptions{})
	if got := heapString(b, 13); got != "in the backup" || b.Shadow().Reused {
		t.Errorf("the backup: %q, %+v", got, b.Shadow())
	}
	must(t, b.Close())
	must(t, os.WriteFile(path, current, 0o600))
	o := openShadowed(t, path, OpenOptions{})
	if got := heapString(o, 13); got != "never synced!" || !o.Shadow().Reused {
		t.Errorf("the image: %q, %+v", got, o.Shadow())
	}
	must(t, o.Close())
}

// TestShadowLockedCopyNotTaken: a copy whose record names the image being
// opened, but that a live process holds as its arena, is never taken (the
// lock openShadow takes; here the record is forged, so that nothing else
// refuses it).
func TestShadowLockedCopyNotTaken(t *testing.T) {
	path := formatClosed(t, 4<<20)
	dup := path + ".dup"
	copyImage(t, path, dup)
	a := openShadowed(t, path, OpenOptions{})
	commitString(a, "live")
	live := a.Shadow().Path
	other := awayName(live, a)
	must(t, os.Rename(live, other))
	f, err := os.Open(dup)
	must(t, err)
	rec := dup + "\nid " + fileID(f) + "\n"
	f.Close()
	must(t, os.WriteFile(other+imageSuffix, []byte(rec), 0o600))

	c := openShadowed(t, dup, OpenOptions{})
	if info := c.Shadow(); info.Reused {
		t.Errorf("the live copy was taken: %+v", info)
	}
	must(t, c.Close())
	if _, err := os.Stat(other); err != nil {
		t.Errorf("the live copy: %v", err)
	}
	must(t, os.Remove(other+imageSuffix))
	must(t, os.Rename(other, live))
	must(t, a.Close())
}

// openLogged is openShadowed, keeping what Open logs.
func openLogged(t *testing.T, path string) (*Arena, *strings.Builder) {
	t.Helper()
	var log strings.Builder
	var mu sync.Mutex
	a, err := OpenWith(path, OpenOptions{Interval: -1, Logf: func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(&log, format+"\n", args...)
	}})
	must(t, err)
	return a, &log
}

// TestShadowRenamedWhileOpenNoCheckpoint (found by a final review through
// mounts): the image renamed while open, changes made after the rename
// but no checkpoint (so the record still names the old path), the daemon
// killed, the file system back under another number: the copy was not
// found. A record whose path leads nowhere now still names the image when
// its identity, with a birth time, is the image's.
func TestShadowRenamedWhileOpenNoCheckpoint(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	if id := fileID(a.f); !strings.Contains(id, " ") {
		t.Skipf("this file system keeps no birth time (identity %q)", id)
	}
	must(t, a.Sync())
	must(t, os.Rename(path, path+".new"))
	const s = "after the rename, never checkpointed"
	commitString(a, s)
	name := a.Shadow().Path
	must(t, a.Abandon())
	moveShadow(t, name, awayName(name, a))
	o := openShadowed(t, path+".new", OpenOptions{})
	wantCopy(t, o, "the renamed image", s, true)
	must(t, o.Close())
}

// TestShadowBackupMountedNotTaken (found by a final review through
// mounts): a backup of the image brought back in its place was refused the
// RAM copy at first (older than its last checkpoint), but once mounted
// itself its checkpoints caught up with the record's, and a later open
// took the copy: the original's arena over the backup's disk. The mount
// counter, which the backup's own mount moved on, now tells them apart;
// and the open says why it left the copy alone.
func TestShadowBackupMountedNotTaken(t *testing.T) {
	path, current := restoreBackup(t)

	for i := range 4 { // the backup's own checkpoints pass the record's
		b, log := openLogged(t, path)
		wantCopy(t, b, fmt.Sprintf("the backup, open %d", i), "never synced!", false)
		if i == 0 && !strings.Contains(log.String(), "left alone the RAM copy") {
			t.Errorf("the open did not say why it left the RAM copy alone:\n%s", log)
		}
		for range 3 {
			commitString(b, fmt.Sprintf("backup %d", i))
			must(t, b.Sync())
		}
		must(t, b.Close())
	}
	must(t, os.WriteFile(path, current, 0o600))
	o := openShadowed(t, path, OpenOptions{})
	wantCopy(t, o, "the image", "never synced!", true)
	must(t, o.Close())
}

// TestShadowKillBeforeRecordRewrite (found by an outside review, once in
// 78 kills): a kill between a checkpoint that reached the image (the first
// of a mount, which moves the mount count on) and the record's rewrite
// after it leaves a record one mount count behind the image. The copy
// itself says the image's state, so it is this image's: it was set aside
// for good, holding its tmpfs pages until the next boot.
func TestShadowKillBeforeRecordRewrite(t *testing.T) {
	for _, moved := range []bool{false, true} {
		path := formatClosed(t, 4<<20)
		a := openShadowed(t, path, OpenOptions{})
		const s = "after the open's checkpoint"
		commitString(a, s)
		name := a.Shadow().Path
		must(t, a.Abandon())
		b, err := os.ReadFile(name + imageSuffix)
		must(t, err)
		r := parseRecord(b)
		if !r.hasMounts || r.mounts == 0 {
			t.Fatalf("record %q", b)
		}
		stale := strings.Replace(string(b), fmt.Sprintf("mounts %d\n", r.mounts), fmt.Sprintf("mounts %d\n", r.mounts-1), 1)
		must(t, os.WriteFile(name+imageSuffix, []byte(stale), 0o600))
		if moved {
			moveShadow(t, name, awayName(name, a))
		}
		o, log := openLogged(t, path)
		wantCopy(t, o, fmt.Sprintf("moved %v", moved), s, true)
		if strings.Contains(log.String(), "aside") || strings.Contains(log.String(), "left alone") {
			t.Errorf("moved %v: %s", moved, log)
		}
		must(t, o.Close())
		if ms, _ := filepath.Glob(filepath.Join(filepath.Dir(name), fmt.Sprintf("%x-*", a.Geometry().UUID))); len(ms) != 0 {
			t.Errorf("moved %v: left %v", moved, ms)
		}
	}
}
