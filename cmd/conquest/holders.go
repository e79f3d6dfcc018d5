package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"conquest/fusefs"
)

// Who holds an image's lock, from /proc/locks.
//
// The daemon locks its arena and its disk (flock) for as long as it has the
// file system open. A mount names its arena (the source "conquest:ARENA"),
// never its disk, so a held disk says nothing by itself about whether a
// mounted file system holds it or a daemon that is exiting does. The lock
// table does: the process holding the disk is a mounted file system's
// daemon when it also holds the arena some mount names.

// lockID is how /proc/locks names a file: its device as major:minor in hex
// and its inode number in decimal.
func lockID(path string) (string, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", false
	}
	return fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino), true
}

// lockHolders returns the processes /proc/locks shows holding a lock on
// path (nil when it cannot tell).
func lockHolders(path string) map[int]bool {
	id, ok := lockID(path)
	if !ok {
		return nil
	}
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return nil
	}
	var pids map[int]bool
	for _, line := range strings.Split(string(b), "\n") {
		// "1: FLOCK  ADVISORY  WRITE 12090 fe:00:9978073 0 EOF"; a
		// waiter's line has "->" after the number.
		f := strings.Fields(line)
		if len(f) < 6 || f[1] == "->" || f[5] != id {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil {
			if pids == nil {
				pids = map[int]bool{}
			}
			pids[pid] = true
		}
	}
	return pids
}

// heldByMount reports whether a process holding path's lock also holds the
// arena of a mounted Conquest file system: path is then in use by that
// mount, not by a daemon that is closing.
func heldByMount(path string) bool {
	_, ok := mountHolding(path)
	return ok
}

// mountHolding is the mounted Conquest file system whose daemon holds
// path's lock (its arena, or its disk), if there is one. A mount is known
// by the arena path it names, which may name another file by now (the
// arena renamed, another formatted in its place and mounted): when
// several mounts' arenas are held by the holder, the one its command line
// names (a daemon's last argument is its mount point) is taken, and none
// if that does not tell (an outside review saw the wrong mount named).
func mountHolding(path string) (fusefs.MountInfo, bool) {
	holders := lockHolders(path)
	if len(holders) == 0 {
		return fusefs.MountInfo{}, false
	}
	var found []fusefs.MountInfo
	for _, mi := range conquestMounts() {
		for pid := range lockHolders(strings.TrimPrefix(mi.Source, fsnamePrefix)) {
			if !holders[pid] {
				continue
			}
			if daemonMountpoint(pid) == mi.Dir {
				return mi, true
			}
			found = append(found, mi)
			break
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return fusefs.MountInfo{}, false
}

// daemonMountpoint is the last argument of process pid's command line:
// a daemon's mount point ("" if it cannot be read).
func daemonMountpoint(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	return filepath.Clean(args[len(args)-1])
}

// heldBy says who holds path, for a refusal: "the file system mounted on
// DIR (from the arena ARENA)" when a mount's daemon does (the arena left
// out when it is path), else fallback.
func heldBy(path, fallback string) string {
	if mi, ok := mountHolding(path); ok {
		arena := strings.TrimPrefix(mi.Source, fsnamePrefix)
		if sameImage(arena, path) {
			return "the file system mounted on " + mi.Dir
		}
		return fmt.Sprintf("the file system mounted on %s (from the arena %s)", mi.Dir, arena)
	}
	return fallback
}
