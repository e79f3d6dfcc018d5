package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
	"conquest/pram"
)

// readyTimeout bounds how long `conquest mount` waits for its daemon.
const readyTimeout = 2 * time.Minute

func mountCommand() *cli.Command {
	return &cli.Command{
		Name:  "mount",
		Usage: "mount a Conquest file system (the embedded default, or --pram/--disk)",
		UsageText: "conquest mount [--pram PATH --disk PATH] [--foreground] [--private | --allow-other] [--writeback-cache] [--cached-writes] [--read-only] [--noatime] [--nosuid] [--nodev] [--noexec] [--commit DURATION] MOUNTPOINT\n" +
			"mount -t fuse.conquest ARENA|default MOUNTPOINT -o disk=PATH[,ro,noatime,...]   (mount(8), /etc/fstab; see README)",
		Description: "Without --foreground, mount starts a daemon and returns once the file system is ready;\n" +
			"the daemon logs to conquest.log in the data directory ($CONQUEST_HOME, else\n" +
			"$XDG_DATA_HOME/conquest, else ~/.local/share/conquest). With no --pram/--disk the embedded\n" +
			"default images in the data directory are used, and formatted on first use. With --foreground\n" +
			"the daemon stays attached and unmounts cleanly on SIGINT, SIGTERM or SIGHUP (its terminal\n" +
			"closed); if files are open there, it detaches the mount and serves them until they are\n" +
			"closed, or until a second signal. An arena left open by a crash of the whole system (power\n" +
			"loss, kernel crash) is checked in full first, and refused if damaged (`conquest fsck\n" +
			"--repair` repairs it). Like any mounted file system it is open to every user, with\n" +
			"permission bits enforced by the kernel (allow_other, when root mounts or /etc/fuse.conf has\n" +
			"user_allow_other); --private keeps it to the mounting user.",
		Flags: append(deviceFlags(),
			&cli.BoolFlag{Name: "foreground", Aliases: []string{"f"}, Usage: "serve in this process until unmounted or interrupted"},
			&cli.BoolFlag{Name: "allow-other", Usage: "let other users use the mount (the default where FUSE allows it; permission bits are always enforced)"},
			&cli.BoolFlag{Name: "private", Usage: "only the mounting user (and root) may use the mount"},
			&cli.BoolFlag{Name: "writeback-cache", Usage: "let the kernel buffer writes (faster large writes, slower small-file create/delete)"},
			&cli.BoolFlag{Name: "cached-writes", Usage: "keep what write-only descriptors write in the kernel's page cache too (faster first re-read of a file just written, slower writes)"},
			&cli.BoolFlag{Name: "nosuid", Usage: "set-user-ID and set-group-ID bits of programs on the mount take no effect (always so for mounts by other users than root)"},
			&cli.BoolFlag{Name: "nodev", Usage: "device nodes on the mount cannot be opened (always so for mounts by other users than root)"},
			&cli.BoolFlag{Name: "read-only", Aliases: []string{"ro"}, Usage: "mount read-only: every change fails with EROFS, and reads leave atime alone"},
			&cli.BoolFlag{Name: "noatime", Usage: "never update access times (the default is relatime, as on ext4)"},
			&cli.BoolFlag{Name: "noexec", Usage: "programs on the mount cannot be executed (needs root)"},
			&cli.StringFlag{Name: "commit", Value: pram.DefaultCheckpointInterval.String(), Usage: "a number of seconds or a duration (500ms, 5s, 1m): how long a change may stay only in the arena's RAM copy before it is checkpointed to the image, and large-file data unsynced on the disk before a background sync starts (what a power loss can lose; fsync makes everything durable at once; at least 10ms)"},
			&cli.IntFlag{Name: "ready-fd", Hidden: true, Usage: "internal: report readiness on this descriptor"},
		),
		Action: func(c *cli.Context) (err error) {
			var rep *reporter
			if c.Bool("foreground") {
				// Every refusal reaches a waiting parent (daemonize), not
				// only serve's: the checks below run again here, and a
				// mount made meanwhile by another is found by them.
				rep = newReporter(c.Int("ready-fd"), c.App.ErrWriter)
				defer func() {
					if err != nil {
						rep.fail(err)
					}
				}()
			}
			if c.NArg() != 1 {
				return errors.New("mount needs exactly one MOUNTPOINT (flags go before it)")
			}
			mp, cleared, err := checkMountpoint(c.Args().First(), func(s string) { fmt.Fprintf(c.App.ErrWriter, "conquest: %s\n", s) })
			if err != nil {
				return err
			}
			if cleared {
				fmt.Fprintf(c.App.ErrWriter, "conquest: %s held a dead Conquest mount (its daemon died): unmounted it\n", mp)
			}
			im, err := resolveImages(c)
			if err != nil {
				return err
			}
			allowOther, err := allowOther(c.Bool("allow-other"), c.Bool("private"))
			if err != nil {
				return err
			}
			commit, err := parseCommit(c.String("commit"))
			if err != nil {
				return fmt.Errorf("--commit %s: %w", c.String("commit"), err)
			}
			ms := mountSettings{
				fuse: fusefs.Options{AllowOther: allowOther, WritebackCache: c.Bool("writeback-cache"), CachedWrites: c.Bool("cached-writes"),
					NoSUID: c.Bool("nosuid"), NoDev: c.Bool("nodev"), NoExec: c.Bool("noexec"),
					ReadOnly: c.Bool("read-only"), NoAtime: c.Bool("noatime")},
				commit:  commit,
				noAtime: c.Bool("noatime"),
			}
			if ms.fuse.NoExec && os.Geteuid() != 0 {
				return errors.New("--noexec needs root (it is set on the mount point after mounting)")
			}
			if !c.Bool("foreground") {
				return daemonize(c, im, mp, ms)
			}
			return serve(im, mp, ms, rep)
		},
	}
}

