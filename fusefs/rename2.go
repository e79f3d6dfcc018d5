package fusefs

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"syscall"

	"bazil.org/fuse"

	"conquest/conquest"
)

// RENAME2 (renameat2 with flags).
//
// bazil does not parse FUSE_RENAME2: it hands it over as an
// UnrecognizedRequest, whose Header still holds the kernel's message until
// the request is answered. rawMessage reads that message (an unexported
// field, read through reflect, not unsafe), and rename2 decodes it:
//
//	struct fuse_in_header;                      // 40 bytes
//	struct fuse_rename2_in { u64 newdir; u32 flags; u32 padding; };
//	char oldname[]; '\0'; char newname[]; '\0';
//
// The kernel sends RENAME2 only for a renameat2 with flags (a plain rename
// is RENAME): RENAME_NOREPLACE, RENAME_EXCHANGE and RENAME_WHITEOUT
// (overlayfs's upper layer; the kernel checks CAP_MKNOD) go to the core.
// Were the message ever unreadable (a bazil upgrade that changes the
// layout), the answer is ENOSYS and the kernel reports EINVAL, as before.

const (
	opcodeRename2 = 45 // FUSE_RENAME2
	inHeaderSize  = 40 // struct fuse_in_header
	rename2InSize = 16 // struct fuse_rename2_in
)

// rawMessage returns the whole message (header included) behind an
// unrecognized request, or nil.
func rawMessage(r *fuse.UnrecognizedRequest) []byte {
	v := reflect.ValueOf(&r.Header).Elem().FieldByName("msg")
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		return nil
	}
	buf := v.Elem().FieldByName("buf")
	if !buf.IsValid() || buf.Kind() != reflect.Slice || buf.Type().Elem().Kind() != reflect.Uint8 {
		return nil
	}
	return buf.Bytes()
}

// rawBody checks that msg is one whole message of opcode with a body of at
// least minBody bytes and returns the body (after the header).
func rawBody(msg []byte, opcode uint32, minBody int) ([]byte, bool) {
	if len(msg) < inHeaderSize+minBody || binary.LittleEndian.Uint32(msg[0:4]) != uint32(len(msg)) ||
		binary.LittleEndian.Uint32(msg[4:8]) != opcode {
		return nil, false
	}
	return msg[inHeaderSize:], true
}

// rename2In is a decoded FUSE_RENAME2 message.
type rename2In struct {
	newDir           uint64
	flags            uint32
	oldName, newName string
}

// parseRename2 decodes msg, the whole message; ok is false if it is
// malformed.
func parseRename2(msg []byte) (in rename2In, ok bool) {
	body, ok := rawBody(msg, opcodeRename2, rename2InSize)
	if !ok {
		return in, false
	}
	in.newDir = binary.LittleEndian.Uint64(body[0:8])
	in.flags = binary.LittleEndian.Uint32(body[8:12])
	names := body[rename2InSize:]
	i := bytes.IndexByte(names, 0)
	if i < 0 {
		return in, false
	}
	rest := names[i+1:]
	j := bytes.IndexByte(rest, 0)
	if j < 0 || j != len(rest)-1 {
		return in, false
	}
	in.oldName, in.newName = string(names[:i]), string(rest[:j])
	return in, true
}

// rename2 answers a FUSE_RENAME2 request.
func (s *Server) rename2(r *fuse.UnrecognizedRequest) {
	in, ok := parseRename2(rawMessage(r))
	if !ok {
		r.RespondError(syscall.ENOSYS)
		return
	}
	// The reply is an empty success, as for RENAME; answering through a
	// RenameRequest with the same Header releases the message.
	rr := &fuse.RenameRequest{Header: r.Header, NewDir: fuse.NodeID(in.newDir), OldName: in.oldName, NewName: in.newName}
	var err error
	var kept conquest.Attr
	if in.flags&conquest.RenameWhiteout != 0 {
		err = s.fs.RenameWhiteout(ino(r.Node), in.oldName, ino(rr.NewDir), in.newName, in.flags&^conquest.RenameWhiteout, cred(&r.Header))
	} else {
		kept, err = s.fs.RenameKept(ino(r.Node), in.oldName, ino(rr.NewDir), in.newName, in.flags)
	}
	if err != nil {
		s.respondError(r, err)
		return
	}
	s.dropCached(kept.Ino, kept.Mode)
	s.dropCachedRenamed(ino(rr.NewDir), in.newName)
	if in.flags&conquest.RenameExchange != 0 {
		s.dropCachedRenamed(ino(r.Node), in.oldName)
	}
	s.dirChanged(ino(r.Node), ino(rr.NewDir))
	rr.Respond()
}
