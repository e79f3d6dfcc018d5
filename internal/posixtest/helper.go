package posixtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The helper process: the test binary re-executed with helperEnv set to the
// identity it should take. It drops privileges once (setgroups, setresgid,
// setresuid), then reads requests (one JSON line each) from stdin, performs
// each named operation and answers with one JSON line on stdout, until
// stdin closes. One helper per identity is started lazily and kept for the
// life of the test binary: starting a -race binary costs about a second.
//
// The helper drops privileges itself rather than being started with
// exec.Cmd's SysProcAttr.Credential: `go test` builds the binary under a
// 0700 temporary directory, which an unprivileged user cannot execute from.

const (
	helperEnv    = "CONQUEST_POSIXTEST_HELPER"
	replyMarker  = "posixtest-helper-reply:"
	keepIdentity = -1
)

var helperInstalled bool

// HelperMain must be called first in TestMain of every test package that
// runs the suite (or uses RunAs). In the parent it only records that the
// helper is available; in a helper process it serves requests and exits.
func HelperMain() {
	id := os.Getenv(helperEnv)
	if id == "" {
		helperInstalled = true
		return
	}
	os.Exit(helperProcess(id))
}

type helperRequest struct {
	Op   string
	Args []string
}

type helperReply struct {
	Errno int    // 0: the operation succeeded
	Fatal string // the helper could not run the operation at all
	Out   string
}

// Identity says as whom a helper runs.
type Identity struct {
	UID, GID int
	Groups   []int
}

func (id Identity) key() string { return fmt.Sprintf("%d:%d:%v", id.UID, id.GID, id.Groups) }

// Root keeps the caller's identity (a second process, same user).
var Root = Identity{UID: keepIdentity, GID: keepIdentity}

// Nobody is the unprivileged identity used for permission checks.
var Nobody = Identity{UID: nobodyUID, GID: nobodyGID}

// helperProc is a running helper.
type helperProc struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer
}

var helpers struct {
	sync.Mutex
	m map[string]*helperProc
}

// helperFor returns the running helper for id, starting it if needed.
func helperFor(id Identity) (*helperProc, error) {
	helpers.Lock()
	defer helpers.Unlock()
	if h := helpers.m[id.key()]; h != nil {
		return h, nil
	}
	env, err := json.Marshal(id)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(env))
	cmd.Dir = "/"
	// The helper dies with the test binary even if stdin is inherited
	// somewhere.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	h := &helperProc{cmd: cmd, stderr: &bytes.Buffer{}}
	cmd.Stderr = h.stderr
	if h.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h.out = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if helpers.m == nil {
		helpers.m = map[string]*helperProc{}
	}
	helpers.m[id.key()] = h
	return h, nil
}

// dropHelper forgets a helper that failed, so the next call starts anew.
func dropHelper(id Identity, h *helperProc) {
	helpers.Lock()
	if helpers.m[id.key()] == h {
		delete(helpers.m, id.key())
	}
	helpers.Unlock()
	h.in.Close()
	h.cmd.Process.Kill()
	h.cmd.Wait()
}

// RunAs runs op in a helper process as id and returns its output and the
// errno it ended with (nil on success). It fails the test if the helper
// could not run the operation at all. Ops and their arguments are listed in
// helperOps.
func RunAs(t testing.TB, id Identity, op string, args ...string) (string, error) {
	t.Helper()
	if !helperInstalled {
		t.Fatal("posixtest: HelperMain was not called from TestMain; the suite needs it for second-process checks")
	}
	h, err := helperFor(id)
	if err != nil {
		t.Fatalf("starting helper: %v", err)
	}
	req, err := json.Marshal(helperRequest{Op: op, Args: args})
	ok(t, err, "encode helper request")
	h.mu.Lock()
	defer h.mu.Unlock()
	var line string
	if _, err = h.in.Write(append(req, '\n')); err == nil {
		for {
			line, err = h.out.ReadString('\n')
			if err != nil || strings.HasPrefix(line, replyMarker) {
				break
			}
		}
	}
	if err != nil {
		dropHelper(id, h)
		t.Fatalf("helper %s %q as uid %d: %v\nstderr: %s", op, args, id.UID, err, h.stderr.String())
	}
	var rep helperReply
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(line), replyMarker)), &rep); err != nil {
		t.Fatalf("helper %s: bad reply %q: %v", op, line, err)
	}
	if rep.Fatal != "" {
		t.Fatalf("helper %s %q as uid %d: %s", op, args, id.UID, rep.Fatal)
	}
	if rep.Errno != 0 {
		return rep.Out, syscall.Errno(rep.Errno)
	}
	return rep.Out, nil
}