// checkMountpoint resolves dir and checks that it is a directory not already
// carrying a live Conquest mount. A dead Conquest mount there (its daemon
// was killed: every access fails with ENOTCONN, and nothing can revive it)
// is unmounted first, as a reboot would clear it after a crash; cleared says
// so. Dead mounts of other file systems are left to their owners.
func checkMountpoint(dir string, note func(string)) (abs string, cleared bool, err error) {
	abs, err = mountpointPath(dir)
	if err != nil {
		return "", false, err
	}
	if cleared, _, err = clearDeadMount(abs, note); err != nil {
		return "", false, err
	}
	st, err := os.Stat(abs)
	switch {
	case os.IsNotExist(err):
		return "", cleared, fmt.Errorf("%s: mount point does not exist", abs)
	case errors.Is(err, syscall.ENOTCONN):
		return "", cleared, fmt.Errorf("%s: a dead mount is there (its daemon died): unmount it first (fusermount3 -u %s)", abs, abs)
	case err != nil:
		return "", cleared, fmt.Errorf("%s: %v", abs, errors.Unwrap(err))
	case !st.IsDir():
		return "", cleared, fmt.Errorf("%s: mount point is not a directory", abs)
	}
	if err := alreadyMounted(abs); err != nil {
		return "", cleared, err
	}
	return abs, cleared, nil
}

// mountpointPath is the absolute path of the mount point dir, its symbolic
// links followed as mount(8) follows them (fusermount3 refused a link to a
// directory with a bare "exit status 1"), without asking the file system
// mounted there anything: a stat of the mount point of a stopped or stuck
// daemon waits for it, and umount and mount must not (clearDeadMount,
// abortStuck). So the parent directory's links are followed with
// EvalSymlinks, and the last component's with readlink, which a mount
// point answers at once (EINVAL: not a link). A parent that cannot be
// resolved is left as it is.
func mountpointPath(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for range 40 { // as the kernel's limit on links followed
		parent, base := filepath.Split(abs)
		if real, err := filepath.EvalSymlinks(parent); err == nil {
			abs = filepath.Join(real, base)
		}
		target, err := os.Readlink(abs)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(abs), target)
		}
		abs = filepath.Clean(target)
	}
	return abs, nil
}

// alreadyMounted is the refusal of a mount point that carries a Conquest
// mount, or nil.
func alreadyMounted(abs string) error {
	if mi, ok := fusefs.Mounted(abs); ok && mi.FSType == "fuse.conquest" {
		return fmt.Errorf("%s: a Conquest file system (%s) is already mounted here", abs, strings.TrimPrefix(mi.Source, fsnamePrefix))
	}
	return nil
}

