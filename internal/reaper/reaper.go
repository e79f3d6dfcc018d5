package reaper

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// recordEnv names the record file in the reaper's environment.
const recordEnv = "CONQUEST_TEST_REAPER"

var (
	mu     sync.Mutex
	record *os.File // nil until Start, and in a process with no reaper
	keep   *os.File // the write end of the reaper's pipe, held for life
)

// Child makes this process the reaper if it was started as one: it waits
// for the test process, reaps, and exits. Call it first in TestMain.
func Child() {
	list := os.Getenv(recordEnv)
	if list == "" {
		return
	}
	waitParent()
	reap(list)
	os.Remove(list)
	os.Exit(0)
}

// Start starts the reaper of this test binary (once; later calls do
// nothing). Without one (it could not be started) the records go nowhere.
func Start() {
	mu.Lock()
	defer mu.Unlock()
	if record != nil || os.Getenv(recordEnv) != "" {
		return // started, or this is a reaper (whose TestMain missed Child)
	}
	f, err := os.CreateTemp("", "conquest-reaper-")
	if err != nil {
		return
	}
	r, w, err := os.Pipe()
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), recordEnv+"="+f.Name())
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		os.Remove(f.Name())
		r.Close()
		w.Close()
		return
	}
	r.Close()
	go cmd.Wait() // reaped here if it ends first (it should not)
	keep, record = w, f
}

// Mount records mount point dir (of any file system), before it is
// mounted, and the temporary directory of the test it is in (TempRoot).
func Mount(dir string) {
	add("mount", resolve(dir))
	if root := TempRoot(dir); root != "" {
		Remove(root)
	}
}

// Loop records loop device dev over the file back, as soon as it is known.
func Loop(dev, back string) {
	add("loop", dev, resolve(back))
	if root := TempRoot(back); root != "" {
		Remove(root)
	}
}

// Remove records directory path, to be removed after the mounts and loop
// devices: what lies in it on its own file system (never what is mounted
// in it).
func Remove(path string) { add("remove", resolve(path)) }

// TempRoot is the directory a test's t.TempDir made that holds path
// (t.TempDir is ROOT/NNN, ROOT made by os.MkdirTemp in $GOTMPDIR or the
// temporary directory, named after the test), or "" if path is not in one.
func TempRoot(path string) string {
	base := os.Getenv("GOTMPDIR")
	if base == "" {
		base = os.TempDir()
	}
	return testRoot(resolve(base), resolve(path))
}

// resolve is path absolute, with its symbolic links resolved as far as it
// exists (mountinfo and the loop devices name paths so).
func resolve(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	if r, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(r, filepath.Base(abs))
	}
	return abs
}

func add(fields ...string) {
	mu.Lock()
	defer mu.Unlock()
	if record != nil {
		record.WriteString(strings.Join(fields, "\t") + "\n")
	}
}

// waitParent returns when the test process is gone or a zombie.
func waitParent() {
	ppid := os.Getppid()
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-eof:
			return
		case <-t.C:
			if os.Getppid() != ppid || zombie(ppid) {
				return
			}
		}
	}
}

// zombie reports whether process pid's main thread has exited (state Z)
// or the process is gone.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false // not a stat line: never reap on what cannot be read
	}
	return s[i+2] == 'Z' || s[i+2] == 'X'
}

// reap does what the test binary's cleanups did not (see the package
// comment), for the records in the file list.
func reap(list string) {
	f, err := os.Open(list)
	if err != nil {
		return
	}
	var mounts, removes [][]string
	var loops [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		switch {
		case fields[0] == "mount" && len(fields) == 2:
			mounts = append(mounts, fields)
		case fields[0] == "loop" && len(fields) == 3:
			loops = append(loops, fields)
		case fields[0] == "remove" && len(fields) == 2:
			removes = append(removes, fields)
		}
	}
	f.Close()
	// Mounts last made first: one may be on a directory of another.
	for i := len(mounts) - 1; i >= 0; i-- {
		takeDown(mounts[i][1])
	}
	for _, l := range loops {
		detachLoop(l[1], l[2])
	}
	for _, r := range removes {
		removeOwn(r[1])
	}
}

// removeOwn removes path and what lies under it on the same file system,
// but never a mount point or anything on another file system (a mount
// that could not be taken down, one nobody recorded): those, and the
// directories above them, stay.
func removeOwn(path string) {
	st, err := os.Lstat(path)
	if err != nil {
		return
	}
	dev := st.Sys().(*syscall.Stat_t).Dev
	points := map[string]bool{}
	for _, m := range mounts() {
		points[m.dir] = true
	}
	var walk func(p string) bool // reports whether p was removed
	walk = func(p string) bool {
		if points[p] {
			return false
		}
		st, err := os.Lstat(p)
		if err != nil || st.Sys().(*syscall.Stat_t).Dev != dev {
			return false
		}
		if st.IsDir() {
			ents, err := os.ReadDir(p)
			if err != nil {
				return false
			}
			all := true
			for _, e := range ents {
				all = walk(filepath.Join(p, e.Name())) && all
			}
			if !all {
				return false
			}
		}
		return os.Remove(p) == nil
	}
	walk(path)
}

// takeDown aborts the FUSE connection of every mount on dir and detaches
// it, until none is left (mounts may be stacked).
func takeDown(dir string) {
	for range 8 {
		devs := mountsOn(dir)
		if len(devs) == 0 {
			return
		}
		for _, m := range devs {
			if strings.HasPrefix(m.fstype, "fuse") {
				if _, minor, ok := strings.Cut(m.dev, ":"); ok {
					os.WriteFile("/sys/fs/fuse/connections/"+minor+"/abort", []byte("1"), 0)
				}
			}
		}
		unix.Unmount(dir, unix.MNT_DETACH)
	}
}

// mountInfo is what reap needs of a mountinfo line.
type mountInfo struct{ dev, dir, fstype string }

// mounts lists this mount namespace's mounts.
func mounts() []mountInfo {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ms []mountInfo
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		m := mountInfo{dev: f[2], dir: unescape(f[4])}
		for i := 5; i+1 < len(f); i++ {
			if f[i] == "-" {
				m.fstype = f[i+1]
				break
			}
		}
		ms = append(ms, m)
	}
	return ms
}

// mountsOn lists the mounts whose mount point is dir.
func mountsOn(dir string) []mountInfo {
	var on []mountInfo
	for _, m := range mounts() {
		if m.dir == dir {
			on = append(on, m)
		}
	}
	return on
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// detachLoop detaches loop device dev if it is still backed by back (and
// not by a file someone attached since).
func detachLoop(dev, back string) {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return
	}
	if got := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)"); got != back {
		return
	}
	f, err := os.OpenFile(dev, os.O_RDONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
}

// testRoot is the directory t.TempDir made under tmp that holds path
// (tmp/TestName.../...), or "".
func testRoot(tmp, path string) string {
	rel, err := filepath.Rel(tmp, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return ""
	}
	first, _, _ := strings.Cut(rel, string(filepath.Separator))
	if !strings.HasPrefix(first, "Test") {
		return ""
	}
	return filepath.Join(tmp, first)
}
