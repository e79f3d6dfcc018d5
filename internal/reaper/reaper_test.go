package reaper

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestTestRoot(t *testing.T) {
	for _, c := range []struct{ tmp, path, want string }{
		{"/tmp", "/tmp/TestX123/001/mnt", "/tmp/TestX123"},
		{"/tmp", "/tmp/TestX123", "/tmp/TestX123"},
		{"/tmp", "/tmp/other/001/mnt", ""}, // not t.TempDir's
		{"/tmp", "/mnt/TestX/001", ""},     // not under tmp
		{"/tmp", "/tmp", ""},               // tmp itself
		{"/var/tmp", "/tmp/TestX/1", ""},   // another tmp
		{"/tmp", "/tmp/../etc/TestX", ""},  // not below
	} {
		if got := testRoot(c.tmp, c.path); got != c.want {
			t.Errorf("testRoot(%q, %q) = %q, want %q", c.tmp, c.path, got, c.want)
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/a\011b`: "/a\tb", `/plain`: "/plain", `/end\04`: `/end\04`, `\134x`: `\x`} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestZombie(t *testing.T) {
	if zombie(os.Getpid()) {
		t.Error("this process taken for a zombie")
	}
	if !zombie(1 << 30) {
		t.Error("a process that does not exist not taken as gone")
	}
}

// removeOwn removes what lies on the directory's own file system and never
// enters a mount in it: a tmpfs mounted below keeps its file, and the
// directories above it stay.
func TestRemoveOwnStopsAtMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	root := t.TempDir()
	inner := filepath.Join(root, "a", "mnt")
	must(t, os.MkdirAll(inner, 0o755))
	must(t, os.WriteFile(filepath.Join(root, "a", "f"), []byte("x"), 0o644))
	must(t, os.MkdirAll(filepath.Join(root, "b", "c"), 0o755))
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	defer unix.Unmount(inner, unix.MNT_DETACH)
	must(t, os.WriteFile(filepath.Join(inner, "kept"), []byte("on another file system"), 0o644))
	removeOwn(root)
	if b, err := os.ReadFile(filepath.Join(inner, "kept")); err != nil || string(b) != "on another file system" {
		t.Errorf("the file on the mount below: %q, %v", b, err)
	}
	for _, gone := range []string{filepath.Join(root, "a", "f"), filepath.Join(root, "b")} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", gone, err)
		}
	}
	must(t, unix.Unmount(inner, 0))
	removeOwn(root)
	if _, err := os.Lstat(root); !os.IsNotExist(err) {
		t.Errorf("%s not removed once nothing is mounted in it: %v", root, err)
	}
}

// TempRoot finds a test's directory through a temporary directory named by
// a symbolic link, and in $GOTMPDIR, where t.TempDir makes it.
func TestTempRootResolves(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	must(t, os.Symlink(real, link))
	must(t, os.MkdirAll(filepath.Join(real, "TestX1", "001", "mnt"), 0o755))
	t.Setenv("GOTMPDIR", link)
	if got, want := TempRoot(filepath.Join(link, "TestX1", "001", "mnt")), filepath.Join(real, "TestX1"); got != want {
		t.Errorf("TempRoot through a link = %q, want %q", got, want)
	}
	if got := TempRoot(filepath.Join(os.TempDir(), "TestY", "001")); got != "" {
		t.Errorf("TempRoot outside $GOTMPDIR = %q, want none", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
