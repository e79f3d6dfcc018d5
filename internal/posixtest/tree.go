package posixtest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Node is what Snapshot records about one path.
type Node struct {
	Mode       uint32 // st_mode: type and permission bits
	UID, GID   uint32
	Nlink      uint64
	Size       int64
	Rdev       uint64
	Ino        uint64
	Mtime      unix.Timespec
	Target     string            // symlink target
	Sum        [sha256.Size]byte // regular file content
	Xattrs     map[string]string // user.* and trusted.* attributes
	LinkGroup  string            // other paths of the same inode, sorted, "|"-joined (non-directories)
	ReadFailed string            // content could not be read
}

// Tree maps "/"-separated paths relative to the snapshot root ("." is the
// root itself) to nodes.
type Tree map[string]Node

// Snapshot walks dir without following symlinks and records every path.
func Snapshot(dir string) (Tree, error) {
	tr := Tree{}
	byIno := map[uint64][]string{}
	var walk func(rel string) error
	walk = func(rel string) error {
		p := dir
		if rel != "." {
			p = dir + "/" + rel
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("lstat %s: %w", p, err)
		}
		n := Node{Mode: st.Mode, UID: st.Uid, GID: st.Gid, Nlink: uint64(st.Nlink), Size: st.Size,
			Rdev: uint64(st.Rdev), Ino: st.Ino, Mtime: st.Mtim}
		n.Xattrs = readXattrs(p)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			t, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("readlink %s: %w", p, err)
			}
			n.Target = t
		case unix.S_IFREG:
			sum, err := fileSum(p)
			if err != nil {
				n.ReadFailed = err.Error()
			}
			n.Sum = sum
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			byIno[st.Ino] = append(byIno[st.Ino], rel)
		}
		tr[rel] = n
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			names, err := readNames(p)
			if err != nil {
				return fmt.Errorf("readdir %s: %w", p, err)
			}
			for _, name := range names {
				child := name
				if rel != "." {
					child = rel + "/" + name
				}
				if err := walk(child); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("."); err != nil {
		return nil, err
	}
	for _, paths := range byIno {
		if len(paths) < 2 {
			continue
		}
		sort.Strings(paths)
		for _, p := range paths {
			n := tr[p]
			n.LinkGroup = strings.Join(paths, "|")
			tr[p] = n
		}
	}
	return tr, nil
}

func readXattrs(p string) map[string]string {
	n, err := unix.Llistxattr(p, nil)
	if err != nil || n == 0 {
		return nil
	}
	buf := make([]byte, n)
	n, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil
	}
	var out map[string]string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") && !strings.HasPrefix(name, "trusted.") {
			continue
		}
		v := make([]byte, 65536)
		m, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = string(v[:m])
	}
	return out
}

// Compare says which Node fields Diff looks at beyond the always-compared
// ones (type, permission bits, size, content, symlink target, rdev, link
// structure and link counts).
type Compare struct {
	Owners bool // uid and gid
	Mtime  bool // mtime to the nanosecond (a remount must keep it)
	Inodes bool // inode numbers (a remount must keep them)
	Xattrs bool
	Root   bool // also compare the root directory itself
}

// Diff lists differences between two trees, "a" the one under test and "b"
// the reference; empty means equal. At most max lines (0: no limit).
func Diff(a, b Tree, c Compare, max int) []string {
	var out []string
	add := func(format string, args ...any) {
		if max == 0 || len(out) < max {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	paths := map[string]bool{}
	for p := range a {
		paths[p] = true
	}
	for p := range b {
		paths[p] = true
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	for _, p := range sorted {
		if p == "." && !c.Root {
			continue
		}
		x, inA := a[p]
		y, inB := b[p]
		switch {
		case !inA:
			add("%s: missing (reference has mode %o size %d)", p, y.Mode, y.Size)
			continue
		case !inB:
			add("%s: unexpected (mode %o size %d)", p, x.Mode, x.Size)
			continue
		}
		if x.Mode != y.Mode {
			add("%s: mode %o, want %o", p, x.Mode, y.Mode)
		}
		if x.Nlink != y.Nlink {
			add("%s: nlink %d, want %d", p, x.Nlink, y.Nlink)
		}
		isReg := x.Mode&unix.S_IFMT == unix.S_IFREG
		isDir := x.Mode&unix.S_IFMT == unix.S_IFDIR
		if !isDir && x.Size != y.Size {
			add("%s: size %d, want %d", p, x.Size, y.Size)
		}
		if isReg && x.Sum != y.Sum {
			add("%s: content differs (size %d)", p, x.Size)
		}
		if x.ReadFailed != y.ReadFailed {
			add("%s: read error %q, want %q", p, x.ReadFailed, y.ReadFailed)
		}
		if x.Target != y.Target {
			add("%s: symlink target %q, want %q", p, x.Target, y.Target)
		}
		if x.Rdev != y.Rdev && (x.Mode&unix.S_IFMT == unix.S_IFCHR || x.Mode&unix.S_IFMT == unix.S_IFBLK) {
			add("%s: rdev %#x, want %#x", p, x.Rdev, y.Rdev)
		}
		if x.LinkGroup != y.LinkGroup {
			add("%s: hard links %q, want %q", p, x.LinkGroup, y.LinkGroup)
		}
		if c.Owners && (x.UID != y.UID || x.GID != y.GID) {
			add("%s: owner %d:%d, want %d:%d", p, x.UID, x.GID, y.UID, y.GID)
		}
		if c.Mtime && !tsEqual(x.Mtime, y.Mtime) {
			add("%s: mtime %v, want %v", p, tsTime(x.Mtime), tsTime(y.Mtime))
		}
		if c.Inodes && x.Ino != y.Ino {
			add("%s: ino %d, want %d", p, x.Ino, y.Ino)
		}
		if c.Xattrs && fmt.Sprint(x.Xattrs) != fmt.Sprint(y.Xattrs) {
			add("%s: xattrs %v, want %v", p, x.Xattrs, y.Xattrs)
		}
	}
	return out
}

// ErrTreeDiffers is returned (wrapped) by CheckTree.
var ErrTreeDiffers = errors.New("trees differ")

// CheckTree snapshots both directories and diffs them.
func CheckTree(got, want string, c Compare) error {
	a, err := Snapshot(got)
	if err != nil {
		return err
	}
	b, err := Snapshot(want)
	if err != nil {
		return err
	}
	if d := Diff(a, b, c, 30); len(d) > 0 {
		return fmt.Errorf("%w:\n  %s", ErrTreeDiffers, strings.Join(d, "\n  "))
	}
	return nil
}
