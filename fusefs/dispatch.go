package fusefs

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"syscall"

	"bazil.org/fuse"

	"conquest/conquest"
	"conquest/pram"
)

// op names the request kinds the server counts (Stats).
type op int

const (
	opLookup op = iota
	opForget
	opGetattr
	opSetattr
	opReadlink
	opSymlink
	opMknod
	opMkdir
	opCreate
	opLink
	opUnlink
	opRmdir
	opRename
	opOpen
	opRead
	opWrite
	opFlush
	opRelease
	opFsync
	opOpendir
	opReaddir
	opReleasedir
	opFsyncdir
	opStatfs
	opAccess
	opGetxattr
	opListxattr
	opSetxattr
	opRemovexattr
	opFallocate
	opInterrupt
	opPoll
	opOther
	numOps
)

var opNames = [numOps]string{
	"LOOKUP", "FORGET", "GETATTR", "SETATTR", "READLINK", "SYMLINK", "MKNOD",
	"MKDIR", "CREATE", "LINK", "UNLINK", "RMDIR", "RENAME", "OPEN", "READ",
	"WRITE", "FLUSH", "RELEASE", "FSYNC", "OPENDIR", "READDIR", "RELEASEDIR",
	"FSYNCDIR", "STATFS", "ACCESS", "GETXATTR", "LISTXATTR", "SETXATTR",
	"REMOVEXATTR", "FALLOCATE", "INTERRUPT", "POLL", "OTHER",
}

type counters [numOps]atomic.Uint64

// Stats returns how many requests of each kind the server has received,
// by FUSE opcode name (LOOKUP, GETATTR, ...), under STATFS-WAITS how
// many STATFS requests waited for inodes being freed, under DIRECT-DROPS
// how many drops of a range of the kernel's cache direct and O_DIRECT
// writes made (under LATE-DROPS those whose reply did not wait for the
// drop's end), and under
// SYNC-WRITES how many O_SYNC/O_DSYNC direct writes were synced
// (directio.go), and under BUSY how many requests were read while
// BusyCallers were waiting (Options.OnBusy). Tests use it to check that a cache saves the round trips
// it should.
func (s *Server) Stats() map[string]uint64 {
	m := make(map[string]uint64, numOps)
	for i := range s.stats {
		if n := s.stats[i].Load(); n != 0 {
			m[opNames[i]] = n
		}
	}
	if n := s.statfsWaits.Load(); n != 0 {
		m["STATFS-WAITS"] = n
	}
	if n := s.directDrops.Load(); n != 0 {
		m["DIRECT-DROPS"] = n
	}
	if n := s.lateDrops.Load(); n != 0 {
		m["LATE-DROPS"] = n
	}
	if n := s.syncWrites.Load(); n != 0 {
		m["SYNC-WRITES"] = n
	}
	if n := s.busy.Load(); n != 0 {
		m["BUSY"] = uint64(n)
	}
	return m
}

func (s *Server) count(o op) { s.stats[o].Add(1) }

func ino(n fuse.NodeID) conquest.Ino { return conquest.Ino(n) }

func cred(h *fuse.Header) conquest.Cred {
	return conquest.Cred{Uid: h.Uid, Gid: h.Gid, Pid: h.Pid, InGroup: func(gid uint32) bool {
		// Asked only when a file with S_ISGID and group-exec is
		// created in a setgid directory of a group other than the
		// caller's fsgid: its supplementary groups and capabilities
		// are read from /proc (caller.go).
		return inGroup(h, gid) || callerHasCap(h, capFsetid)
	}}
}

