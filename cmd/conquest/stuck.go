package main

import (
	"errors"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"conquest/fusefs"
)

// A daemon killed while one of its threads waits inside the kernel (see
// watchdog.go) stays a zombie that holds its FUSE device and its arena's
// lock: its mount answers nothing, and nothing else ends it but an abort
// through fusectl. Its watchdog makes that abort; when the watchdog was
// killed with it (a SIGKILL of the whole group, `pkill -9 -f conquest`),
// `conquest mount` and `conquest umount` on the mount point make it
// (abortStuck), so that the mount is cleared and recovered as after any
// other kill, instead of refused as busy.

// procStart is pid's start time from /proc/PID/stat, whatever its state
// (a zombie's too), or "".
func procStart(pid int) string {
	b, err := os.ReadFile(procDir + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	st, ok := statStart(string(b))
	if !ok {
		return ""
	}
	return st.start
}

// stuckProbe bounds abortStuck's statfs of the mount: a daemon that is
// there answers at once, and a stuck one never does.
const stuckProbe = time.Second

// abortStuck is mountDead's answer for a Conquest mount mi whose arena lock
// is held. It aborts the mount's connection when that lock's holders have
// all been dying (daemonProc.dying: gone, a zombie main thread, SIGKILL
// pending) for the watchdog's grace (2 s) and the mount still answers
// nothing, and reports whether the mount is dead: aborted, or let go by its
// daemon meanwhile (a daemon just killed the plain way, still unmapping its
// arena) and found dead. A live holder, or a mount that answers, is left
// alone. The mount is read again from the mount table just before the
// abort, which goes only to a connection that still has mi's device number
// and source.
func abortStuck(mi fusefs.MountInfo, arena string, note func(string)) bool {
	holders := lockHolders(arena)
	if len(holders) == 0 {
		return false
	}
	var procs []*daemonProc
	for pid := range holders {
		p := &daemonProc{pid: pid, start: procStart(pid)}
		defer p.close()
		procs = append(procs, p)
	}
	for look := 0; ; look++ {
		if !inUse(arena) {
			return probeDead(mi.Dir, deadProbeTimeout)
		}
		for _, p := range procs {
			if !p.dying() {
				return false
			}
		}
		if look >= watchdogGrace {
			break
		}
		time.Sleep(watchdogInterval)
	}
	answered := make(chan error, 1)
	go func() {
		var sfs unix.Statfs_t
		answered <- unix.Statfs(mi.Dir, &sfs)
	}()
	select {
	case err := <-answered:
		return errors.Is(err, unix.ENOTCONN) // ended meanwhile; else it is served
	case <-time.After(stuckProbe):
	}
	now, ok := fusefs.Mounted(mi.Dir)
	if !ok || now.Device != mi.Device || now.Source != mi.Source {
		return false
	}
	if err := fusefs.AbortMount(now); err != nil {
		note(mi.Dir + ": its daemon died with its FUSE connection open, and aborting that failed: " + err.Error())
		return false
	}
	note(mi.Dir + ": its daemon (pid " + strconv.Itoa(procs[0].pid) + ") had died with its FUSE connection open and no watchdog left to end it: aborted the connection")
	return true
}
