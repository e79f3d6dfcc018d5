package fusefs

import (
	"bazil.org/fuse"

	"conquest/conquest"
)

func (s *Server) opendir(r *fuse.OpenRequest) {
	h, err := s.fs.OpenDir(ino(r.Node))
	if err != nil {
		s.respondError(r, err)
		return
	}
	// No OpenCacheDir: the kernel re-reads the directory on each opendir,
	// which costs nothing a page cache would save, and needs no
	// invalidation when entries change.
	r.Respond(&fuse.OpenResponse{Handle: fuse.HandleID(h)})
}

// direntSize is the encoded size of a fuse_dirent with an n-byte name:
// ino u64, off u64, namelen u32, type u32, name, padded to 8 bytes.
func direntSize(n int) int { return (24 + n + 7) &^ 7 }

// putDirent encodes one fuse_dirent at the start of b, which must hold
// direntSize(len(name)) bytes. off is where the next READDIR resumes.
func putDirent(b []byte, ino conquest.Ino, off uint64, typ uint8, name string) int {
	n := direntSize(len(name))
	ne.PutUint64(b[0:], uint64(ino))
	ne.PutUint64(b[8:], off)
	ne.PutUint32(b[16:], uint32(len(name)))
	ne.PutUint32(b[20:], uint32(typ)) // DT_* values are the FUSE dirent types
	copy(b[24:], name)
	clear(b[24+len(name) : n])
	return n
}

// readdir fills one READDIR reply from the core's scan, starting at the
// cursor the kernel hands back (the offset of the last dirent it consumed,
// 0 at the start). Each dirent's offset is the core's stable next-cursor, so
// entries created or deleted between two READDIRs (rm -rf) never make the
// scan skip or repeat a surviving entry, and no directory is copied whole.
func (s *Server) readdir(r *fuse.ReadRequest) {
	buf := dataBufs.Get().(*[]byte)
	room := min(r.Size, len(*buf)-outHeaderSize)
	out := (*buf)[outHeaderSize : outHeaderSize+max(room, 0)]
	used := 0
	err := s.fs.ReadDir(ino(r.Node), uint64(r.Offset), func(name string, child conquest.Ino, typ uint8, next uint64) bool {
		if used+direntSize(len(name)) > len(out) {
			return false
		}
		used += putDirent(out[used:], child, next, typ, name)
		return true
	})
	if err != nil && used == 0 {
		dataBufs.Put(buf)
		s.respondError(r, err)
		return
	}
	// An error after some entries: return those; the next READDIR resumes
	// at the failing entry and reports it.
	s.replyData(r, buf, used)
}
