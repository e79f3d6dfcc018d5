package fusefs

import (
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"

	"conquest/conquest"
)

// Set-group-ID on write and truncate.
//
// With HANDLE_KILLPRIV_V2 the kernel leaves clearing S_ISUID/S_ISGID to the
// daemon: a WRITE (FUSE_WRITE_KILL_SUIDGID) or a truncating SETATTR
// (FATTR_KILL_SUIDGID) by a caller without CAP_FSETID asks for it. The
// core's killPriv clears S_ISUID, and S_ISGID when group-exec is set. Since
// Linux 6.2 (setattr_should_drop_sgid) the kernel also clears an S_ISGID
// without group-exec when the caller is not in the file's group, and ext4
// does so; the core does not know the caller's groups, so that case is
// decided here, from the request's credentials.

const sIXGRP = 0o010

// sgidKeptByCore reports whether mode has the S_ISGID that the core's
// killPriv keeps (no group-exec).
func sgidKeptByCore(mode uint32) bool {
	return mode&conquest.S_ISGID != 0 && mode&sIXGRP == 0
}

// inGroup reports whether the caller of h is in group gid: its fsgid is gid,
// or gid is one of its supplementary groups, read from /proc/<pid>/status
// (the kernel reports the calling thread's id as the request's pid). When
// the groups cannot be read (no pid, as for requests the kernel makes on
// its own behalf, or the thread is gone) the caller counts as not in the
// group: the bit is then cleared, the safe side.
func inGroup(h *fuse.Header, gid uint32) bool {
	if h.Gid == gid {
		return true
	}
	if h.Pid == 0 {
		return false
	}
	groups, ok := procGroups(h.Pid)
	if !ok {
		return false
	}
	for _, g := range groups {
		if g == gid {
			return true
		}
	}
	return false
}

// dropSGID clears the S_ISGID that the core's killPriv kept on node, if it
// is still there, and returns the error of the SETATTR.
func (s *Server) dropSGID(node conquest.Ino, c conquest.Cred) error {
	a, err := s.fs.GetAttr(node)
	if err != nil {
		return err
	}
	if !sgidKeptByCore(a.Mode) {
		return nil
	}
	_, err = s.fs.SetAttr(node, conquest.SetAttr{
		Valid: conquest.SetMode,
		Mode:  a.Mode & 0o7777 &^ conquest.S_ISGID,
	}, c)
	return err
}

// Removals of privileges that arrive as an empty SETATTR.
//
// The kernel passes FATTR_KILL_SUIDGID only with a uid, gid or size; when
// it means to clear S_ISUID/S_ISGID otherwise, it drops its kill flags
// (HANDLE_KILLPRIV_V2 leaves the clearing to the daemon) and sends a
// SETATTR that sets nothing (ctime at most, with the writeback cache). Two
// calls do that: chown(-1, -1), by any caller (chown_common asks for the
// kill on every non-directory), and the removal of privileges before
// fallocate by a caller without CAP_FSETID (file_modified). ext4 then clears
// S_ISUID, and S_ISGID when group-exec is set or the caller is neither in
// the file's group nor has CAP_FSETID (setattr_should_drop_sgid).
//
// The same empty SETATTR also follows the removal of a file capability
// (security.capability) when a caller with CAP_FSETID writes to a file that
// has one: there only the capability goes (the kernel removes it itself,
// with a REMOVEXATTR just before), and set-user-ID stays. Such a removal by
// the same thread less than a second before marks that case. (Left wrong:
// chown(-1, -1) by root of a file that has both set-user-ID and a
// capability keeps set-user-ID, which ext4 clears.)

// chownCalls are the system calls that change an owner (chownCallsArch
// adds those this architecture has besides).
var chownCalls = func() map[int]bool {
	m := map[int]bool{unix.SYS_FCHOWN: true, unix.SYS_FCHOWNAT: true}
	for _, c := range chownCallsArch {
		m[c] = true
	}
	return m
}()

// capabilityXattr is the attribute of file capabilities.
const capabilityXattr = "security.capability"