// helperProcess runs in the child. The return value is the exit status.
func helperProcess(rawID string) int {
	out := bufio.NewWriter(os.Stdout)
	reply := func(r helperReply) {
		b, _ := json.Marshal(r)
		fmt.Fprintf(out, "%s%s\n", replyMarker, b)
		out.Flush()
	}
	var id Identity
	if err := json.Unmarshal([]byte(rawID), &id); err != nil {
		fmt.Fprintf(os.Stderr, "posixtest helper: bad identity %q: %v\n", rawID, err)
		return 2
	}
	if id.UID != keepIdentity {
		groups := id.Groups
		if groups == nil {
			groups = []int{}
		}
		for _, step := range []struct {
			name string
			fn   func() error
		}{
			{"setgroups", func() error { return syscall.Setgroups(groups) }},
			{"setresgid", func() error { return syscall.Setresgid(id.GID, id.GID, id.GID) }},
			{"setresuid", func() error { return syscall.Setresuid(id.UID, id.UID, id.UID) }},
		} {
			if err := step.fn(); err != nil {
				fmt.Fprintf(os.Stderr, "posixtest helper: %s: %v\n", step.name, err)
				return 2
			}
		}
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var req helperRequest
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			reply(helperReply{Fatal: "bad request: " + err.Error()})
			continue
		}
		fn, found := helperOps[req.Op]
		if !found {
			reply(helperReply{Fatal: "unknown op " + req.Op})
			continue
		}
		res, err := fn(req.Args)
		var errno syscall.Errno
		switch {
		case err == nil:
			reply(helperReply{Out: res})
		case errors.As(err, &errno):
			reply(helperReply{Errno: int(errno), Out: res})
		default:
			reply(helperReply{Fatal: err.Error()})
		}
	}
	return 0
}

