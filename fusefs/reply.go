package fusefs

import (
	"encoding/binary"
	"os"
	"reflect"
	"sync"
	"syscall"
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"

	"conquest/conquest"
)

// Replies that carry attributes are encoded here and written to the FUSE
// device directly, because bazil's Attr encoding drops S_ISVTX (the sticky
// bit) and converts times through time.Time. Read and readdir replies are
// written directly too, which saves bazil's per-reply allocation and copy of
// up to MaxRequestData. Every other reply goes through bazil's Respond.
//
// The wire format is fuse_kernel.h's, in the machine's byte order:
//
//	fuse_out_header  len u32, error s32, unique u64                    16 B
//	fuse_attr        ino size blocks atime mtime ctime u64,
//	                 atimensec mtimensec ctimensec mode nlink uid gid
//	                 rdev blksize flags u32                              88 B
//	fuse_entry_out   nodeid generation entry_valid attr_valid u64,
//	                 entry_valid_nsec attr_valid_nsec u32, fuse_attr    128 B
//	fuse_attr_out    attr_valid u64, attr_valid_nsec u32, dummy u32,
//	                 fuse_attr                                           104 B
//	fuse_open_out    fh u64, open_flags u32, padding u32                 16 B
const (
	outHeaderSize = 16
	attrSize      = 88
	entryOutSize  = 40 + attrSize
	attrOutSize   = 16 + attrSize
	openOutSize   = 16
)

var ne = binary.NativeEndian

// rawWriter writes replies to the FUSE device. Writes of whole messages are
// atomic and may be concurrent, as bazil's own are.
type rawWriter struct {
	fd int
}

