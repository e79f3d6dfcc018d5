package mounttest_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"conquest/fusefs"
	"conquest/internal/loopdev"
	"conquest/internal/mounttest"
	"conquest/internal/posixtest"
	"conquest/pram"
)

// killedChildEnv makes this test binary, run by TestReaperAfterKill, the
// test process that is killed.
const killedChildEnv = "CONQUEST_MOUNTTEST_KILLED_CHILD"

// TestReaperAfterKill: a test binary killed while its mounts are up (kill
// -9 here; Ctrl-C and go test's -timeout end it as abruptly) leaves
// nothing (internal/reaper): its in-process Conquest mount (with a thread
// of it waiting in a request to that mount when it dies), a tmpfs and a
// loop device are taken down, and the tests' temporary directories and the
// RAM-copy directory removed. Without the reaper all of them stayed, and
// the process stayed a zombie for ever.
func TestReaperAfterKill(t *testing.T) {
	if _, ok := os.LookupEnv(killedChildEnv); ok {
		killedChild(t)
		return
	}
	if err := mounttest.Available(); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestReaperAfterKill$", "-test.v")
	cmd.Env = append(os.Environ(), killedChildEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(out)
	for got["ready"] == "" && sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok {
			got[k] = v
		}
	}
	dir, shadow, tmpfs, loop := got["mounted"], got["shadow"], got["tmpfs"], got["loop"]
	if got["ready"] == "" || dir == "" || shadow == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child did not get ready: %v", got)
	}
	// Whatever happens below, nothing of the child's may stay.
	t.Cleanup(func() {
		for _, d := range []string{dir, tmpfs} {
			if _, ok := fusefs.Mounted(d); ok {
				exec.Command("umount", "-l", d).Run()
			}
		}
	})
	if _, ok := fusefs.Mounted(dir); !ok {
		t.Fatalf("%s is not mounted", dir)
	}
	root := filepath.Dir(filepath.Dir(dir)) // t.TempDir's: .../TestReaperAfterKill.../001/mnt
	if !strings.HasPrefix(filepath.Base(root), "TestReaperAfterKill") {
		t.Fatalf("the mount point %s is not in a directory of t.TempDir's", dir)
	}
	time.Sleep(200 * time.Millisecond) // the child's stat of its mount is under way
	cmd.Process.Signal(syscall.SIGKILL)
	// Not waited for here: a child that stayed a zombie would hold this
	// test until go test's -timeout.
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()

	gone := func(p string) bool { _, err := os.Lstat(p); return os.IsNotExist(err) }
	mounted := func(p string) bool { _, ok := fusefs.Mounted(p); return p != "" && ok }
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) && (mounted(dir) || mounted(tmpfs) || !gone(root) || !gone(shadow)) {
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-exited:
	case <-time.After(time.Until(deadline) + time.Second):
		t.Error("the killed test binary did not end (a zombie, waiting on its own mount?)")
	}
	for _, p := range []string{dir, tmpfs} {
		if mounted(p) {
			t.Errorf("%s still mounted 20 s after its test binary was killed", p)
		}
	}
	for _, p := range []string{root, shadow} {
		if !gone(p) {
			t.Errorf("%s left behind by the killed test binary", p)
		}
	}
	if loop != "" {
		if b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(loop), "loop", "backing_file")); err == nil &&
			strings.Contains(string(b), "TestReaperAfterKill") {
			t.Errorf("loop device %s still attached to %s", loop, strings.TrimSpace(string(b)))
			exec.Command("losetup", "-d", loop).Run()
		}
	}
}

// killedChild mounts, makes a tmpfs and a loop device, says so, and waits
// to be killed with a request to its own mount in flight.
func killedChild(t *testing.T) {
	m := mounttest.Mount(t)
	if err := os.WriteFile(m.Path("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("mounted %s\nshadow %s\n", m.Dir, os.Getenv(pram.ShadowDirEnv))
	if d, ok := posixtest.MountTmpfs(t, 1<<20); ok {
		fmt.Printf("tmpfs %s\n", d)
	}
	if os.Geteuid() == 0 {
		if _, err := os.Stat("/dev/loop-control"); err == nil {
			fmt.Printf("loop %s\n", loopdev.New(t, 1<<20))
		}
	}
	fmt.Println("ready 1")
	// Requests to the mount from another goroutine until the end: the
	// kill finds one waiting in the kernel for the serve loop it kills.
	go func() {
		for {
			os.Stat(m.Path("f"))
		}
	}()
	time.Sleep(time.Minute)
}