// serve answers one request. A panic in the core is recovered here: the
// request gets EIO and the daemon goes on serving. ticket is the request's
// registration in s.frees (0: none), ended once it is served.
func (s *Server) serve(req fuse.Request, ticket uint64) {
	if ticket != 0 {
		defer s.frees.end(ticket)
	}
	answered := false
	defer func() {
		if v := recover(); v != nil {
			// A fault on the arena's mapping (its file truncated under
			// the mount) is logged once by the core, which then answers
			// nothing but EIO (conquest/lost.go).
			// An offset out of the arena's range is damage its bounds
			// checks caught (the core's guards log it so, in one line);
			// anything else may be a bug, and keeps its stack.
			if pram.OutOfRange(v) {
				s.opt.Logf("fusefs: serving %v: the arena is damaged: %v (run `conquest fsck`)", req, v)
			} else if !s.fs.NoteFault(v) {
				s.opt.Logf("fusefs: panic serving %v: %v\n%s", req, v, debug.Stack())
			}
			if !answered {
				req.RespondError(syscall.EIO)
			}
		}
	}()
	if h := testHookServe.Load(); h != nil {
		(*h)(req)
	}
	if s.fs.Lost() != nil {
		refuseLost(req)
		return
	}
	answered = s.dispatch(req)
}

// refuseLost answers req when the arena is lost (conquest/lost.go): EIO,
// without calling the core, whose locks a fault may have left held.
// Requests that take no error are acknowledged.
func refuseLost(req fuse.Request) {
	switch r := req.(type) {
	case *fuse.ForgetRequest:
		r.Respond()
	case *fuse.BatchForgetRequest:
		r.Respond()
	case *fuse.InterruptRequest:
		r.Respond()
	case *fuse.DestroyRequest:
		r.Respond()
	case *fuse.NotifyReply:
	default:
		req.RespondError(syscall.EIO)
	}
}

// freesInode reports whether req may free an unlinked inode: the last
// RELEASE of a file (release) or the FORGET that drops the kernel's last
// reference.
func freesInode(req fuse.Request) (frees, release bool) {
	switch r := req.(type) {
	case *fuse.ReleaseRequest:
		return !r.Dir, !r.Dir
	case *fuse.ForgetRequest, *fuse.BatchForgetRequest:
		return true, false
	}
	return false, false
}

// testHookServe, when set, runs before each request is served (tests use it
// to make operations slow).
var testHookServe atomic.Pointer[func(fuse.Request)]

// testHookRead, when set, runs right after a reader has read a request,
// before it registers it (tests use it to widen that window).
var testHookRead atomic.Pointer[func(fuse.Request)]

