package fusefs_test

import (
	"os"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/internal/mounttest"
)

// TestRenameat2 drives renameat2's flags through the mount (FUSE_RENAME2,
// which bazil does not parse): NOREPLACE fails with EEXIST on an existing
// target and moves otherwise; EXCHANGE swaps two names atomically (files,
// a file and a directory across directories, whose ".." then follows), and
// needs both to exist; WHITEOUT and NOREPLACE|EXCHANGE are EINVAL. Each
// answer is checked against the names and contents left behind, through
// the kernel's caches and after a remount.
func TestRenameat2(t *testing.T) {
	m := mounttest.Mount(t)
	p := m.Path
	write := func(name, data string) { must(t, os.WriteFile(p(name), []byte(data), 0o644)) }
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(p(name))
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		return string(b)
	}
	r2 := func(from, to string, flags uint) error {
		return unix.Renameat2(unix.AT_FDCWD, p(from), unix.AT_FDCWD, p(to), flags)
	}
	write("a", "A")
	write("b", "B")
	must(t, os.Mkdir(p("d1"), 0o755))
	must(t, os.Mkdir(p("d2"), 0o755))

	// NOREPLACE.
	wantErrno(t, "NOREPLACE onto a file", r2("a", "b", unix.RENAME_NOREPLACE), syscall.EEXIST)
	if read("a") != "A" || read("b") != "B" {
		t.Fatal("a failed NOREPLACE changed something")
	}
	must(t, r2("a", "c", unix.RENAME_NOREPLACE))
	if _, err := os.Stat(p("a")); !os.IsNotExist(err) {
		t.Errorf("a after NOREPLACE move: %v", err)
	}
	if read("c") != "A" {
		t.Error("c lost its data")
	}
	wantErrno(t, "NOREPLACE of a missing name", r2("nothing", "x", unix.RENAME_NOREPLACE), syscall.ENOENT)

	// EXCHANGE of two files.
	stB, stC := stat(t, p("b")), stat(t, p("c"))
	must(t, r2("b", "c", unix.RENAME_EXCHANGE))
	if read("b") != "A" || read("c") != "B" {
		t.Errorf("after EXCHANGE b=%q c=%q", read("b"), read("c"))
	}
	if st := stat(t, p("b")); st.Ino != stC.Ino {
		t.Errorf("b is inode %d after EXCHANGE, want %d", st.Ino, stC.Ino)
	}
	if st := stat(t, p("c")); st.Ino != stB.Ino {
		t.Errorf("c is inode %d after EXCHANGE, want %d", st.Ino, stB.Ino)
	}
	wantErrno(t, "EXCHANGE with a missing name", r2("b", "missing", unix.RENAME_EXCHANGE), syscall.ENOENT)

	// EXCHANGE of a file and a directory in different directories.
	must(t, os.Mkdir(p("d1", "sub"), 0o755))
	write("d1/sub/inside", "I")
	write("d2/f", "F")
	must(t, r2("d1/sub", "d2/f", unix.RENAME_EXCHANGE))
	if read("d2/f/inside") != "I" || read("d1/sub") != "F" {
		t.Error("EXCHANGE of a directory and a file did not swap them")
	}
	if st, d2 := stat(t, p("d2", "f", "..")), stat(t, p("d2")); st.Ino != d2.Ino {
		t.Errorf("the moved directory's .. is inode %d, want d2's %d", st.Ino, d2.Ino)
	}
	// Link counts follow the subdirectory from d1 to d2.
	if d1, d2 := stat(t, p("d1")), stat(t, p("d2")); d1.Nlink != 2 || d2.Nlink != 3 {
		t.Errorf("nlink d1=%d d2=%d after the exchange, want 2 and 3", d1.Nlink, d2.Nlink)
	}
	// A directory cannot be exchanged into itself.
	wantErrno(t, "EXCHANGE of a directory with its own child", r2("d2", "d2/f/inside", unix.RENAME_EXCHANGE), syscall.EINVAL)

	// WHITEOUT moves b to w and leaves a whiteout (0:0 character device)
	// named b; w goes back to b by EXCHANGE with the whiteout, which is
	// then removed.
	must(t, r2("b", "w", unix.RENAME_WHITEOUT))
	if st := stat(t, p("b")); st.Mode != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("after WHITEOUT, b has mode %o rdev %d; want a 0:0 character device", st.Mode, st.Rdev)
	}
	if read("w") != "A" {
		t.Error("WHITEOUT did not move the file")
	}
	must(t, r2("w", "b", unix.RENAME_EXCHANGE))
	must(t, os.Remove(p("w")))
	// Invalid flag combinations.
	wantErrno(t, "NOREPLACE|EXCHANGE", r2("b", "c", unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE), syscall.EINVAL)
	wantErrno(t, "WHITEOUT|EXCHANGE", r2("b", "c", unix.RENAME_WHITEOUT|unix.RENAME_EXCHANGE), syscall.EINVAL)

	// The same after the kernel forgets what it cached (a remount: the
	// machine's drop_caches would empty other tests' caches too).
	m.Remount()
	if read("b") != "A" || read("c") != "B" || read("d2/f/inside") != "I" || read("d1/sub") != "F" {
		t.Error("names or data differ after a remount")
	}
	names := direntNames(t, p("d2"))
	slices.Sort(names)
	if !slices.Equal(names, []string{".", "..", "f"}) {
		t.Errorf("d2 holds %v, want [. .. f]", names)
	}
}
