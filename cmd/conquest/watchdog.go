package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"conquest/fusefs"
)

// The watchdog is a small process that mount starts beside each daemon
// (`conquest watchdog`, hidden). It aborts the daemon's FUSE connection
// if the daemon dies while the connection's device is still open.
//
// Why: the daemon answers some requests by telling the kernel to drop
// cached pages of a file (fusefs's atimeCache at an open, and others). The
// kernel locks each page to drop it, and a page stays locked while a READ
// or WRITE of it waits for its reply. Another daemon thread answers that
// request and the drop goes on. But if the daemon is killed (kill -9) at
// that moment, its other threads die and the dropping thread cannot: it
// waits, unkillable, for a reply no one will send. While it waits, the
// process keeps its descriptors, the FUSE device among them, so the kernel
// never aborts the connection: every request on the mount waits for good,
// and the dead daemon keeps the arena locked, so a remount is refused. An
// outside review saw it once in 52 kill -9 rounds (session 49), another
// in 12 of 90 under a load of readers reopening files that writers kept
// changing; only a write to the connection's fusectl abort file ended it.
// The watchdog makes that write. Then every waiting request fails
// (ECONNABORTED; later ones ENOTCONN), the stuck thread gets its page and
// exits, and the arena's lock is released, as after any kill -9.
//
// How it knows: a pipe whose only writer is the daemon reads EOF (every
// descriptor of the daemon's is closed: it exited, and the kernel has
// ended or aborted the connection, so only a connection whose device
// someone else holds is aborted then, quietly); or, looked at every
// watchdogInterval, the daemon is dying with its descriptors still open
// (daemonProc.dying: gone from /proc, a reused pid, its main thread a
// zombie, or SIGKILL pending, for when the main thread itself is the
// stuck one) for watchdogGrace more looks in a row (a daemon killed the
// plain way closes its descriptors within them). If the connection is
// still there then (its "waiting" file reads empty once it has ended),
// the watchdog aborts it and says so in the daemon's log. The control
// files were opened by the daemon and name its connection only
// (fusefs.Server.ControlFiles), never a later one that took the same
// number. While it runs the watchdog holds them, so fusectl cannot be
// unmounted (EBUSY).

// watchdogInterval is how often the watchdog looks at its daemon.
const watchdogInterval = 200 * time.Millisecond

// Descriptors the watchdog inherits (ExtraFiles, from 3 on).
const (
	watchdogAbortFD   = 3
	watchdogWaitingFD = 4
	watchdogLifeFD    = 5
)

// watchdogLife is the daemon's end of the pipe whose EOF tells the
// watchdog that the daemon has exited; held (never closed) for the life of
// the process, and kept reachable here so no finalizer closes it.
var watchdogLife *os.File

func watchdogCommand() *cli.Command {
	return &cli.Command{
		Name:      "watchdog",
		Hidden:    true,
		Usage:     "internal: abort the FUSE connection of a daemon that died with it still open",
		UsageText: "conquest watchdog --pid PID --start TICKS MOUNTPOINT (started by mount, with descriptors 3-5)",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "pid", Required: true, Usage: "the daemon's process id"},
			&cli.StringFlag{Name: "start", Required: true, Usage: "the daemon's start time (field 22 of /proc/PID/stat)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return errors.New("watchdog: give the mount point")
			}
			abort := os.NewFile(watchdogAbortFD, "abort")
			waiting := os.NewFile(watchdogWaitingFD, "waiting")
			life := os.NewFile(watchdogLifeFD, "daemon-life")
			if !fusefs.OnFusectl(watchdogAbortFD) || !fusefs.OnFusectl(watchdogWaitingFD) || !isPipe(watchdogLifeFD) {
				return errors.New("watchdog: started without its descriptors (mount starts it)")
			}
			// A signal for the daemon's whole group (a terminal's, a
			// service manager's SIGTERM) must leave the watchdog running:
			// the daemon, if it is stuck, is when it is needed. It leaves
			// by itself once the daemon has gone; SIGKILL still ends it.
			signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
			watch(c.Int("pid"), c.String("start"), c.Args().First(), abort, waiting, life, os.Stderr, watchdogInterval)
			return nil
		},
	}
}

