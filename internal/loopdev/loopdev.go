package loopdev

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"conquest/internal/reaper"
)

// New attaches a loop device of size bytes and returns its path. The
// device is detached, and its backing file removed, in the test's cleanup.
func New(t testing.TB, size int64) string {
	t.Helper()
	return Attach(t, NewFile(t, size))
}

// NewFile makes a sparse backing file of size bytes in the test's
// temporary directory, for Attach; it skips the test where loop devices
// cannot be made.
func NewFile(t testing.TB, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("no losetup")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices here: %v", err)
	}
	back := filepath.Join(t.TempDir(), "loop.img")
	if err := os.WriteFile(back, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(back, size); err != nil {
		t.Fatal(err)
	}
	return back
}

// Attach attaches a loop device over the file back and returns its path;
// it is detached in the test's cleanup. A file may have several loop
// devices at once, each with its own device number.
func Attach(t testing.TB, back string) string {
	t.Helper()
	out, err := exec.Command("losetup", "--find", "--show", back).CombinedOutput()
	if err != nil {
		t.Skipf("cannot attach a loop device: %v: %s", err, strings.TrimSpace(string(out)))
	}
	dev := strings.TrimSpace(string(out))
	reaper.Loop(dev, back)
	// `blockdev --setro` marks a loop device read-only for good, past its
	// detach: a device so left by someone else is made writable again.
	if out, err := exec.Command("blockdev", "--getro", dev).Output(); err == nil && strings.TrimSpace(string(out)) == "1" {
		if out, err := exec.Command("blockdev", "--setrw", dev).CombinedOutput(); err != nil {
			t.Logf("%s was left read-only and stays so: %v: %s", dev, err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("detaching %s: %v: %s", dev, err, out)
		}
	})
	return dev
}