// helperOps are the operations a helper can run. Arguments are strings;
// numbers are decimal or 0-prefixed octal (strconv base 0).
var helperOps = map[string]func(a []string) (string, error){
	"fsx": func(a []string) (string, error) { // dir seed ops maxLen: what failed, or ""
		return runFsx(a[0], uint64(num(a[1])), int(num(a[2])), num(a[3])), nil
	},
	"stat": func(a []string) (string, error) {
		var st unix.Stat_t
		if err := unix.Lstat(a[0], &st); err != nil {
			return "", err
		}
		return fmt.Sprintf("%o %d %d", st.Mode, st.Uid, st.Gid), nil
	},
	"open": func(a []string) (string, error) { // path flags mode
		fd, err := unix.Open(a[0], int(num(a[1]))|unix.O_CLOEXEC, uint32(num(a[2])))
		if err != nil {
			return "", err
		}
		return "", unix.Close(fd)
	},
	"read": func(a []string) (string, error) {
		b, err := ReadFile(a[0])
		return string(b), unwrapErrno(err)
	},
	"write": func(a []string) (string, error) { // path data: open O_WRONLY, write at 0
		fd, err := unix.Open(a[0], unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte(a[1]))
		return "", err
	},
	"create": func(a []string) (string, error) { // path mode
		fd, err := unix.Open(a[0], unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, uint32(num(a[1])))
		if err != nil {
			return "", err
		}
		return "", unix.Close(fd)
	},
	"mkdir":    func(a []string) (string, error) { return "", unix.Mkdir(a[0], uint32(num(a[1]))) },
	"unlink":   func(a []string) (string, error) { return "", unix.Unlink(a[0]) },
	"rmdir":    func(a []string) (string, error) { return "", unix.Rmdir(a[0]) },
	"rename":   func(a []string) (string, error) { return "", unix.Rename(a[0], a[1]) },
	"link":     func(a []string) (string, error) { return "", unix.Link(a[0], a[1]) },
	"symlink":  func(a []string) (string, error) { return "", unix.Symlink(a[0], a[1]) },
	"chmod":    func(a []string) (string, error) { return "", unix.Chmod(a[0], uint32(num(a[1]))) },
	"chown":    func(a []string) (string, error) { return "", unix.Lchown(a[0], int(num(a[1])), int(num(a[2]))) },
	"truncate": func(a []string) (string, error) { return "", unix.Truncate(a[0], num(a[1])) },
	"fallocate": func(a []string) (string, error) { // path mode off len
		fd, err := unix.Open(a[0], unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return "", unix.Fallocate(fd, uint32(num(a[1])), num(a[2]), num(a[3]))
	},
	"setxattr": func(a []string) (string, error) { return "", unix.Lsetxattr(a[0], a[1], []byte(a[2]), 0) },
	"getxattr": func(a []string) (string, error) {
		buf := make([]byte, 4096)
		n, err := unix.Lgetxattr(a[0], a[1], buf)
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	},
	"run": func(a []string) (string, error) { // a program and its arguments: its standard output
		// Run from the helper, not from the test binary: a process serving
		// the mount in-process must not exec a program that lies on it (the
		// fork waits for the exec, the exec for the server, and a garbage
		// collection in the test binary meanwhile for the fork).
		out, err := exec.Command(a[0], a[1:]...).Output()
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("%s: %v: %s", a[0], ee, ee.Stderr)
		}
		return strings.TrimSpace(string(out)), err
	},
	"mmapread": func(a []string) (string, error) { // path off n: "size hex-bytes" read through a shared mapping
		// From the helper: a page fault on the mount in a process that
		// serves it in-process holds a P the garbage collector then waits
		// for, while the fault waits for the server.
		return mmapRead(a[0], num(a[1]), num(a[2]))
	},
	"listxattr": func(a []string) (string, error) { // the names, sorted, space-separated
		buf := make([]byte, 64<<10)
		n, err := unix.Llistxattr(a[0], buf)
		if err != nil {
			return "", err
		}
		names := strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00")
		sort.Strings(names)
		return strings.Join(names, " "), nil
	},
	"utimes": func(a []string) (string, error) { // path now|set
		if a[1] == "now" {
			return "", unix.UtimesNanoAt(unix.AT_FDCWD, a[0], nil, 0)
		}
		ts := []unix.Timespec{{Sec: 1000000000}, {Sec: 1000000000}}
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, a[0], ts, 0)
	},
	"setlk": func(a []string) (string, error) { // path type(r|w) start len
		fd, lk, err := lockArgs(a)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return "", unix.FcntlFlock(uintptr(fd), unix.F_SETLK, lk)
	},
	"getlk": func(a []string) (string, error) { // path type start len -> "type pid start len"
		fd, lk, err := lockArgs(a)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		if err := unix.FcntlFlock(uintptr(fd), unix.F_GETLK, lk); err != nil {
			return "", err
		}
		return fmt.Sprintf("%d %d %d %d", lk.Type, lk.Pid, lk.Start, lk.Len), nil
	},
	"flock": func(a []string) (string, error) { // path sh|ex
		fd, err := unix.Open(a[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		how := unix.LOCK_SH
		if a[1] == "ex" {
			how = unix.LOCK_EX
		}
		return "", unix.Flock(fd, how|unix.LOCK_NB)
	},
}

// mmapRead maps the file read-only and shared, and copies n bytes at off
// (fewer if the file is shorter). The file may shrink meanwhile; a page
// past its new end faults (SIGBUS), which ends the copy there. It returns
// the size the file had when mapped and the bytes, in hex.
func mmapRead(path string, off, n int64) (string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	n = max(0, min(n, st.Size-off))
	if n == 0 {
		return fmt.Sprintf("%d ", st.Size), nil
	}
	mem, err := unix.Mmap(fd, 0, int(off+n), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return "", err
	}
	defer unix.Munmap(mem)
	dst := make([]byte, n)
	done := copyFaulting(dst, mem[off:], off)
	return fmt.Sprintf("%d %x", st.Size, dst[:done]), nil
}

// copyFaulting copies src to dst page by page (src starts at file offset
// off) and returns how much it copied before a fault, if any.
func copyFaulting(dst, src []byte, off int64) (done int) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		// A memory fault (its panic value has Addr) ends the copy; done
		// holds what was copied before it. Anything else is a bug.
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
		}
	}()
	for done < len(dst) {
		end := min(len(dst), done+4096-int((off+int64(done))%4096))
		copy(dst[done:end], src[done:end])
		done = end
	}
	return done
}

func lockArgs(a []string) (int, *unix.Flock_t, error) {
	fd, err := unix.Open(a[0], unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, err
	}
	typ := int16(unix.F_RDLCK)
	if a[1] == "w" {
		typ = unix.F_WRLCK
	}
	return fd, &unix.Flock_t{Type: typ, Whence: 0, Start: num(a[2]), Len: num(a[3])}, nil
}

func num(s string) int64 {
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		panic("posixtest helper: bad number " + s)
	}
	return n
}

func unwrapErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// oct formats a mode for a helper argument.
func oct(m uint32) string { return fmt.Sprintf("0%o", m) }