// lockMountpoint takes an exclusive lock on the directory at mp (flock,
// waiting up to 10 s) until the returned function is called, and then
// checks again that no Conquest mount is there: two mounts started
// together both passed checkMountpoint before either had mounted, and
// stacked their file systems there. A directory that cannot be opened or
// locked is not (mounting on it fails and says why).
func lockMountpoint(mp string) (unlock func(), err error) {
	fd, err := unix.Open(mp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return func() {}, nil
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil || !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			break
		}
	}
	unlock = func() { unix.Close(fd) }
	switch {
	case errors.Is(err, unix.EWOULDBLOCK):
		err = fmt.Errorf("%s: another mount on this mount point has not finished in 10 s", mp)
	default: // locked, or a file system without flock: checked anyway
		err = alreadyMounted(mp)
	}
	if err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// clearDeadMount unmounts the Conquest mount on abs if its daemon died (every
// request fails with ENOTCONN). If processes still hold files or directories
// of it, it is detached instead (they keep getting ENOTCONN), and detached
// says so. cleared is false when abs holds no dead Conquest mount.
func clearDeadMount(abs string, note func(string)) (cleared, detached bool, err error) {
	mi, ok := fusefs.Mounted(abs)
	if !ok || mi.FSType != "fuse.conquest" {
		return false, false, nil
	}
	if dead, err := mountDead(mi, note); err != nil || !dead {
		return false, false, err
	}
	if uerr := fusefs.Unmount(abs, false); uerr == nil {
		return true, false, nil
	}
	if uerr := fusefs.Unmount(abs, true); uerr != nil {
		return false, false, fmt.Errorf("%s: a dead Conquest mount is there and cannot be unmounted: %v", abs, uerr)
	}
	return true, true, nil
}

// mountDead reports whether the Conquest mount mi has lost its daemon. A
// daemon holds its arena's lock while it serves, so a held lock means it is
// alive, and finding that out asks nothing of the mount (a hung daemon cannot
// hang umount), unless every holder of the lock is dying (abortStuck: a
// daemon killed with a thread stuck in the kernel, or just killed and still
// exiting). A free lock is not proof of death: the file at the arena's
// path may not be the one the daemon opened (moved away and replaced under a
// live mount). So the mount itself is probed (probeDead). note is told of
// an abort; an error is a stuck mount that could not be aborted.
func mountDead(mi fusefs.MountInfo, note func(string)) (bool, error) {
	if arena, ok := strings.CutPrefix(mi.Source, fsnamePrefix); ok && exists(arena) && inUse(arena) {
		return abortStuck(mi, arena, note)
	}
	return probeDead(mi.Dir, deadProbeTimeout), nil
}

// probeDead reports whether the mount on dir fails statfs(2) with
// ENOTCONN (or ECONNABORTED: aborted while the probe waited), which the kernel always passes to the daemon (a stat may be
// answered from attributes it cached before the daemon died) and fails at
// once with ENOTCONN once the daemon is gone; a probe that gets no answer
// within timeout means a daemon that is there but hung, which is not dead.
func probeDead(dir string, timeout time.Duration) bool {
	err, answered := statfsWithin(dir, timeout)
	return answered && connGone(err)
}

// statfsWithin asks the mount on dir for statfs(2), and reports its error
// and whether it answered within timeout (a probe left waiting on a hung
// mount ends with the process).
func statfsWithin(dir string, timeout time.Duration) (err error, answered bool) {
	probe := make(chan error, 1)
	go func() {
		var sfs unix.Statfs_t
		probe <- unix.Statfs(dir, &sfs)
	}()
	select {
	case err := <-probe:
		return err, true
	case <-time.After(timeout):
		return nil, false
	}
}

// deadProbeTimeout bounds mountDead's statfs of a mount whose arena lock is
// free; a dead mount answers at once.
const deadProbeTimeout = 2 * time.Second

// fsnamePrefix + the arena path is the mount's source in /proc/mounts, so
// umount and df can find the arena of a mount point.
const fsnamePrefix = "conquest:"

