package mounttest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"conquest/fusefs"
	"conquest/internal/reaper"
	"conquest/internal/shadowtest"
)

// readyWait bounds how long MountProcess waits for the daemon.
const readyWait = time.Minute

var (
	buildMu  sync.Mutex
	buildDir string // set by Main: the shared build directory
	built    string // the binary in buildDir, once built
)

// Main runs the tests of a package that uses MountProcess or Binary,
// building the conquest command at most once and removing it afterwards:
//
//	func TestMain(m *testing.M) { mounttest.Main(m) }
func Main(m *testing.M) {
	reaper.Child()
	cleanShadows := shadowtest.Setup()
	dir, err := os.MkdirTemp("", "conquest-mounttest-")
	if err == nil {
		buildMu.Lock()
		buildDir = dir
		buildMu.Unlock()
		reaper.Remove(dir)
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	// Nothing may outlive the tests: report (and remove) any mount left.
	for _, d := range mountDirs() {
		if mi, ok := fusefs.Mounted(d); ok && strings.HasPrefix(mi.FSType, "fuse") {
			fmt.Fprintf(os.Stderr, "mounttest: %s is still mounted after the tests\n", d)
			if fusefs.Unmount(d, false) != nil {
				fusefs.Unmount(d, true)
			}
			code = 1
		}
	}
	cleanShadows()
	os.Exit(code)
}

// Binary returns the path of a conquest command built from this source tree.
func Binary(t testing.TB) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if built != "" {
		return built
	}
	dir := buildDir
	if dir == "" {
		dir = t.TempDir()
	}
	bin := filepath.Join(dir, "conquest")
	if err := build(bin); err != nil {
		t.Fatalf("building conquest: %v", err)
	}
	if buildDir != "" {
		built = bin
	}
	return bin
}

// build compiles conquest/cmd/conquest into bin.
func build(bin string) error {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return errors.New("cannot locate the source tree")
	}
	root := filepath.Clean(filepath.Join(filepath.Dir(self), "..", ".."))
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "build", "-o", bin, "./cmd/conquest")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	return nil
}

// MountProcess formats fresh images in t.TempDir() (or uses WithImages) and
// mounts them with `conquest mount --foreground` in a child process, which
// a test may kill (Kill) and restart (Remount).
func MountProcess(t testing.TB, opts ...Option) *Mounted {
	t.Helper()
	bin := Binary(t)
	m := newMounted(t, true, opts)
	m.bin = bin
	if err := m.mount(); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *Mounted) startProcess() error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	args := []string{"mount", "--foreground", "--ready-fd=3", "--pram", m.Pram, "--disk", m.Disk}
	args = append(args, m.cfg.args...)
	args = append(args, m.Dir)
	cmd := exec.Command(m.bin, args...)
	cmd.Env = append(os.Environ(), "CONQUEST_HOME="+filepath.Dir(m.Pram))
	cmd.Dir = "/"
	var log syncBuffer
	cmd.Stdout = &log
	cmd.Stderr = &log
	cmd.ExtraFiles = []*os.File{w}
	// If the test binary dies, the daemon is told to unmount and exit.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		w.Close()
		return err
	}
	w.Close()
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	m.Cmd, m.exited, m.logBuf = cmd, exited, &log

	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(readyWait)
	var errMsg string
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				<-exited
				m.Cmd = nil
				if errMsg == "" {
					errMsg = "daemon exited before it was ready"
				}
				return fmt.Errorf("conquest mount: %s (%v)\n%s", errMsg, cmd.ProcessState, log.String())
			}
			kind, msg, _ := strings.Cut(line, " ")
			switch kind {
			case "ready":
				return nil
			case "error":
				errMsg = msg
			}
		case <-timeout:
			cmd.Process.Kill()
			<-exited
			m.Cmd = nil
			m.unmountDead()
			return fmt.Errorf("conquest mount: not ready after %v\n%s", readyWait, log.String())
		}
	}
}

// Pid is the daemon's process id (0 when none runs).
func (m *Mounted) Pid() int {
	if m.Cmd == nil {
		return 0
	}
	return m.Cmd.Process.Pid
}

// Output is what the daemon has written to stdout and stderr so far.
func (m *Mounted) Output() string {
	if m.logBuf == nil {
		return ""
	}
	return m.logBuf.String()
}

// Kill kills the daemon with SIGKILL (no clean unmount, arena left dirty)
// and removes the dead mount. Remount starts a new daemon.
func (m *Mounted) Kill() {
	m.t.Helper()
	if m.Cmd == nil {
		m.t.Fatal("Kill: no daemon running")
	}
	m.Cmd.Process.Kill()
	<-m.exited
	m.Cmd = nil
	m.unmountDead()
}

// Terminate sends SIGTERM and waits for the daemon to unmount and exit,
// failing the test if it does not exit with status 0 in time.
func (m *Mounted) Terminate() {
	m.t.Helper()
	if err := m.terminate(); err != nil {
		m.t.Error(err)
	}
}

// Stop sends SIGTERM and waits for the daemon to exit, and returns its
// exit status whatever it is (for tests of a daemon that must fail); a
// mount it leaves is removed. The error is for a daemon that did not exit
// in time (it is then killed).
func (m *Mounted) Stop() (*os.ProcessState, error) {
	m.t.Helper()
	st, err := m.stop()
	m.unmountDead()
	return st, err
}

// stop is Stop without the removal of a mount left.
func (m *Mounted) stop() (*os.ProcessState, error) {
	if m.Cmd == nil {
		return nil, nil
	}
	cmd := m.Cmd
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(unmountWait):
		cmd.Process.Kill()
		m.Cmd = nil
		select {
		case <-m.exited:
		case <-time.After(unmountWait):
			// The process is gone, but Wait has not returned (its output
			// pipes are stuck): remove the mount anyway.
		}
		m.unmountDead()
		return nil, fmt.Errorf("daemon did not exit %v after SIGTERM\n%s", unmountWait, m.Output())
	}
	m.Cmd = nil
	return cmd.ProcessState, nil
}

func (m *Mounted) terminate() error {
	if m.Cmd == nil {
		return nil
	}
	st, err := m.stop()
	if err != nil {
		return err
	}
	if !st.Success() {
		m.unmountDead()
		return fmt.Errorf("daemon exited with %v after SIGTERM\n%s", st, m.Output())
	}
	if mi, ok := fusefs.Mounted(m.Dir); ok && mi.FSType == "fuse.conquest" {
		m.unmountDead()
		return fmt.Errorf("daemon exited but %s is still mounted", m.Dir)
	}
	return nil
}

// stopProcess ends a daemon the test left running: SIGTERM, as `conquest
// umount` would leave it, and a forced cleanup if that fails.
func (m *Mounted) stopProcess() error {
	if m.Cmd == nil {
		m.unmountDead()
		return nil
	}
	return m.terminate()
}

// unmountDead removes a mount whose daemon is gone (ENOTCONN), if any.
func (m *Mounted) unmountDead() {
	if mi, ok := fusefs.Mounted(m.Dir); ok && strings.HasPrefix(mi.FSType, "fuse") {
		if fusefs.Unmount(m.Dir, false) != nil {
			fusefs.Unmount(m.Dir, true)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the daemon's output copier and the
// test reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
