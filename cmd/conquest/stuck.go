package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
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
// alone (false, nil). Before the abort, with the connection's fusectl files
// open (from then on they name that connection only), it reads the mount
// table and the lock's holders again: the abort goes only to a connection
// still mounted on mi's point with mi's device number and source, whose
// arena lock is still held only by the same dying processes (not by the
// daemon of a mount made since, which may have got the same number). An
// error means a stuck mount that could not be aborted: looking at it would
// wait for good.
func abortStuck(mi fusefs.MountInfo, arena string, note func(string)) (bool, error) {
	holders := lockHolders(arena)
	if len(holders) == 0 {
		return false, nil
	}
	procs := map[int]*daemonProc{}
	for pid := range holders {
		if pid <= 0 {
			return false, nil // outside this pid namespace: cannot tell
		}
		p := &daemonProc{pid: pid, start: procStart(pid)}
		defer p.close()
		procs[pid] = p
	}
	for look := 0; ; look++ {
		if !inUse(arena) {
			return probeDead(mi.Dir, deadProbeTimeout), nil
		}
		for _, p := range procs {
			if !p.dying() {
				return false, nil
			}
		}
		if look >= watchdogGrace {
			break
		}
		time.Sleep(watchdogInterval)
	}
	if err, answered := statfsWithin(mi.Dir, stuckProbe); answered {
		return connGone(err), nil // ended meanwhile; else it is served
	}
	stuck := fmt.Sprintf("%s: its daemon (pid %d) died with its FUSE connection open", mi.Dir, slices.Min(slices.Collect(maps.Keys(procs))))
	abort, waiting, err := fusefs.MountControlFiles(mi)
	if err != nil {
		return false, fmt.Errorf("%s, and it cannot be aborted: %v", stuck, err)
	}
	defer abort.Close()
	defer waiting.Close()
	if now, ok := fusefs.Mounted(mi.Dir); !ok || now.Device != mi.Device || now.Source != mi.Source {
		return false, nil // unmounted or mounted again meanwhile: not this one
	}
	for pid := range lockHolders(arena) {
		// The same process, or gone since (reaped): not a new one that
		// took its pid.
		p, ok := procs[pid]
		if cur := procStart(pid); !ok || cur != "" && cur != p.start || !p.dying() {
			return false, nil // a process that was not dying holds it now
		}
	}
	if _, ok := waitingRequests(waiting); !ok {
		return true, nil // the connection ended meanwhile (its watchdog?)
	}
	if _, err := abort.Write([]byte("1\n")); err != nil {
		return false, fmt.Errorf("%s, and aborting it failed: %v", stuck, err)
	}
	note(stuck + " and no watchdog left to end it: aborted the connection")
	return true, nil
}

// connGone reports whether err, from a request to a mount, says that its
// connection has ended: ENOTCONN, or ECONNABORTED for a request that was
// waiting when it was aborted.
func connGone(err error) bool {
	return errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED)
}
