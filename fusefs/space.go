package fusefs

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"bazil.org/fuse"

	"conquest/conquest"
)

// SpaceXattr is a read-only extended attribute of every file on the mount
// (not listed): the arena's and the disk's space, which statfs(2) can only
// report added together. `conquest df MOUNTPOINT` reads it (getfattr -n
// system.conquest.space does too). It is in the system namespace, which
// the VFS leaves to the file system for every user, and which the core
// never stores (ENOTSUP), so it cannot shadow a real attribute.
const SpaceXattr = "system.conquest.space"

// spaceFields name the lines of the SpaceXattr value, "name value\n" each.
var spaceFields = []struct {
	name     string
	get      func(*conquest.Space) *uint64
	optional bool // a daemon before session 36 does not send it
}{
	{"arena_bytes", func(s *conquest.Space) *uint64 { return &s.ArenaBytes }, false},
	{"heap_bytes", func(s *conquest.Space) *uint64 { return &s.HeapBytes }, false},
	{"heap_used", func(s *conquest.Space) *uint64 { return &s.HeapUsed }, false},
	{"heap_free", func(s *conquest.Space) *uint64 { return &s.HeapFree }, false},
	{"inodes", func(s *conquest.Space) *uint64 { return &s.Inodes }, false},
	{"disk_bytes", func(s *conquest.Space) *uint64 { return &s.DiskBytes }, false},
	{"disk_used", func(s *conquest.Space) *uint64 { return &s.DiskUsed }, false},
	{"disk_free", func(s *conquest.Space) *uint64 { return &s.DiskFree }, false},
	{"disk_avail", func(s *conquest.Space) *uint64 { return &s.DiskAvail }, true},
}

// FormatSpace encodes sp as the SpaceXattr value.
func FormatSpace(sp conquest.Space) []byte {
	var b strings.Builder
	for _, f := range spaceFields {
		fmt.Fprintf(&b, "%s %d\n", f.name, *f.get(&sp))
	}
	return []byte(b.String())
}

// ParseSpace decodes a SpaceXattr value; unknown lines are skipped (a newer
// daemon may add some), missing ones are an error except disk_avail, which
// is then disk_free (an older daemon's disk had no overwrite reserve).
func ParseSpace(v []byte) (conquest.Space, error) {
	var sp conquest.Space
	sp.DiskAvail = ^uint64(0)
	seen, required := 0, 0
	for _, f := range spaceFields {
		if !f.optional {
			required++
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(v)), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			return sp, fmt.Errorf("malformed line %q", line)
		}
		for _, f := range spaceFields {
			if f.name == name {
				n, err := strconv.ParseUint(val, 10, 64)
				if err != nil {
					return sp, fmt.Errorf("%s: %v", name, err)
				}
				*f.get(&sp) = n
				if !f.optional {
					seen++
				}
			}
		}
	}
	if seen != required {
		return sp, fmt.Errorf("%d of %d fields", seen, required)
	}
	if sp.DiskAvail == ^uint64(0) {
		sp.DiskAvail = sp.DiskFree
	}
	return sp, nil
}

// getSpace answers getxattr of SpaceXattr.
func (s *Server) getSpace(r *fuse.GetxattrRequest) {
	v := FormatSpace(s.fs.Space())
	if r.Size != 0 && uint32(len(v)) > r.Size {
		r.RespondError(syscall.ERANGE)
		return
	}
	r.Respond(&fuse.GetxattrResponse{Xattr: v})
}
