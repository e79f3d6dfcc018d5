package fusefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
	"conquest/internal/mounttest"
	"conquest/internal/reaper"
)

// The POLL deadlock (poll.go) stops the whole process, test timeouts
// included, so the process that serves and opens files runs as a child of
// the test, which kills it if it does not finish in time.
const (
	pollChildEnv   = "CONQUEST_POLL_CHILD" // the child's work directory
	pollItersEnv   = "CONQUEST_POLL_ITERS"
	pollNoPrimeEnv = "CONQUEST_POLL_NOPRIME"
)

// Mounting, opening files of the mount with the os package (netpoller,
// epoll_ctl) and collecting garbage, all in one process, does not hang.
// Without the primer in Mount this hangs within a few mounts (see
// TestPollDeadlockWithoutPrimer).
func TestPollInProcess(t *testing.T) {
	out, err := runPollChild(t, 40, true, 40*time.Second)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "ok 40 mounts") {
		t.Fatalf("child did not finish:\n%s", out)
	}
}

// The same child without the primer hangs: this shows that
// TestPollInProcess can fail. Opt-in (CONQUEST_POLL_DEMO=1): it leaves a
// child stuck until it is killed.
func TestPollDeadlockWithoutPrimer(t *testing.T) {
	if os.Getenv("CONQUEST_POLL_DEMO") != "1" {
		t.Skip("set CONQUEST_POLL_DEMO=1 to show the deadlock the primer prevents")
	}
	out, err := runPollChild(t, 200, false, 10*time.Second)
	if err == nil {
		t.Fatalf("200 mounts without the primer did not hang:\n%s", out)
	}
	t.Logf("without the primer: %v\n%s", err, out)
}

// After Mount the kernel has had its one POLL, and the phantom file left
// nothing behind: no entry, no name taken, no POLL for later opens.
func TestPollPrimerLeavesNothing(t *testing.T) {
	m := mounttest.Mount(t)
	if n := m.Server.Stats()["POLL"]; n != 1 {
		t.Fatalf("POLL requests after Mount = %d, want 1 (the primer's)", n)
	}
	p := m.Path(fusefs.PollName)
	var st unix.Stat_t
	wantErrno(t, "lstat of the primer's name", unix.Lstat(p, &st), unix.ENOENT)
	if es, err := os.ReadDir(m.Dir); err != nil || len(es) != 0 {
		t.Fatalf("root after Mount: %v %v, want empty", es, err)
	}
	// The name is an ordinary one now.
	must(t, os.WriteFile(p, []byte("mine"), 0o600))
	if b, err := os.ReadFile(p); err != nil || string(b) != "mine" {
		t.Fatalf("read %s: %q %v", p, b, err)
	}
	st = stat(t, p)
	if st.Ino == uint64(^uint64(0)) || st.Mode != unix.S_IFREG|0o600 || st.Size != 4 {
		t.Fatalf("stat %s: ino %d mode %o size %d", p, st.Ino, st.Mode, st.Size)
	}
	// The kernel no longer asks (fc->no_poll): os.Open's epoll_ctl and an
	// explicit poll(2) are answered by the kernel alone.
	f, err := os.Open(p)
	must(t, err)
	fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, 1000); err != nil || fds[0].Revents&unix.POLLIN == 0 {
		t.Errorf("poll: %v revents %#x", err, fds[0].Revents)
	}
	must(t, f.Close())
	if n := m.Server.Stats()["POLL"]; n != 1 {
		t.Errorf("POLL requests after opening and polling a file = %d, want still 1", n)
	}
	must(t, os.Remove(p))
}

