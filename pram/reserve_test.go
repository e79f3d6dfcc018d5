package pram

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/internal/reaper"
)

// smallTmpfs mounts a 3.5 MiB tmpfs (mode 0700) for the test, or skips it.
func smallTmpfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	reaper.Mount(dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=3584k,mode=0700"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// An arena image on a file system smaller than the arena: Reserve gets
// blocks while there are some, then fails with ErrNoSpace, and every byte
// it reserved can be stored to (an unreserved one would raise SIGBUS and
// kill the test).
func TestReserveFullFileSystem(t *testing.T) {
	dir := smallTmpfs(t)

	a, err := Format(filepath.Join(dir, "arena"), Options{Size: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// More than fits with reserveAhead on top: falls back to exactly 3 MiB.
	if err := a.Reserve(3 << 20); err != nil {
		t.Fatalf("reserving 3 MiB of a 3.5 MiB tmpfs: %v", err)
	}
	err = a.Reserve(8 << 20)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("reserving 8 MiB of a 3.5 MiB tmpfs: %v, want ErrNoSpace", err)
	}
	t.Log(err)
	b := a.Bytes(a.Geometry().HeapOff, 3<<20-uint64(a.Geometry().HeapOff))
	for i := range b {
		b[i] = byte(i)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if used := (st.Blocks - st.Bfree) * uint64(st.Bsize); used < 3<<20 {
		t.Errorf("the tmpfs has %d bytes in use after reserving 3 MiB", used)
	}
	// A device needs no reservation; nor does a range already reserved.
	if err := a.Reserve(1 << 20); err != nil {
		t.Errorf("reserving again below what is reserved: %v", err)
	}
}

// A shadowed arena whose RAM copy's tmpfs fills up after Open (other RAM
// copies take it): the copy is reserved as the image is, so a full tmpfs
// is ErrNoSpace, and everything reserved can be stored to and
// checkpointed. A tmpfs smaller than the arena at Open is not used at all
// (TestShadowInPlace).
func TestReserveFullShadowDir(t *testing.T) {
	shm := smallTmpfs(t)
	path := formatClosed(t, 3<<20)
	a := openShadowed(t, path, OpenOptions{ShadowDir: shm})
	defer a.Close()
	if err := a.Reserve(2 << 20); err != nil {
		t.Fatalf("reserving 2 MiB of a 3.5 MiB tmpfs: %v", err)
	}
	// Another copy takes most of the rest.
	if err := os.WriteFile(filepath.Join(shm, "other"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reserve(3 << 20); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("reserving 3 MiB of a full tmpfs: %v, want ErrNoSpace", err)
	}
	g := a.Geometry()
	tx := a.Begin()
	b := a.Bytes(g.HeapOff, 2<<20-uint64(g.HeapOff))
	for i := range b {
		b[i] = byte(i)
	}
	tx.Commit()
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
}

// A tmpfs with less room than the arena is not used for its RAM copy: the
// arena would fail with ENOSPC long before it is full. The image is mapped
// in place, saying why; an arena that fits is shadowed there.
func TestShadowDirTooSmall(t *testing.T) {
	shm := smallTmpfs(t)
	big := formatClosed(t, 16<<20)
	a, err := OpenWith(big, OpenOptions{ShadowDir: shm, Interval: -1})
	if err != nil {
		t.Fatal(err)
	}
	info := a.Shadow()
	must(t, a.Close())
	if info.Path != "" || !strings.Contains(info.InPlace, "MiB free, less than the arena's 16 MiB") {
		t.Fatalf("a 16 MiB arena with a 3.5 MiB tmpfs: %+v", info)
	}
	small := formatClosed(t, 3<<20)
	b := openShadowed(t, small, OpenOptions{ShadowDir: shm})
	must(t, b.Close())
}