// watch waits for daemon pid (started at start) to die or exit, then
// aborts its connection if that is still there (see the top of this file).
// log gets one line when the watchdog ends a connection its dead daemon
// left waiting.
func watch(pid int, start, mp string, abort, waiting, life *os.File, log io.Writer, every time.Duration) {
	exited := make(chan struct{})
	go func() {
		// EOF: the daemon's descriptors are all closed. Any other end of
		// the read leaves the daemon's fate to the looks at /proc.
		if _, err := io.Copy(io.Discard, life); err == nil {
			close(exited)
		}
	}()
	d := &daemonProc{pid: pid, start: start}
	defer d.close()
	tick := time.NewTicker(every)
	defer tick.Stop()
	dying := 0 // looks in a row that found the daemon dying with its descriptors open
	for {
		select {
		case <-exited:
			// The daemon closed the device with the rest: the kernel has
			// ended the connection or aborted it (its "waiting" count may
			// still show callers not yet woken), unless another process
			// holds the device (none should: it is close-on-exec). Quietly.
			if _, ok := waitingRequests(waiting); ok {
				abort.Write([]byte("1\n"))
			}
			return
		case <-tick.C:
			if !d.dying() {
				dying = 0
				continue
			}
			// A daemon killed the plain way closes its descriptors soon,
			// once its memory is unmapped (a large arena takes a while).
			if dying++; dying <= watchdogGrace {
				continue
			}
			n, ok := waitingRequests(waiting)
			if !ok {
				return // the connection has ended
			}
			if _, err := abort.Write([]byte("1\n")); err != nil {
				fmt.Fprintf(log, "conquest: watchdog: the daemon of %s (pid %d) died with its FUSE connection open; aborting the connection: %v\n", mp, pid, err)
				return
			}
			fmt.Fprintf(log, "conquest: watchdog: the daemon of %s (pid %d) died with its FUSE connection open (%s requests waiting); aborted the connection: calls that were waiting fail with ECONNABORTED, later ones with ENOTCONN until `conquest umount %s`\n",
				mp, pid, n, mp)
			return
		}
	}
}

// watchdogGrace is how many more looks (watchdogInterval apart: 2 s) the
// daemon may be seen dying with its descriptors open before the watchdog
// aborts.
const watchdogGrace = 10

// waitingRequests reads the connection's "waiting" file: the number of
// requests waiting, and false once the connection has ended (it reads
// empty then). fusectl's files cannot seek: one read from the start.
func waitingRequests(waiting *os.File) (string, bool) {
	buf := make([]byte, 32)
	n, _ := waiting.Read(buf)
	if n == 0 {
		return "", false
	}
	return strings.TrimSpace(string(buf[:n])), true
}

// daemonProc is the watchdog's view of its daemon: its /proc/PID stat and
// status, opened once and read again at each look, so that a watchdog out
// of descriptors still sees its daemon, and a pid taken by a later process
// is never read (reads of a reaped process's files fail with ESRCH).
type daemonProc struct {
	pid          int
	start        string
	stat, status *os.File
}