// newRawWriter finds the device descriptor inside c. bazil does not export
// it, so it is read (never written) through reflection and then checked to
// be /dev/fuse (character device 10:229). nil means "not found": callers
// fall back to bazil's encoding.
func newRawWriter(c *fuse.Conn) *rawWriter {
	fd, ok := deviceFD(c)
	if !ok {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil ||
		st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(10, 229) {
		return nil
	}
	return &rawWriter{fd: fd}
}

func deviceFD(c *fuse.Conn) (fd int, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	dev := reflect.ValueOf(c).Elem().FieldByName("dev") // *os.File
	if !dev.IsValid() || dev.Type() != reflect.TypeFor[*os.File]() || dev.IsNil() {
		return -1, false
	}
	file := dev.Elem().Field(0) // *os.file
	if file.Kind() != reflect.Pointer || file.IsNil() {
		return -1, false
	}
	sysfd := file.Elem().FieldByName("pfd").FieldByName("Sysfd")
	if !sysfd.IsValid() || sysfd.Kind() != reflect.Int {
		return -1, false
	}
	return int(sysfd.Int()), true
}

// send fills msg's out header (msg[:16] is reserved for it) and writes the
// message, then returns the request's buffer to bazil's pool.
func (w *rawWriter) send(h *fuse.Header, msg []byte) {
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint32(msg[4:], 0)
	ne.PutUint64(msg[8:], uint64(h.ID))
	_, err := syscall.Write(w.fd, msg)
	// ENOENT: the request was interrupted and the kernel no longer waits
	// for the answer. Nothing else is expected; there is no one to tell.
	_ = err
	// A FORGET's Respond releases the message buffer without replying.
	(&fuse.ForgetRequest{Header: *h}).Respond()
}

func putDuration(b []byte, nsecOff int, d time.Duration) {
	ne.PutUint64(b, uint64(d/time.Second))
	ne.PutUint32(b[nsecOff:], uint32(d%time.Second))
}

func putAttr(b []byte, a *conquest.Attr) {
	ne.PutUint64(b[0:], uint64(a.Ino))
	ne.PutUint64(b[8:], a.Size)
	ne.PutUint64(b[16:], a.Blocks)
	ne.PutUint64(b[24:], uint64(a.Atime.Sec))
	ne.PutUint64(b[32:], uint64(a.Mtime.Sec))
	ne.PutUint64(b[40:], uint64(a.Ctime.Sec))
	ne.PutUint32(b[48:], a.Atime.Nsec)
	ne.PutUint32(b[52:], a.Mtime.Nsec)
	ne.PutUint32(b[56:], a.Ctime.Nsec)
	ne.PutUint32(b[60:], a.Mode)
	ne.PutUint32(b[64:], a.Nlink)
	ne.PutUint32(b[68:], a.Uid)
	ne.PutUint32(b[72:], a.Gid)
	ne.PutUint32(b[76:], a.Rdev)
	ne.PutUint32(b[80:], a.Blksize)
	ne.PutUint32(b[84:], 0)
}

// replyEntry answers a LOOKUP, MKNOD, MKDIR, SYMLINK, LINK or (with open
// set) CREATE with the entry for a. A zero a.Ino is a negative entry.
func (s *Server) replyEntry(req fuse.Request, a conquest.Attr, entryTTL time.Duration, open *fuse.OpenResponse) {
	attrTTL := s.opt.AttrTTL
	if a.Ino == 0 {
		attrTTL = 0
	}
	if s.raw != nil {
		n := outHeaderSize + entryOutSize
		if open != nil {
			n += openOutSize
		}
		msg := make([]byte, n)
		e := msg[outHeaderSize:]
		ne.PutUint64(e[0:], uint64(a.Ino))
		ne.PutUint64(e[8:], a.Gen)
		putDuration(e[16:], 16, entryTTL) // entry_valid @16, nsec @32
		putDuration(e[24:], 12, attrTTL)  // attr_valid @24, nsec @36
		if a.Ino != 0 {
			putAttr(e[40:], &a)
		}
		if open != nil {
			o := e[entryOutSize:]
			ne.PutUint64(o[0:], uint64(open.Handle))
			ne.PutUint32(o[8:], uint32(open.Flags))
		}
		s.raw.send(req.Hdr(), msg)
		return
	}
	le := fuse.LookupResponse{
		Node:       fuse.NodeID(a.Ino),
		Generation: a.Gen,
		EntryValid: entryTTL,
		Attr:       bazilAttr(a, attrTTL),
	}
	switch r := req.(type) {
	case *fuse.LookupRequest:
		r.Respond(&le)
	case *fuse.MknodRequest:
		r.Respond(&le)
	case *fuse.LinkRequest:
		r.Respond(&le)
	case *fuse.MkdirRequest:
		r.Respond(&fuse.MkdirResponse{LookupResponse: le})
	case *fuse.SymlinkRequest:
		r.Respond(&fuse.SymlinkResponse{LookupResponse: le})
	case *fuse.CreateRequest:
		r.Respond(&fuse.CreateResponse{LookupResponse: le, OpenResponse: *open})
	default:
		req.RespondError(syscall.EIO)
	}
}

// replyAttr answers a GETATTR or SETATTR.
func (s *Server) replyAttr(req fuse.Request, a conquest.Attr) {
	if s.raw != nil {
		msg := make([]byte, outHeaderSize+attrOutSize)
		o := msg[outHeaderSize:]
		putDuration(o, 8, s.opt.AttrTTL)
		putAttr(o[16:], &a)
		s.raw.send(req.Hdr(), msg)
		return
	}
	switch r := req.(type) {
	case *fuse.GetattrRequest:
		r.Respond(&fuse.GetattrResponse{Attr: bazilAttr(a, s.opt.AttrTTL)})
	case *fuse.SetattrRequest:
		r.Respond(&fuse.SetattrResponse{Attr: bazilAttr(a, s.opt.AttrTTL)})
	default:
		req.RespondError(syscall.EIO)
	}
}

// MaxRequestData is the most data one READ or WRITE carries: bazil.org/fuse
// (patched, third_party/bazil-fuse) negotiates max_pages for 1 MiB requests
// where the kernel offers it (Linux 4.20+), 128 KiB elsewhere.
const MaxRequestData = 1 << 20

// smallData is the size of the common reply buffer: READs of the
// kernel's page cache readahead start at 128 KiB and READDIR asks for a
// page or a few.
const smallData = 128 << 10

// smallBufs and largeBufs hold reply buffers for READ and READDIR (out
// header + payload): a request for more than smallData takes a large one.
var (
	smallBufs = sync.Pool{New: func() any {
		b := make([]byte, outHeaderSize+smallData)
		return &b
	}}
	largeBufs = sync.Pool{New: func() any {
		b := make([]byte, outHeaderSize+MaxRequestData)
		return &b
	}}
)

// dataBuf returns a reply buffer with room for size bytes of payload (at
// most MaxRequestData); putDataBuf recycles it.
func dataBuf(size int) *[]byte {
	if size > smallData {
		return largeBufs.Get().(*[]byte)
	}
	return smallBufs.Get().(*[]byte)
}

func putDataBuf(buf *[]byte) {
	if len(*buf) > outHeaderSize+smallData {
		largeBufs.Put(buf)
		return
	}
	smallBufs.Put(buf)
}

// replyData answers a READ or READDIR whose payload is msg[16:] of a buffer
// from dataBuf, and recycles the buffer.
func (s *Server) replyData(r *fuse.ReadRequest, buf *[]byte, n int) {
	msg := (*buf)[:outHeaderSize+n]
	if s.raw != nil {
		s.raw.send(&r.Header, msg)
	} else {
		r.Respond(&fuse.ReadResponse{Data: msg[outHeaderSize:]})
	}
	putDataBuf(buf)
}

// bazilAttr is the fallback encoding (loses S_ISVTX).
func bazilAttr(a conquest.Attr, valid time.Duration) fuse.Attr {
	return fuse.Attr{
		Valid:     valid,
		Inode:     uint64(a.Ino),
		Size:      a.Size,
		Blocks:    a.Blocks,
		Atime:     time.Unix(a.Atime.Sec, int64(a.Atime.Nsec)),
		Mtime:     time.Unix(a.Mtime.Sec, int64(a.Mtime.Nsec)),
		Ctime:     time.Unix(a.Ctime.Sec, int64(a.Ctime.Nsec)),
		Mode:      fileMode(a.Mode),
		Nlink:     a.Nlink,
		Uid:       a.Uid,
		Gid:       a.Gid,
		Rdev:      a.Rdev,
		BlockSize: a.Blksize,
	}
}