// mountSettings are the choices of `conquest mount` beyond the images.
type mountSettings struct {
	fuse    fusefs.Options
	commit  time.Duration // --commit
	noAtime bool          // --noatime (a read-only mount has no atime updates either)
}

// daemonArgs are the flags that give a daemon these settings.
func (ms mountSettings) daemonArgs() []string {
	var args []string
	if ms.fuse.AllowOther {
		args = append(args, "--allow-other")
	} else {
		args = append(args, "--private")
	}
	for _, f := range []struct {
		on   bool
		flag string
	}{
		{ms.fuse.WritebackCache, "--writeback-cache"},
		{ms.fuse.CachedWrites, "--cached-writes"},
		{ms.fuse.NoSUID, "--nosuid"},
		{ms.fuse.NoDev, "--nodev"},
		{ms.fuse.NoExec, "--noexec"},
		{ms.fuse.ReadOnly, "--read-only"},
		{ms.noAtime, "--noatime"},
	} {
		if f.on {
			args = append(args, f.flag)
		}
	}
	return append(args, "--commit="+ms.commit.String())
}

// serve runs the file system in this process until it is unmounted.
func serve(im images, mp string, ms mountSettings, rep *reporter) error {
	o, commit := ms.fuse, ms.commit
	// Catch SIGINT/SIGTERM before the mount becomes visible: a signal that
	// arrives while mounting is queued and unmounts cleanly once serving.
	sigs := make(chan os.Signal, 2)
	// SIGHUP too: a --foreground daemon whose terminal closes unmounts
	// cleanly rather than dying with its mount.
	// SIGQUIT too: Go's own handling dumps the goroutines and exits,
	// leaving a dead mount; here the dump goes to the log, then the mount
	// is taken down as for SIGTERM.
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	// A log line written to a closed pipe (--foreground 2>&1 | tee, tee
	// gone) must not kill the daemon and its mount: Go exits on SIGPIPE
	// from stdout or stderr unless it is ignored; then it is EPIPE.
	signal.Ignore(syscall.SIGPIPE)
	if im.embedded && !exists(im.pram) {
		if err := os.MkdirAll(im.dataDir, 0o700); err != nil {
			return err
		}
		if err := mkfs(im, mkfsOptions{}); err != nil {
			return err
		}
		rep.infof("formatted a new file system in %s (%s arena, %s disk; sparse files)",
			im.dataDir, formatSize(defaultPramSize), formatSize(defaultDiskSize))
	}
	checked := false
	co := conquest.Options{Logf: rep.infof, OnCrashCheck: func(msg string) {
		checked = true
		rep.busyf("%s %s", im.pram, msg)
	}, Arena: pram.OpenOptions{Interval: commit}, DiskCommit: commit,
		NoAtime: ms.noAtime || o.ReadOnly}
	co.Disk.PunchFree = !o.ReadOnly // free space back to the image's file system (diskstore/giveback.go)
	gov := newProcsGovernor()
	if gov != nil {
		co.Disk.OnReadahead = gov.notify
	}
	unlockDisk, err := lockDisk(im, func(msg string) { rep.infof("%s", msg) })
	if err != nil {
		return err
	}
	defer unlockDisk()
	fsys, err := openImages(im, co, o.ReadOnly, func(why string) { rep.infof("%s", why) })
	if err != nil {
		return explainOpen(im, err)
	}
	if a := fsys.Arena(); a.WasDirty() {
		how := "from the last checkpoint of the image"
		if a.Shadow().Reused {
			how = "from the arena's RAM copy"
		} else if a.Shadow().Path == "" {
			how = "in place"
		}
		rep.infof("%s was not unmounted cleanly: recovered %s (%d journal records rolled back)", im.pram, how, a.Recovered())
	}
	if checked {
		rep.infof("%s: checked, consistent", im.pram)
	}
	o.FSName = fsnamePrefix + im.pram
	o.Logf = rep.logf
	if gov != nil {
		o.OnBusy = gov.notify
	}
	stopProfile := startProfile(rep)
	defer stopProfile()
	unlockMP, err := lockMountpoint(mp)
	if err != nil {
		fsys.Close()
		return err
	}
	srv, err := fusefs.Mount(fsys, mp, o)
	unlockMP()
	if err != nil {
		fsys.Close()
		return err
	}
	startWatchdog(srv, mp, rep)
	if gov != nil {
		ds := fsys.Disk()
		go gov.run(func() (readahead, busy int64) {
			if ds != nil {
				readahead = ds.ReadaheadBytes()
			}
			return readahead, srv.Busy()
		}, srv.Done())
	}
	if os.Getenv("CONQUEST_STATS") != "" {
		defer func() { rep.logf("requests: %s", formatStats(srv.Stats())) }()
	}
	msg := fmt.Sprintf("mounted %s on %s", im.pram, mp)
	if ds := fsys.Disk(); ds != nil {
		msg += fmt.Sprintf(" (disk %v)", ds.Device())
	}
	rep.ready(msg)
	// The first SIGINT, SIGTERM, SIGHUP or SIGQUIT unmounts; a busy mount is detached
	// lazily and its open files are still served, until the last is closed
	// or another signal aborts the connection (those files then fail with
	// ENOTCONN). Either way the arena is closed cleanly.
	signalled := false
	for done := false; !done; {
		select {
		case <-srv.Done():
			done = true
		case s := <-sigs:
			if s == syscall.SIGQUIT {
				var stacks strings.Builder
				pprof.Lookup("goroutine").WriteTo(&stacks, 2)
				rep.logf("%v: the daemon's goroutines:\n%s", s, stacks.String())
			}
			if signalled {
				rep.logf("%v: stopping now; files still open on %s fail from here on", s, mp)
				if err := srv.Abort(); err != nil {
					rep.logf("%v", err)
				}
				continue
			}
			signalled = true
			rep.logf("%v: unmounting %s", s, mp)
			detached, err := srv.UnmountOrDetach()
			if err != nil {
				rep.logf("%v", err)
			} else if detached {
				rep.logf("%s is busy: detached it; the files still open there are served until they are closed (signal again to stop now)", mp)
			}
		}
	}
	serr := srv.Wait()
	cerr := fsys.Close()
	unlockDisk() // at once: `conquest umount` has seen the arena released
	if serr != nil {
		return serr
	}
	if cerr != nil {
		return fmt.Errorf("%s: closing: %w", im.pram, cerr)
	}
	rep.logf("unmounted %s; %s closed cleanly", mp, im.pram)
	return nil
}