// capRemoval is a removal of capabilityXattr that succeeded.
type capRemoval struct {
	pid uint32
	at  time.Time
}

// noteCapRemoved records that r removed capabilityXattr.
func (s *Server) noteCapRemoved(r *fuse.RemovexattrRequest) {
	s.capRemoved.Store(ino(r.Node), capRemoval{r.Pid, time.Now()})
}

// capJustRemoved reports (and forgets) whether the caller of h removed
// node's capability attribute just before.
func (s *Server) capJustRemoved(node conquest.Ino, h *fuse.Header) bool {
	v, ok := s.capRemoved.LoadAndDelete(node)
	if !ok {
		return false
	}
	c := v.(capRemoval)
	return c.pid == h.Pid && time.Since(c.at) < time.Second
}

// emptySetattr turns a SETATTR that sets nothing (in has at most SetCtime)
// into what it asks for: a ctime change, and on a non-directory with
// S_ISUID or S_ISGID the removal of privileges described above.
//
// That removal is a mode change, which on ext4 only the owner (or
// CAP_FOWNER) may make by chown(-1, -1): another caller gets EPERM, and
// the bits stay. The removal before a fallocate is forced by the kernel
// (ATTR_FORCE) for whoever holds the file open for writing. The SETATTR
// does not say which it is; the system call its caller is in does
// (/proc/<tid>/syscall, callerSyscall): a chown family call by a caller
// that is neither the owner nor capable gets EPERM, a fallocate has the
// bits cleared (since session 47; before, a caller who could write the
// file had its chown(-1, -1) clear them). When the call cannot be read (a
// daemon that may not look at its caller, an io_uring worker), the old
// rule decides: a caller that is neither the owner nor capable, may not
// write the file by its mode, and holds no descriptor of it open for
// writing (a fallocate's, whose mode may have changed since the open) gets
// EPERM (until session 46 anyone who could reach the file could clear its
// bits; found by an outside review); one that may write has them cleared.
func (s *Server) emptySetattr(r *fuse.SetattrRequest, in conquest.SetAttr) (conquest.SetAttr, error) {
	if in.Valid == 0 {
		in.Valid = conquest.SetTouch // ext4 marks ctime for chown(-1, -1)
	}
	node := ino(r.Node)
	a, err := s.fs.GetAttr(node)
	if err != nil || a.Mode&conquest.S_IFMT == conquest.S_IFDIR || a.Mode&(conquest.S_ISUID|conquest.S_ISGID) == 0 {
		return in, nil
	}
	if r.Header.Uid != a.Uid && !callerHasCap(&r.Header, capFowner) {
		call, known := callerSyscall(r.Header.Pid)
		switch {
		case known && chownCalls[call]:
			return in, conquest.ErrPerm // chown(-1, -1): the owner's alone
		case known && call == unix.SYS_FALLOCATE:
			// The kernel forces the removal for a fallocate's writer.
		case !mayWrite(&r.Header, a) && !holdsWritable(r.Header.Pid, uint64(node)):
			return in, conquest.ErrPerm
		}
	}
	capable := callerHasCap(&r.Header, capFsetid)
	if capable && s.capJustRemoved(node, &r.Header) {
		return in, nil
	}
	in.Valid |= conquest.SetKillSUIDGID
	if sgidKeptByCore(a.Mode) && !capable && !inGroup(&r.Header, a.Gid) {
		in.Valid |= conquest.SetMode
		in.Mode = a.Mode & 0o7777 &^ (conquest.S_ISUID | conquest.S_ISGID)
	}
	return in, nil
}

// mayWrite reports whether the caller of h may write a file of attributes
// a by its mode bits (the class the kernel's generic_permission picks: the
// owner's, the group's, the others'), or overrides them (CAP_DAC_OVERRIDE).
func mayWrite(h *fuse.Header, a conquest.Attr) bool {
	switch {
	case h.Uid == a.Uid:
		return a.Mode&0o200 != 0
	case inGroup(h, a.Gid):
		if a.Mode&0o020 != 0 {
			return true
		}
	case a.Mode&0o002 != 0:
		return true
	}
	return callerHasCap(h, capDacOverride)
}
