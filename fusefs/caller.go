package fusefs

import (
	"bufio"
	"bytes"
	"os"
	"strconv"

	"bazil.org/fuse"
)

// What a request tells of its caller is its uid, gid and thread id; its
// supplementary groups and capabilities are read from /proc/<pid>/status
// (the kernel reports the calling thread's id, in the daemon's pid
// namespace). Callers of these decide what to do when that fails (no pid,
// as for requests the kernel makes on its own behalf, or the thread is
// gone).

// procStatus returns the rest of the line of /proc/<pid>/status that starts
// with key (such as "Groups:").
func procStatus(pid uint32, key string) ([]byte, bool) {
	f, err := os.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, found := bytes.CutPrefix(sc.Bytes(), []byte(key)); found {
			return bytes.Clone(rest), true
		}
	}
	return nil, false
}

// procGroups returns the supplementary groups of process (or thread) pid.
func procGroups(pid uint32) ([]uint32, bool) {
	rest, ok := procStatus(pid, "Groups:")
	if !ok {
		return nil, false
	}
	var gs []uint32
	for _, field := range bytes.Fields(rest) {
		g, err := strconv.ParseUint(string(field), 10, 32)
		if err != nil {
			return nil, false
		}
		gs = append(gs, uint32(g))
	}
	return gs, true
}

// holdsWritable reports whether process (or thread) pid has a descriptor
// open for writing on the inode numbered ino, by /proc/<pid>/fdinfo (the
// inode number alone: a file of another file system with the same number
// counts too, which errs toward what the caller could do before).
func holdsWritable(pid uint32, ino uint64) bool {
	if pid == 0 {
		return false
	}
	dir := "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/fdinfo"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := []byte(strconv.FormatUint(ino, 10))
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		var flags uint64
		match := false
		for _, line := range bytes.Split(b, []byte("\n")) {
			if rest, ok := bytes.CutPrefix(line, []byte("flags:")); ok {
				flags, _ = strconv.ParseUint(string(bytes.TrimSpace(rest)), 8, 64)
			} else if rest, ok := bytes.CutPrefix(line, []byte("ino:")); ok {
				match = bytes.Equal(bytes.TrimSpace(rest), want)
			}
		}
		if match && flags&3 != 0 { // O_WRONLY or O_RDWR
			return true
		}
	}
	return false
}

// callerSyscall returns the number of the system call thread pid is in,
// read from /proc/<pid>/syscall (a caller waits in its system call for the
// reply to the request it caused); false when that cannot be read: no pid,
// the thread gone, the daemon not allowed to look (it must be able to
// ptrace the caller), or the thread not in a system call (an io_uring
// worker, say).
func callerSyscall(pid uint32) (int, bool) {
	if pid == 0 {
		return 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/syscall")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.Atoi(string(f[0]))
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// Capability bits in a capability set.
const (
	capDacOverride = 1
	capFowner      = 3
	capFsetid      = 4
	capSysAdmin    = 21
)

// callerIsAdmin reports whether the caller of h has CAP_SYS_ADMIN.
func callerIsAdmin(h *fuse.Header) bool { return callerHasCap(h, capSysAdmin) }

// callerHasCap reports whether the caller of h has capability bit in its
// effective set. When that cannot be read, a caller with uid 0 counts as
// having it.
func callerHasCap(h *fuse.Header, bit uint) bool {
	if h.Pid != 0 {
		if rest, ok := procStatus(h.Pid, "CapEff:"); ok {
			if caps, err := strconv.ParseUint(string(bytes.TrimSpace(rest)), 16, 64); err == nil {
				return caps&(1<<bit) != 0
			}
		}
	}
	return h.Uid == 0
}
