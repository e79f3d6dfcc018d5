package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/internal/mounttest"
)

// TestArenaTruncatedUnderMount truncates the file the daemon maps as its
// arena while the file system is mounted: the RAM copy in tmpfs of an image
// on a disk, or an image on tmpfs mapped in place. A load or store through
// the mapping then raises SIGBUS, which killed the daemon (the mount gave
// ENOTCONN). Now the daemon stays up and answers EIO, says once what
// happened, unmounts at SIGTERM with a failing exit status, and writes
// nothing more to the images. With a RAM copy, it removes the copy, and
// the next mount starts from the image's last checkpoint: everything
// fsync'd is there and the check is clean. An image mapped in place is
// left as the truncation made it and is refused at the next mount.
func TestArenaTruncatedUnderMount(t *testing.T) {
	t.Run("ramcopy", func(t *testing.T) {
		m := mounttest.MountProcess(t)
		want := populateSynced(t, m)
		mapped := mappedArena(t, m.Pid())
		if mapped == m.Pram {
			t.Fatalf("the arena image %s is mapped in place; this case needs a RAM copy", m.Pram)
		}
		truncatedServesEIO(t, m, mapped)
		if _, err := os.Stat(mapped); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the truncated RAM copy %s is still there (%v): the next mount would use it", mapped, err)
		}
		m.Remount() // checked at cleanup, and now:
		check(t, m, "after the remount")
		for name, data := range want {
			got, err := os.ReadFile(m.Path(name))
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s after the remount: %d bytes, %v; want the %d fsync'd bytes", name, len(got), err, len(data))
			}
		}
	})
	t.Run("inplace", func(t *testing.T) {
		dir, err := os.MkdirTemp("/dev/shm", "conquest-lost-")
		if err != nil {
			t.Skipf("no tmpfs at /dev/shm: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		pramPath, disk := filepath.Join(dir, "pram.img"), filepath.Join(t.TempDir(), "disk.img")
		if err := mounttest.Mkfs(pramPath, disk, 64<<20); err != nil {
			t.Fatal(err)
		}
		m := mounttest.MountProcess(t, mounttest.WithImages(pramPath, disk))
		m.NoCheck() // the image is truncated for good
		populateSynced(t, m)
		if mapped := mappedArena(t, m.Pid()); mapped != pramPath {
			t.Fatalf("the daemon maps %s, not the image %s on tmpfs", mapped, pramPath)
		}
		truncatedServesEIO(t, m, pramPath)
		if fi, err := os.Stat(pramPath); err != nil || fi.Size() != 0 {
			t.Errorf("the truncated image after the daemon exited: %v, %v; want it left empty", fi, err)
		}
		err = mounttest.CheckImages(pramPath, disk)
		if err == nil || !strings.Contains(err.Error(), pramPath) {
			t.Errorf("opening the truncated image: %v; want a refusal naming it", err)
		}
	})
}

// populateSynced writes a directory of small files and a file large enough
// for the disk, fsyncs them and the directories, and returns their
// contents by path under the mount.
func populateSynced(t *testing.T, m *mounttest.Mounted) map[string][]byte {
	t.Helper()
	want := map[string][]byte{}
	if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		want[fmt.Sprintf("d/f%d", i)] = []byte(fmt.Sprintf("small file %d\n", i))
	}
	big := make([]byte, 3<<20)
	rand.Read(big)
	want["big"] = big
	for name, data := range want {
		if err := writeSynced(m.Path(name), unix.O_EXCL, data); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{m.Dir, m.Path("d")} {
		f, err := os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return want
}

// mappedArena returns the file mapped by process pid whose name is an
// arena's: its RAM copy (*.arena) or the test's image (pram.img).
func mappedArena(t *testing.T, pid int) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		if p := fields[len(fields)-1]; strings.HasSuffix(p, ".arena") || strings.HasSuffix(p, "/pram.img") {
			return p
		}
	}
	t.Fatalf("no arena among the mappings of process %d", pid)
	return ""
}

// truncatedServesEIO truncates mapped, the daemon's arena, and checks that
// every kind of request then fails with EIO from a daemon that is still
// running, which logs what happened, and that SIGTERM then unmounts it and
// ends it with a failing status that names the loss.
func truncatedServesEIO(t *testing.T, m *mounttest.Mounted, mapped string) {
	t.Helper()
	pid := m.Pid()
	if err := os.Truncate(mapped, 0); err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		do   func() error
	}{
		{"create", func() error {
			f, err := os.Create(m.Path("d", "new"))
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"mkdir", func() error { return os.Mkdir(m.Path("newdir"), 0o755) }},
		{"open", func() error {
			f, err := os.OpenFile(m.Path("d", "f1"), os.O_RDWR, 0)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"unlink", func() error { return os.Remove(m.Path("d", "f2")) }},
		{"statfs", func() error {
			var st unix.Statfs_t
			return unix.Statfs(m.Dir, &st)
		}},
		{"readdir", func() error { _, err := os.ReadDir(m.Path("d")); return err }},
	}
	for _, op := range ops {
		if err := op.do(); !errors.Is(err, syscall.EIO) {
			t.Errorf("%s after the arena was truncated: %v; want EIO", op.name, err)
		}
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the daemon is gone after the truncation: %v\n%s", err, m.Output())
	}
	const lost = "the arena's memory is lost"
	// The log reaches the test through a pipe, after the replies.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(m.Output(), lost) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(m.Output(), lost); n != 1 {
		t.Errorf("the daemon's log says %q %d times, want once:\n%s", lost, n, m.Output())
	}
	st, err := m.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if st.Success() || !strings.Contains(m.Output(), "closing: ") {
		t.Errorf("the daemon exited with %v; want a failure that says it could not close:\n%s", st, m.Output())
	}
	if strings.Contains(m.Output(), "panic") || strings.Contains(m.Output(), "goroutine ") {
		t.Errorf("the daemon's log has a panic:\n%s", m.Output())
	}
}