// runPollChild runs the test binary as a child serving iters mounts in a row
// (pollChild) and returns its output; an error if it failed or did not end
// within wait.
func runPollChild(t *testing.T, iters int, prime bool, wait time.Duration) (string, error) {
	if err := mounttest.Available(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	reaper.Mount(mnt) // the child mounts it
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pollChildEnv+"="+dir, pollItersEnv+"="+strconv.Itoa(iters))
	if !prime {
		cmd.Env = append(cmd.Env, pollNoPrimeEnv+"=1")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-exited:
	case <-time.After(wait):
		// Deadlocked: the thread in epoll_ctl waits in the kernel for an
		// answer nobody can give, and not even SIGKILL ends that wait once
		// the daemon has read the request. Aborting the connection does.
		err = fmt.Errorf("child hung (no exit within %v)", wait)
		if aerr := abortFUSE(mnt); aerr != nil {
			t.Errorf("aborting the child's connection: %v", aerr)
		}
		cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("child %d still alive after abort and SIGKILL", cmd.Process.Pid)
		}
	}
	// A killed child leaves its mount behind (disconnected).
	if _, mounted := fusefs.Mounted(mnt); mounted {
		if uerr := fusefs.Unmount(mnt, true); uerr != nil {
			t.Errorf("unmounting %s after the child: %v", mnt, uerr)
		}
	}
	return out.String(), err
}

// abortFUSE aborts the FUSE connection mounted on mnt through fusectl. It
// finds the device number in /proc/self/mountinfo: a stat of mnt could
// block on the hung connection.
func abortFUSE(mnt string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] != mnt {
			continue
		}
		_, minor, ok := strings.Cut(f[2], ":")
		if !ok {
			return fmt.Errorf("bad mountinfo line %q", line)
		}
		return os.WriteFile("/sys/fs/fuse/connections/"+minor+"/abort", []byte("1"), 0)
	}
	return fmt.Errorf("%s is not mounted", mnt)
}

// pollChild is the child's work: iters times, mount an image in-process,
// then open and read a regular file and list the root with the os package
// while other goroutines collect garbage without pause, then unmount.
func pollChild(dir string) int {
	iters, _ := strconv.Atoi(os.Getenv(pollItersEnv))
	if os.Getenv(pollNoPrimeEnv) == "1" {
		fusefs.SetPrimePoll(false)
	}
	if err := pollChildRun(dir, iters); err != nil {
		fmt.Println("FAIL:", err)
		return 1
	}
	fmt.Printf("ok %d mounts\n", iters)
	return 0
}

func pollChildRun(dir string, iters int) error {
	img, mnt := filepath.Join(dir, "pram.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	if err := conquest.Mkfs(img, "", conquest.MkfsOptions{PramSize: 32 << 20}); err != nil {
		return err
	}
	want := []byte("polled")
	for i := range iters {
		fmt.Printf("mount %d\n", i)
		fsys, err := conquest.Open(img, "", conquest.Options{})
		if err != nil {
			return err
		}
		srv, err := fusefs.Mount(fsys, mnt, fusefs.Options{})
		if err != nil {
			fsys.Close()
			return err
		}
		// Made with plain system calls: they never touch the netpoller.
		f := filepath.Join(mnt, fmt.Sprintf("f%d", i%4))
		fd, err := unix.Open(f, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
		if err == nil {
			_, err = unix.Write(fd, want)
			unix.Close(fd)
		}
		if err == nil {
			err = readWhileCollecting(mnt, f, want)
		}
		if uerr := srv.Unmount(); err == nil && uerr != nil {
			err = uerr
		}
		if werr := srv.Wait(); err == nil && werr != nil {
			err = werr
		}
		if cerr := fsys.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("mount %d: %w", i, err)
		}
	}
	return nil
}

func readWhileCollecting(mnt, f string, want []byte) error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					runtime.GC()
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	for range 5 {
		b, err := os.ReadFile(f) // os.Open: epoll_ctl on a FUSE file
		if err != nil {
			return err
		}
		if !bytes.Equal(b, want) {
			return errors.New("read back wrong data")
		}
		if _, err := os.ReadDir(mnt); err != nil {
			return err
		}
	}
	return nil
}
