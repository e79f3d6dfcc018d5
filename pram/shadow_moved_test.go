package pram

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
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
	old := filepath.Join(filepath.Dir(name), fmt.Sprintf("%x-ffff-1.arena", a.Geometry().UUID))
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

// TestShadowOfCopyUnderSameName: a copy of an image (same UUID) on a file
// system that now has the device and inode numbers the original's had
// finds the original's RAM copy under its own name. It must not take it
// (the original's changes would become the copy's, and be lost to the
// original): the copy is moved aside, and the original takes it back.
func TestShadowOfCopyUnderSameName(t *testing.T) {
	path := formatClosed(t, 4<<20)
	b, err := os.ReadFile(path)
	must(t, err)
	dup := filepath.Join(t.TempDir(), "copy")
	must(t, os.WriteFile(dup, b, 0o600))

	a := openShadowed(t, path, OpenOptions{})
	const s = "the original's change"
	commitString(a, s)
	name := a.Shadow().Path
	must(t, a.Abandon())
	dupName, err := ShadowPath(dup, "")
	must(t, err)
	moveShadow(t, name, dupName)

	c := openShadowed(t, dup, OpenOptions{})
	if info := c.Shadow(); info.Reused {
		t.Errorf("the copy took the original's RAM copy: %+v", info)
	}
	if got := heapString(c, len(s)); got == s {
		t.Error("the copy holds the original's change")
	}
	must(t, c.Close())

	o := openShadowed(t, path, OpenOptions{})
	if info := o.Shadow(); !info.Reused {
		t.Errorf("the original did not find its RAM copy: %+v", info)
	}
	if got := heapString(o, len(s)); got != s {
		t.Errorf("the original's change reads %q", got)
	}
	must(t, o.Close())
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
	o := openShadowed(t, path, OpenOptions{})
	if got := heapString(o, len(s)); got != s || !o.Shadow().Reused {
		t.Errorf("after the other image's open: %q, %+v", got, o.Shadow())
	}
	must(t, o.Close())
}
