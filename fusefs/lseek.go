package fusefs

import (
	"encoding/binary"
	"syscall"

	"bazil.org/fuse"

	"conquest/conquest"
)

// LSEEK (lseek(2) with SEEK_DATA or SEEK_HOLE; the kernel answers the other
// whences itself).
//
// bazil does not parse FUSE_LSEEK; it is decoded from the raw message, as
// RENAME2 is (rename2.go):
//
//	struct fuse_in_header;                                    // 40 bytes
//	struct fuse_lseek_in { u64 fh; u64 offset; u32 whence; u32 padding; };
//
// and answered with struct fuse_lseek_out { u64 offset; }.
//
// The core knows the data it stores, not the pages the kernel holds dirty.
// In write-through mode a write(2) reaches the core before it returns, but
// a store through a shared mapping reaches it only when the page is
// written back: at msync, fsync, munmap or the kernel's writeback, all
// while the file is open (the mapping keeps its handle open), and open
// O_RDWR, which a shared writable mapping needs (mmap wants read access).
// So while any handle of the file is open O_RDWR the answer is the
// kernel's own fallback (the whole file is data, the only hole is at its
// end), which a dirty page in a hole cannot make wrong; otherwise, also
// beside writers that opened it O_WRONLY, it is exact (until session 46
// every writer made the fallback). With the writeback cache, where the
// kernel holds write(2)'s data too, LSEEK is answered ENOSYS: the kernel
// then stops sending it and answers with that fallback itself.

const (
	opcodeLseek = 46 // FUSE_LSEEK
	lseekInSize = 24 // struct fuse_lseek_in
)

// lseekIn is a decoded FUSE_LSEEK message.
type lseekIn struct {
	offset int64
	whence uint32
}

// parseLseek decodes msg, the whole message; ok is false if it is
// malformed.
func parseLseek(msg []byte) (in lseekIn, ok bool) {
	body, ok := rawBody(msg, opcodeLseek, lseekInSize)
	if !ok || len(body) != lseekInSize {
		return in, false
	}
	in.offset = int64(binary.LittleEndian.Uint64(body[8:16]))
	in.whence = binary.LittleEndian.Uint32(body[16:20])
	return in, true
}

// lseek answers a FUSE_LSEEK request.
func (s *Server) lseek(r *fuse.UnrecognizedRequest) {
	in, ok := parseLseek(rawMessage(r))
	if !ok || s.opt.WritebackCache {
		r.RespondError(syscall.ENOSYS)
		return
	}
	node := ino(r.Node)
	seek := s.fs.Seek
	if s.fs.OpenReadWrite(node) {
		seek = s.seekFallback
	}
	pos, err := seek(node, in.offset, int(in.whence))
	if err != nil {
		s.respondError(r, err)
		return
	}
	var out [8]byte
	binary.LittleEndian.PutUint64(out[:], uint64(pos))
	// A ReadRequest with the same Header sends the body as it is (and
	// releases the message).
	(&fuse.ReadRequest{Header: r.Header}).Respond(&fuse.ReadResponse{Data: out[:]})
}

// seekFallback is the answer that treats the whole file as data: SEEK_DATA
// at off itself, SEEK_HOLE at the end; an offset outside the file is
// ENXIO, as in the core's Seek.
func (s *Server) seekFallback(node conquest.Ino, off int64, whence int) (int64, error) {
	if whence != conquest.SeekData && whence != conquest.SeekHole {
		return 0, conquest.ErrInvalid
	}
	a, err := s.fs.GetAttr(node)
	if err != nil {
		return 0, err
	}
	if off < 0 || off >= int64(a.Size) {
		return 0, conquest.ErrNoSuchOffset
	}
	if whence == conquest.SeekData {
		return off, nil
	}
	return int64(a.Size), nil
}