// dispatch serves req and returns true; handlers respond exactly once.
func (s *Server) dispatch(req fuse.Request) bool {
	if req.Hdr().Node == pollNode {
		s.servePoll(req)
		return true
	}
	switch r := req.(type) {
	case *fuse.LookupRequest:
		if s.isPollLookup(r) {
			s.servePoll(r)
			return true
		}
		s.count(opLookup)
		s.lookup(r)
	case *fuse.ForgetRequest:
		s.count(opForget)
		s.fs.Forget(ino(r.Node), r.N)
		r.Respond()
	case *fuse.BatchForgetRequest:
		s.count(opForget)
		for _, f := range r.Forget {
			if f.NodeID != pollNode {
				s.fs.Forget(ino(f.NodeID), f.N)
			}
		}
		r.Respond()
	case *fuse.GetattrRequest:
		s.count(opGetattr)
		s.getattr(r)
	case *fuse.SetattrRequest:
		s.count(opSetattr)
		s.setattr(r)
	case *fuse.ReadlinkRequest:
		s.count(opReadlink)
		s.readlink(r)
	case *fuse.SymlinkRequest:
		s.count(opSymlink)
		s.symlink(r)
	case *fuse.MknodRequest:
		s.count(opMknod)
		s.mknod(r)
	case *fuse.MkdirRequest:
		s.count(opMkdir)
		s.mkdir(r)
	case *fuse.CreateRequest:
		s.count(opCreate)
		s.create(r)
	case *fuse.LinkRequest:
		s.count(opLink)
		s.link(r)
	case *fuse.RemoveRequest:
		if r.Dir {
			s.count(opRmdir)
		} else {
			s.count(opUnlink)
		}
		s.remove(r)
	case *fuse.RenameRequest:
		s.count(opRename)
		s.rename(r)
	case *fuse.OpenRequest:
		if r.Dir {
			s.count(opOpendir)
			s.opendir(r)
		} else {
			s.count(opOpen)
			s.open(r)
		}
	case *fuse.ReadRequest:
		if r.Dir {
			s.count(opReaddir)
			s.readdir(r)
		} else {
			s.count(opRead)
			s.read(r)
		}
	case *fuse.WriteRequest:
		s.count(opWrite)
		s.write(r)
	case *fuse.FlushRequest:
		// Data and metadata are in the arena as soon as each write
		// returns, and file locks are the kernel's: there is nothing to
		// do on close. ENOSYS makes the kernel stop sending FLUSH for the
		// rest of the mount (fc->no_flush), saving a round trip per
		// close(2); it still writes back dirty pages (writeback cache)
		// and reports writeback errors before it would have sent FLUSH.
		s.count(opFlush)
		r.RespondError(syscall.ENOSYS)
	case *fuse.ReleaseRequest:
		if r.Dir {
			s.count(opReleasedir)
			s.fs.ReleaseDir(ino(r.Node), conquest.Handle(r.Handle))
		} else {
			s.count(opRelease)
			if s.fs.Release(ino(r.Node), conquest.Handle(r.Handle)) {
				// The last close of a large file trimmed the disk
				// space preallocated past its end: the st_blocks the
				// kernel cached while it was open is stale.
				s.invalidateAttr(ino(r.Node))
			}
		}
		r.Respond()
	case *fuse.FsyncRequest:
		if r.Dir {
			s.count(opFsyncdir)
		} else {
			s.count(opFsync)
		}
		s.fsync(r)
	case *fuse.FAllocateRequest:
		s.count(opFallocate)
		s.fallocate(r)
	case *fuse.StatfsRequest:
		s.count(opStatfs)
		s.statfs(r)
	case *fuse.AccessRequest:
		// The kernel checks permissions itself (default_permissions) and
		// does not normally send ACCESS; if it does, the inode exists.
		s.count(opAccess)
		if _, err := s.fs.GetAttr(ino(r.Node)); err != nil {
			s.respondError(r, err)
			return true
		}
		r.Respond()
	case *fuse.GetxattrRequest:
		s.count(opGetxattr)
		s.getxattr(r)
	case *fuse.ListxattrRequest:
		s.count(opListxattr)
		s.listxattr(r)
	case *fuse.SetxattrRequest:
		s.count(opSetxattr)
		s.setxattr(r)
	case *fuse.RemovexattrRequest:
		s.count(opRemovexattr)
		s.removexattr(r)
	case *fuse.InterruptRequest:
		// Nothing to cancel: core operations only wait for the core's
		// own short locks. Acknowledge without a reply, as FUSE expects.
		s.count(opInterrupt)
		r.Respond()
	case *fuse.PollRequest:
		// ENOSYS once and the kernel stops asking (fc->no_poll): regular
		// files are always ready. Mount has already done this (poll.go).
		s.count(opPoll)
		r.RespondError(syscall.ENOSYS)
	case *fuse.DestroyRequest:
		s.count(opOther)
		r.Respond()
	case *fuse.NotifyReply:
		// We never send NOTIFY_RETRIEVE; nothing waits for this.
		s.count(opOther)
	case *fuse.UnrecognizedRequest:
		switch r.Opcode {
		case opcodeRename2:
			s.count(opRename)
			s.rename2(r)
			return true
		case opcodeTmpfile:
			s.count(opCreate)
			s.tmpfile(r)
			return true
		case opcodeLseek:
			s.count(opOther)
			s.lseek(r)
			return true
		}
		s.count(opOther)
		r.RespondError(syscall.ENOSYS)
	default:
		// File locks (the kernel keeps them locally since we do not
		// negotiate them), and everything bazil cannot parse.
		s.count(opOther)
		req.RespondError(syscall.ENOSYS)
	}
	return true
}

// respondError answers req with the errno for err, logging errors that the
// table does not know (they are bugs: the core returns only its sentinels).
func (s *Server) respondError(req fuse.Request, err error) {
	errno, known := Errno(err)
	if !known && s.unmapped.Add(1) <= 20 {
		s.opt.Logf("fusefs: %v: unexpected error %v (answered EIO)", describe(req), err)
	}
	req.RespondError(errno)
}

func describe(req fuse.Request) string {
	h := req.Hdr()
	return fmt.Sprintf("%T node %d", req, h.Node)
}
