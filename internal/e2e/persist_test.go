package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/internal/mounttest"
	"conquest/internal/posixtest"
)

// TestRemount writes a tree (every kind of object, then a random workload),
// unmounts, mounts again and compares everything, including inode numbers
// and nanosecond mtimes; twice, with more changes in between.
func TestRemount(t *testing.T) {
	m := mount(t)
	buildTree(t, m.Dir)
	shadow, _ := posixtest.MountTmpfs(t, 512<<20)
	w, err := posixtest.NewWorkload(m.Dir, shadow, 4, seed(t), posixtest.GenOptions{BigEvery: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for round := 0; round < 2; round++ {
		w.Run(300, nil)
		if err := w.Err(); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, m.Dir)
		w.Close() // no descriptor may keep the mount busy
		remount(t, m)
		wantSameTree(t, snapshot(t, m.Dir), before, strict, "after remount")
		if err := w.Verify(m.Dir); err != nil {
			t.Fatalf("after remount, against the shadow: %v", err)
		}
	}
}

// TestKill kills the daemon with SIGKILL after a tree was written, with and
// without syncfs first: every completed operation must survive (the arena's
// pages live in the kernel page cache, which a killed process does not
// take with it), fsck must be clean, and an unlinked file still open at the
// kill must be freed by the next mount.
func TestKill(t *testing.T) {
	for _, sync := range []bool{false, true} {
		name := "nosync"
		if sync {
			name = "syncfs"
		}
		t.Run(name, func(t *testing.T) {
			m := mounttest.MountProcess(t)
			buildTree(t, m.Dir)
			shadow, _ := posixtest.MountTmpfs(t, 512<<20)
			w, err := posixtest.NewWorkload(m.Dir, shadow, 3, seed(t), posixtest.GenOptions{BigEvery: 20})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			w.Run(300, nil)
			if err := w.Err(); err != nil {
				t.Fatal(err)
			}
			// An orphan: unlinked while open.
			orphan, err := unix.Open(m.Path("orphan"), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			// Each is closed once: after the kill below, or at the end if the
			// test fails first (closing a number twice could close a
			// descriptor the test opened meanwhile).
			defer closeOnce(&orphan)
			if err := writeAll(orphan, fill(77, 200000)); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(m.Path("orphan")); err != nil {
				t.Fatal(err)
			}
			// An O_TMPFILE file of 3 MB (so on disk) still open and never
			// named, and a small one named with linkat.
			tmp, err := unix.Open(m.Dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			defer closeOnce(&tmp)
			if err := writeAll(tmp, fill(78, 3<<20)); err != nil {
				t.Fatal(err)
			}
			named, err := unix.Open(m.Dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o640)
			if err != nil {
				t.Fatal(err)
			}
			defer closeOnce(&named)
			if err := writeAll(named, fill(79, 100000)); err != nil {
				t.Fatal(err)
			}
			if err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", named), unix.AT_FDCWD,
				m.Path("named-tmpfile"), unix.AT_SYMLINK_FOLLOW); err != nil {
				t.Fatalf("linkat: %v", err)
			}
			var before unix.Statfs_t
			if err := unix.Statfs(m.Dir, &before); err != nil {
				t.Fatal(err)
			}
			if sync {
				if err := unix.Syncfs(orphan); err != nil {
					t.Fatalf("syncfs: %v", err)
				}
			}
			snap := snapshot(t, m.Dir)
			m.Kill()
			closeOnce(&orphan)
			closeOnce(&tmp)
			closeOnce(&named)
			fsck(t, m)
			m.Remount()
			wantSameTree(t, snapshot(t, m.Dir), snap, strict, "after kill -9 and remount")
			if err := w.Verify(m.Dir); err != nil {
				t.Fatalf("after kill -9, against the shadow: %v", err)
			}
			got, err := os.ReadFile(m.Path("named-tmpfile"))
			if err != nil || !bytes.Equal(got, fill(79, 100000)) {
				t.Fatalf("the named tmpfile after kill -9: %d bytes, %v", len(got), err)
			}
			// The orphan's 200 kB and the tmpfile's 3 MB were freed
			// (FS.Check at cleanup also proves nothing leaked).
			var after unix.Statfs_t
			if err := unix.Statfs(m.Dir, &after); err != nil {
				t.Fatal(err)
			}
			if freed := (int64(after.Bfree) - int64(before.Bfree)) * after.Frsize; freed < 150000+3<<20-100000 {
				t.Errorf("free space grew by %d bytes after remount; the 200 kB orphan and 3 MB tmpfile were not freed?", freed)
			}
		})
	}
}

// closeOnce closes *fd unless it is closed already (-1), and marks it so.
func closeOnce(fd *int) {
	if *fd >= 0 {
		unix.Close(*fd)
		*fd = -1
	}
}

// fsck checks the images of a stopped file system twice: with the CLI
// (`conquest fsck`, which recovers a dirty arena and exits 0, or 1 when it
// had to roll back or reap: fsck(8)'s "errors corrected") and then with
// FS.Check through mounttest; the second CLI run must exit 0.
func fsck(t *testing.T, m *mounttest.Mounted) {
	t.Helper()
	bin := mounttest.Binary(t)
	run := func() (int, string) {
		cmd := exec.Command(bin, "fsck", "--pram", m.Pram, "--disk", m.Disk)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("conquest fsck: %v", err)
		}
		return code, string(out)
	}
	code, out := run()
	if code != 0 && code != 1 || !strings.Contains(out, "clean") {
		t.Fatalf("conquest fsck after kill: exit %d\n%s", code, out)
	}
	t.Logf("conquest fsck after kill: exit %d: %s", code, strings.TrimSpace(out))
	if err := mounttest.CheckImages(m.Pram, m.Disk); err != nil {
		t.Fatal(err)
	}
	if code, out := run(); code != 0 {
		t.Fatalf("second conquest fsck: exit %d\n%s", code, out)
	}
}