// startProfile starts a CPU profile of the daemon into the file named by
// $CONQUEST_CPUPROFILE, if set (a diagnostic for developers; see README,
// "Caching"), and returns the function that ends it.
func startProfile(rep *reporter) func() {
	path := os.Getenv("CONQUEST_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		rep.logf("CPU profile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		rep.logf("CPU profile: %v", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			rep.logf("CPU profile: %v", err)
		}
	}
}

// formatStats lists request counts by opcode, most frequent first.
func formatStats(m map[string]uint64) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]] != m[names[j]] {
			return m[names[i]] > m[names[j]]
		}
		return names[i] < names[j]
	})
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}

// reporter tells the user what the daemon does: on stderr (the log file for
// a background daemon) and, until the file system is ready, over the
// readiness pipe to the `conquest mount` that started it.
type reporter struct {
	mu     sync.Mutex
	pipe   *os.File // nil: foreground without a parent waiting
	stderr io.Writer
	stamp  bool // prefix log lines with the time (background daemon)
}

func newReporter(fd int, stderr io.Writer) *reporter {
	r := &reporter{stderr: stderr}
	if fd > 0 {
		r.pipe = os.NewFile(uintptr(fd), "ready-pipe")
		r.stamp = true
	}
	return r
}

func (r *reporter) logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logLocked(fmt.Sprintf(format, args...))
}

func (r *reporter) logLocked(msg string) {
	if r.stamp {
		fmt.Fprintf(r.stderr, "%s conquest[%d]: %s\n", time.Now().Format(time.RFC3339), os.Getpid(), msg)
	} else {
		fmt.Fprintf(r.stderr, "conquest: %s\n", msg)
	}
}

// infof is logf that the waiting parent also prints.
func (r *reporter) infof(format string, args ...any) { r.tell("info", format, args...) }

// busyf is infof for the start of work whose length has no bound known in
// advance (the full check after a system crash): the waiting parent prints
// it and stops applying readyTimeout, since the daemon is alive and working.
func (r *reporter) busyf(format string, args ...any) { r.tell("busy", format, args...) }