// dying reports whether the daemon is gone or dying: gone from /proc,
// another start time, its main thread a zombie (Go ends its main thread
// only with the process), or SIGKILL pending (the main thread itself may
// be the one stuck, in uninterruptible sleep). An error other than the
// process's absence (out of descriptors, say) says nothing: alive then.
func (d *daemonProc) dying() bool {
	if d.stat == nil {
		proc := procDir + "/" + strconv.Itoa(d.pid)
		stat, err := os.Open(proc + "/stat")
		if err != nil {
			return gone(err)
		}
		status, err := os.Open(proc + "/status")
		if err != nil {
			stat.Close()
			return gone(err)
		}
		d.stat, d.status = stat, status
	}
	buf := make([]byte, 8<<10)
	n, err := d.stat.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return gone(err)
	}
	st, ok := statStart(string(buf[:n]))
	if !ok {
		return false
	}
	if st.state == "Z" || st.state == "X" || st.state == "x" || st.start != d.start {
		return true
	}
	n, err = d.status.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return gone(err)
	}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(val), 16, 64); err == nil && mask&(1<<(syscall.SIGKILL-1)) != 0 {
			return true
		}
	}
	return false
}

func (d *daemonProc) close() {
	if d.stat != nil {
		d.stat.Close()
		d.status.Close()
	}
}

// procDir is where daemonProc finds /proc (a variable for tests).
var procDir = "/proc"

// gone reports whether err, from a file of /proc/PID, says that the
// process is gone.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

// procStat is what the watchdog reads of /proc/PID/stat.
type procStat struct{ state, start string }

// statStart parses a /proc/PID/stat line: the state (field 3) and the start
// time (field 22).
func statStart(s string) (procStat, bool) {
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return procStat{}, false
	}
	return procStat{state: f[0], start: f[19]}, true
}

// processStarted is the start time of the running process pid, or "".
func processStarted(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	st, ok := statStart(string(b))
	if !ok || st.state == "Z" || st.state == "X" || st.state == "x" {
		return ""
	}
	return st.start
}

// startWatchdog starts this daemon's watchdog for the mount of srv on mp.
// Without one (no fusectl, not root) the daemon runs as before; the
// reason is logged.
func startWatchdog(srv *fusefs.Server, mp string, rep *reporter) {
	fail := func(err error) { rep.logf("no watchdog for %s: %v", mp, err) }
	start := processStarted(os.Getpid())
	if start == "" {
		fail(errors.New("cannot read this process's start time"))
		return
	}
	abort, waiting, err := srv.ControlFiles()
	if err != nil {
		fail(err)
		return
	}
	defer abort.Close()
	defer waiting.Close()
	r, w, err := os.Pipe()
	if err != nil {
		fail(err)
		return
	}
	defer r.Close()
	cmd := exec.Command("/proc/self/exe", "watchdog", "--pid", strconv.Itoa(os.Getpid()), "--start", start, mp)
	// Not os.Args[0]: run under a mount helper's name (mount.conquest),
	// the command line would be taken for a mount (helper.go). Nor plain
	// "conquest": `pidof conquest`, which a script may use to kill the
	// daemon, matches argv[0], and would kill its watchdog with it (its
	// command name, which pgrep, pkill and killall match, is "exe", from
	// /proc/self/exe).
	cmd.Args[0] = "conquest-watchdog"
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{abort, waiting, r}
	if st, err := os.Stderr.Stat(); err == nil && st.Mode()&(fs.ModeNamedPipe|fs.ModeSocket) == 0 {
		// The daemon's log file, or its terminal. Never a pipe or a
		// socket: whoever reads the daemon's output until EOF would wait
		// for the watchdog too.
		cmd.Stderr = os.Stderr
	}
	// Its own session: a terminal's ^C or hangup is for the daemon, which
	// unmounts; the watchdog then follows it out.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// Descriptors this process inherited without close-on-exec (a
	// parent's pipe, say) would live on in the watchdog, and so would
	// whatever waits for their EOF.
	closeOnExecAll()
	if err := cmd.Start(); err != nil {
		w.Close()
		fail(err)
		return
	}
	watchdogLife = w
	go cmd.Wait() // reaped if it ends first
}

// isPipe reports whether descriptor fd is a pipe.
func isPipe(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}

// closeOnExecAll marks every descriptor of this process from 3 on
// close-on-exec.
func closeOnExecAll() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}
