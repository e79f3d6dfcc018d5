package fusefs

import (
	"bazil.org/fuse"

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
