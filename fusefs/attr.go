package fusefs

import (
	"os"
	"time"

	"bazil.org/fuse"

	"conquest/conquest"
)

func (s *Server) getattr(r *fuse.GetattrRequest) {
	a, err := s.fs.GetAttr(ino(r.Node))
	if err != nil {
		s.respondError(r, err)
		return
	}
	s.replyAttr(r, a)
}

// setattrBits maps bazil's SETATTR valid bits to the core's.
var setattrBits = [...]struct {
	fuse fuse.SetattrValid
	core uint32
}{
	{fuse.SetattrMode, conquest.SetMode},
	{fuse.SetattrUid, conquest.SetUID},
	{fuse.SetattrGid, conquest.SetGID},
	{fuse.SetattrSize, conquest.SetSize},
	{fuse.SetattrAtime, conquest.SetAtime},
	{fuse.SetattrMtime, conquest.SetMtime},
	{fuse.SetattrAtimeNow, conquest.SetAtimeNow},
	{fuse.SetattrMtimeNow, conquest.SetMtimeNow},
	{fuse.SetattrCTime, conquest.SetCtime},
	{fuse.SetattrKillSUIDGID, conquest.SetKillSUIDGID},
}

func (s *Server) setattr(r *fuse.SetattrRequest) {
	in := conquest.SetAttr{
		Mode:  unixMode(r.Mode) & 0o7777,
		Uid:   r.Uid,
		Gid:   r.Gid,
		Size:  r.Size,
		Atime: timespec(r.Atime),
		Mtime: timespec(r.Mtime),
		Ctime: timespec(r.Ctime),
	}
	for _, b := range setattrBits {
		if r.Valid&b.fuse != 0 {
			in.Valid |= b.core
		}
	}
	if r.Valid.Handle() {
		in.Handle = uint64(r.Handle)
	}
	if in.Valid&^conquest.SetCtime == 0 {
		// Nothing to set (ctime at most, with the writeback cache):
		// chown(-1, -1), which marks ctime on ext4, or a removal of
		// privileges (killpriv.go).
		var err error
		if in, err = s.emptySetattr(r, in); err != nil {
			s.respondError(r, err)
			return
		}
	}
	const killOnTruncate = conquest.SetKillSUIDGID | conquest.SetSize
	if in.Valid&(killOnTruncate|conquest.SetMode|conquest.SetUID|conquest.SetGID) == killOnTruncate {
		// A truncate by a caller without CAP_FSETID: as for a write, an
		// S_ISGID without group exec goes if the caller is not in the
		// file's group (killpriv.go); the core clears the rest, in the
		// same transaction. (A chown: below.)
		if a, err := s.fs.GetAttr(ino(r.Node)); err == nil && sgidKeptByCore(a.Mode) && !inGroup(&r.Header, a.Gid) {
			in.Valid |= conquest.SetMode
			in.Mode = a.Mode & 0o7777 &^ conquest.S_ISGID
		}
	}
	if in.Valid&conquest.SetKillSUIDGID != 0 && in.Valid&(conquest.SetUID|conquest.SetGID) != 0 && in.Valid&conquest.SetMode == 0 {
		// A chown (the kernel asks for the kill on every non-directory's):
		// the core clears S_ISUID, and S_ISGID with group exec; an S_ISGID
		// without group exec goes too when the caller is neither in the
		// file's group (as it was) nor has CAP_FSETID, as on ext4 since
		// Linux 6.2 (setattr_should_drop_sgid; until session 46 the core's
		// rule alone applied, an outside review found).
		if a, err := s.fs.GetAttr(ino(r.Node)); err == nil && sgidKeptByCore(a.Mode) && !callerHasCap(&r.Header, capFsetid) && !inGroup(&r.Header, a.Gid) {
			in.Valid |= conquest.SetMode
			in.Mode = a.Mode & 0o7777 &^ (conquest.S_ISUID | conquest.S_ISGID)
		}
	}
	if s.opt.WritebackCache {
		// The kernel keeps a regular file's mtime and ctime itself and
		// ignores ours: it sends them with every change it makes (a
		// truncate that changes the size, chmod, utimes), and a
		// truncate(2) to the size the file has changes neither. Times
		// stamped here would differ from what stat showed until the
		// inode left the kernel's cache (an outside review saw them
		// jump at the next mount).
		in.Valid |= conquest.SetKeepTimes
	}
	a, err := s.fs.SetAttr(ino(r.Node), in, cred(&r.Header))
	if err != nil {
		s.respondError(r, err)
		return
	}
	// The reply carries the new attributes (mode with S_ISUID cleared by a
	// chown or truncate, size, times): nothing else to invalidate but a
	// symlink's cached target or a directory's cached listing (entry.go).
	s.dropCached(a.Ino, a.Mode)
	s.replyAttr(r, a)
}

func (s *Server) statfs(r *fuse.StatfsRequest) {
	waited, _ := s.frees.await(false)
	if s.awaitForgets() || waited {
		s.statfsWaits.Add(1)
	}
	st := s.fs.StatFS()
	r.Respond(&fuse.StatfsResponse{
		Blocks:  st.Blocks,
		Bfree:   st.Bfree,
		Bavail:  st.Bavail,
		Files:   st.Files,
		Ffree:   st.Ffree,
		Bsize:   st.Bsize,
		Namelen: st.Namelen,
		Frsize:  st.Frsize,
	})
}

// timespec turns a time bazil decoded with time.Unix back into seconds and
// nanoseconds. (Its zero time.Time is 0001-01-01 00:00:00 UTC, a time a
// caller may set like any other.)
func timespec(t time.Time) conquest.Timespec {
	return conquest.Timespec{Sec: t.Unix(), Nsec: uint32(t.Nanosecond())}
}

// unixMode turns bazil's os.FileMode back into stat(2) mode bits (type,
// S_ISUID, S_ISGID, S_ISVTX and permissions). A mode with no type (bazil's
// ModeIrregular) gets none.
func unixMode(m os.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&os.ModeSetuid != 0 {
		u |= conquest.S_ISUID
	}
	if m&os.ModeSetgid != 0 {
		u |= conquest.S_ISGID
	}
	if m&os.ModeSticky != 0 {
		u |= conquest.S_ISVTX
	}
	switch {
	case m&os.ModeDir != 0:
		u |= conquest.S_IFDIR
	case m&os.ModeSymlink != 0:
		u |= conquest.S_IFLNK
	case m&os.ModeNamedPipe != 0:
		u |= conquest.S_IFIFO
	case m&os.ModeSocket != 0:
		u |= conquest.S_IFSOCK
	case m&os.ModeCharDevice != 0:
		u |= conquest.S_IFCHR
	case m&os.ModeDevice != 0:
		u |= conquest.S_IFBLK
	case m&os.ModeIrregular != 0:
	default:
		u |= conquest.S_IFREG
	}
	return u
}

// fileMode is the inverse of unixMode, for bazil's fallback encoding.
func fileMode(u uint32) os.FileMode {
	m := os.FileMode(u & 0o777)
	switch u & conquest.S_IFMT {
	case conquest.S_IFDIR:
		m |= os.ModeDir
	case conquest.S_IFLNK:
		m |= os.ModeSymlink
	case conquest.S_IFIFO:
		m |= os.ModeNamedPipe
	case conquest.S_IFSOCK:
		m |= os.ModeSocket
	case conquest.S_IFCHR:
		m |= os.ModeDevice | os.ModeCharDevice
	case conquest.S_IFBLK:
		m |= os.ModeDevice
	}
	if u&conquest.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if u&conquest.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if u&conquest.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}