// tell logs a message and sends it to the waiting parent as kind.
func (r *reporter) tell(kind, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	r.logLocked(msg)
	r.sendLocked(kind, msg)
}

func (r *reporter) sendLocked(kind, msg string) {
	if r.pipe != nil {
		fmt.Fprintf(r.pipe, "%s %s\n", kind, strings.ReplaceAll(msg, "\n", " "))
	}
}

func (r *reporter) ready(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logLocked(msg)
	r.sendLocked("ready", msg)
	if r.pipe != nil {
		r.pipe.Close()
		r.pipe = nil
	}
}

// fail reports err to the parent (its own stderr gets it from run).
func (r *reporter) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sendLocked("error", err.Error())
	if r.pipe != nil {
		r.pipe.Close()
		r.pipe = nil
	}
}

// maxLog is the size past which a daemon starting renames the log to
// conquest.log.1 (replacing the previous one) and starts a new one: every
// daemon started from the same data directory appends to one log, and one
// that reports an error per request (a full disk) can write a lot.
const maxLog = 16 << 20

func rotateLog(path string) {
	if st, err := os.Stat(path); err == nil && st.Size() > maxLog {
		os.Rename(path, path+".1")
	}
}

// daemonize starts `conquest mount --foreground` in a new session, logging
// to the data directory, and waits until it reports the file system ready
// (exit 0) or fails (its error, exit 1).
func daemonize(c *cli.Context, im images, mp string, ms mountSettings) error {
	if err := os.MkdirAll(im.dataDir, 0o700); err != nil {
		return err
	}
	logPath := filepath.Join(im.dataDir, "conquest.log")
	rotateLog(logPath)
	// A FIFO there would make the open wait for a reader for ever.
	if st, err := os.Stat(logPath); err == nil && st.Mode()&fs.ModeNamedPipe != 0 {
		return fmt.Errorf("%s: the daemon's log is a FIFO, not a file: move it away", logPath)
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find the conquest executable to start the daemon: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	args := []string{"mount", "--foreground", "--ready-fd=3"}
	if !im.embedded {
		args = append(args, "--pram", im.pram, "--disk", im.disk)
	}
	args = append(args, ms.daemonArgs()...)
	args = append(args, mp)
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), "CONQUEST_HOME="+im.dataDir)
	cmd.Dir = "/" // hold no directory busy
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("starting the daemon %s: %v", self, err)
	}
	w.Close()

	res, ok := awaitDaemon(r, c.App.ErrWriter, readyTimeout)
	if !ok {
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("the daemon did not become ready within %v; see %s", readyTimeout, logPath)
	}
	if res.ready {
		return cmd.Process.Release()
	}
	werr := cmd.Wait()
	if res.errMsg != "" {
		return errors.New(res.errMsg)
	}
	return fmt.Errorf("the daemon exited before the file system was ready (%v); see %s", werr, logPath)
}

// daemonReport is what the daemon said on its readiness pipe.
type daemonReport struct {
	ready  bool
	errMsg string
}

// awaitDaemon reads the daemon's readiness pipe until it closes (the daemon
// is ready, or failed, or died), printing its info and busy lines to out.
// ok is false when timeout passed first; a busy line lifts the timeout (the
// daemon said it is working on something long, such as the full check after
// a system crash), and the wait then lasts until the pipe closes.
func awaitDaemon(r io.Reader, out io.Writer, timeout time.Duration) (rep daemonReport, ok bool) {
	done := make(chan daemonReport, 1)
	busy := make(chan struct{}, 1)
	go func() {
		var res daemonReport
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			kind, msg, _ := strings.Cut(sc.Text(), " ")
			switch kind {
			case "info", "busy":
				fmt.Fprintf(out, "conquest: %s\n", msg)
				if kind == "busy" {
					select {
					case busy <- struct{}{}:
					default:
					}
				}
			case "ready":
				res.ready = true
			case "error":
				res.errMsg = msg
			}
		}
		done <- res
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case rep = <-done:
			return rep, true
		case <-busy:
			t.Stop()
		case <-t.C:
			return rep, false
		}
	}
}
