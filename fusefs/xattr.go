package fusefs

import (
	"strings"
	"syscall"

	"bazil.org/fuse"
)

// Extended attributes. getxattr of security.capability is asked by the
// kernel before the first write to each inode (file_remove_privs); with
// HANDLE_KILLPRIV_V2 negotiated the kernel marks the inode S_NOSEC after
// the answer and stops asking. The core answers it like any other name
// (ENODATA when absent) from its own short read lock. ENOSYS is never used
// here: it would turn off every xattr for the whole mount.

func (s *Server) getxattr(r *fuse.GetxattrRequest) {
	if r.Name == SpaceXattr {
		s.getSpace(r)
		return
	}
	if r.Name == ReadOnlyXattr && r.Node == fuse.RootID {
		s.getReadOnly(r)
		return
	}
	v, err := s.fs.GetXattr(ino(r.Node), r.Name)
	if err != nil {
		s.respondError(r, err)
		return
	}
	if r.Size != 0 && uint32(len(v)) > r.Size {
		r.RespondError(syscall.ERANGE)
		return
	}
	r.Respond(&fuse.GetxattrResponse{Xattr: v}) // Size 0: bazil sends the length
}

func (s *Server) listxattr(r *fuse.ListxattrRequest) {
	names, err := s.fs.ListXattr(ino(r.Node))
	if err != nil {
		s.respondError(r, err)
		return
	}
	if hasTrusted(names) && !callerIsAdmin(&r.Header) {
		names = hideTrusted(names)
	}
	var resp fuse.ListxattrResponse
	resp.Append(names...) // NUL-terminated names
	if r.Size != 0 && uint32(len(resp.Xattr)) > r.Size {
		r.RespondError(syscall.ERANGE)
		return
	}
	r.Respond(&resp)
}

func (s *Server) setxattr(r *fuse.SetxattrRequest) {
	if r.Name == NoAtimeXattr && r.Node == fuse.RootID {
		s.setNoAtime(r)
		return
	}
	if r.Name == CommitXattr && r.Node == fuse.RootID {
		s.setCommit(r)
		return
	}
	if err := s.fs.SetXattr(ino(r.Node), r.Name, r.Xattr, r.Flags); err != nil {
		s.respondError(r, err)
		return
	}
	s.dropCachedIno(ino(r.Node))
	r.Respond()
}

func (s *Server) removexattr(r *fuse.RemovexattrRequest) {
	if err := s.fs.RemoveXattr(ino(r.Node), r.Name); err != nil {
		s.respondError(r, err)
		return
	}
	if r.Name == capabilityXattr {
		s.noteCapRemoved(r)
	}
	s.dropCachedIno(ino(r.Node))
	r.Respond()
}

// hasTrusted reports whether a list holds a trusted.* name (only then is
// the caller's capability read from /proc).
func hasTrusted(names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, "trusted.") {
			return true
		}
	}
	return false
}

// hideTrusted drops the trusted.* names from a list, which a caller
// without CAP_SYS_ADMIN may neither read nor see listed (as on ext4: the
// kernel checks reads and writes of such names itself, but leaves lists to
// the file system).
func hideTrusted(names []string) []string {
	var kept []string
	for _, n := range names {
		if !strings.HasPrefix(n, "trusted.") {
			kept = append(kept, n)
		}
	}
	return kept
}
