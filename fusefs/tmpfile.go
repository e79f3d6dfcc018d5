package fusefs

import (
	"bytes"
	"encoding/binary"
	"syscall"

	"bazil.org/fuse"
)

// TMPFILE (open(2) with O_TMPFILE).
//
// bazil does not parse FUSE_TMPFILE either; like RENAME2 (rename2.go) it
// arrives as an UnrecognizedRequest whose raw message tmpfile decodes:
//
//	struct fuse_in_header;                       // 40 bytes
//	struct fuse_create_in { u32 flags; u32 mode; u32 umask; u32 open_flags; };
//	char name[]; '\0';                           // the kernel's "/" placeholder
//
// The answer is CREATE's: an entry (the new inode, with no links) and an
// open file. The kernel lets linkat(2) give the file a name (a LINK of an
// inode with no links, which the core accepts for a file still in use) unless
// it was opened with O_EXCL. Without this, the kernel answers O_TMPFILE with
// EOPNOTSUPP (it stops asking after our ENOSYS).

const (
	opcodeTmpfile = 51 // FUSE_TMPFILE
	createInSize  = 16 // struct fuse_create_in
)

// tmpfileIn is a decoded FUSE_TMPFILE message.
type tmpfileIn struct {
	flags, mode uint32
}

// parseTmpfile decodes msg, the whole message; ok is false if it is
// malformed.
func parseTmpfile(msg []byte) (in tmpfileIn, ok bool) {
	body, ok := rawBody(msg, opcodeTmpfile, createInSize+1)
	if !ok {
		return in, false
	}
	in.flags = binary.LittleEndian.Uint32(body[0:4])
	in.mode = binary.LittleEndian.Uint32(body[4:8])
	name := body[createInSize:]
	if i := bytes.IndexByte(name, 0); i != len(name)-1 {
		return in, false
	}
	return in, true
}

// tmpfile answers a FUSE_TMPFILE request.
func (s *Server) tmpfile(r *fuse.UnrecognizedRequest) {
	in, ok := parseTmpfile(rawMessage(r))
	if !ok {
		r.RespondError(syscall.ENOSYS)
		return
	}
	// The kernel has applied the umask to mode (no FUSE_DONT_MASK). The
	// handle never has O_APPEND, as for OPEN and CREATE (handleFlags): the
	// kernel writes cached and mmap'd pages back through it at their own
	// offsets.
	a, h, err := s.fs.CreateTmpfile(ino(r.Node), in.mode&0o7777, handleFlags(fuse.OpenFlags(in.flags)), cred(&r.Header))
	if err != nil {
		s.respondError(r, err)
		return
	}
	// A CreateRequest with the same Header carries the reply (and, with
	// bazil's encoding, releases the message).
	s.replyEntry(&fuse.CreateRequest{Header: r.Header}, a, s.opt.EntryTTL, &fuse.OpenResponse{
		Handle: fuse.HandleID(h),
		Flags:  s.openFlags(fuse.OpenKeepCache, fuse.OpenFlags(in.flags)),
	})
}
