package e2e

import (
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/internal/mounttest"
)

// TestImageFormat1 opens images made by an old build (testdata/format1:
// conquest at 390ec00, 2026-12-01, see make.sh there) and finds every
// entry as that build left it: type, mode, owner, links, size, mtime,
// contents, symlink targets and xattrs, for small files in the arena,
// large ones and a sparse one on the disk, hard links, a FIFO and a device.
// The arena is used as it lies on the device, with no serialization, so a
// change of its layout that forgot the images already made would read
// them wrong; here it fails (or the check at unmount does). Then it
// changes them with today's code, remounts, and checks again.
func TestImageFormat1(t *testing.T) {
	dir := t.TempDir()
	pram := filepath.Join(dir, "arena.img")
	disk := filepath.Join(dir, "disk.img")
	gunzip(t, "testdata/format1/arena.img.gz", pram)
	gunzip(t, "testdata/format1/disk.img.gz", disk)
	want, err := os.ReadFile("testdata/format1/manifest.txt")
	if err != nil {
		t.Fatal(err)
	}

	m := mount(t, mounttest.WithImages(pram, disk))
	got := manifest(t, m.Dir)
	if !bytes.Equal(got, want) {
		t.Fatalf("the old images read differently:\n%s", lineDiff(string(want), string(got)))
	}

	// Today's code changes them: appends, a file growing onto the disk,
	// a large one truncated back into the arena, a rename, an unlink,
	// xattrs, a write into the sparse file's hole.
	p := m.Path
	appendFile(t, p("dir/small1"), []byte("appended\n"))
	grown := bytes.Repeat([]byte("grown past the threshold\n"), 8000) // 200,000 bytes
	if err := os.WriteFile(p("dir/small2"), grown, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p("dir/large"), 10); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p("dir/over"), p("dir/sub/over2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p("dir/small9")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(p("dir/small3"), "user.new", []byte("v2"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Removexattr(p("dir/small3"), "user.empty"); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p("dir/sparse"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hole filled"), 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	overData := readFile(t, p("dir/sub/over2"))

	remount(t, m)
	small1 := readFile(t, p("dir/sub/hard1"))
	if !bytes.HasSuffix(small1, []byte("small1 line 7 of 7\nappended\n")) {
		t.Errorf("hard link after the append: %q", small1)
	}
	if got := readFile(t, p("dir/small2")); !bytes.Equal(got, grown) {
		t.Errorf("small2 grown onto the disk: %d bytes back, want %d", len(got), len(grown))
	}
	if got := readFile(t, p("dir/large")); string(got) != "large line" {
		t.Errorf("large truncated to 10 bytes: %q", got)
	}
	if got := readFile(t, p("dir/sub/over2")); !bytes.Equal(got, overData) || len(got) != 65537 {
		t.Errorf("renamed over: %d bytes, changed %v", len(got), !bytes.Equal(got, overData))
	}
	if _, err := os.Lstat(p("dir/small9")); !os.IsNotExist(err) {
		t.Errorf("unlinked small9: %v", err)
	}
	if got := xattrs(t, p("dir/small3")); !slices.Equal(got, []string{"user.color 0x626c7565", "user.new 0x7632"}) {
		t.Errorf("small3's xattrs: %q", got)
	}
	sparse := readFile(t, p("dir/sparse"))
	for off, s := range map[int]string{1 << 20: "hole filled", 3000000: "middle", 5242877: "end"} {
		if got := string(sparse[off : off+len(s)]); got != s {
			t.Errorf("sparse at %d: %q, want %q", off, got, s)
		}
	}
	if len(sparse) != 5<<20 || bytes.Count(sparse, []byte{0}) != 5<<20-len("hole filledmiddleend") {
		t.Errorf("sparse: %d bytes, %d of them zero", len(sparse), bytes.Count(sparse, []byte{0}))
	}
}

// manifest lists the tree under root as make.sh does, sorted bytewise by
// path: "path type mode uid gid nlink size mtime content", content the
// MD5 of a file, the target of a symlink, "-" for the rest, and size "-"
// for directories; then "xattr path name 0xVALUE" for every xattr.
func manifest(t *testing.T, root string) []byte {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != root {
			paths = append(paths, "."+strings.TrimPrefix(path, root))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	var b strings.Builder
	for _, rel := range paths {
		path := filepath.Join(root, rel)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			t.Fatal(err)
		}
		kind, size, content := "", fmt.Sprint(st.Size), "-"
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			kind = "file"
			sum := md5.Sum(readFile(t, path))
			content = hex.EncodeToString(sum[:])
		case unix.S_IFDIR:
			kind, size = "directory", "-"
		case unix.S_IFLNK:
			kind = "symlink"
			target, err := os.Readlink(path)
			if err != nil {
				t.Fatal(err)
			}
			content = target
		case unix.S_IFCHR:
			kind = "chardev"
		case unix.S_IFIFO:
			kind = "fifo"
		default:
			kind = fmt.Sprintf("type%o", st.Mode&unix.S_IFMT)
		}
		fmt.Fprintf(&b, "%s %s %o %d %d %d %s %d %s\n", rel, kind, st.Mode&0o7777,
			st.Uid, st.Gid, st.Nlink, size, st.Mtim.Nano(), content)
	}
	for _, rel := range paths {
		for _, x := range xattrs(t, filepath.Join(root, rel)) {
			fmt.Fprintf(&b, "xattr %s %s\n", rel, x)
		}
	}
	return []byte(b.String())
}

// xattrs lists path's xattrs (not following a symlink) as sorted
// "name 0xVALUE" strings.
func xattrs(t *testing.T, path string) []string {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(path, buf)
	if err != nil {
		t.Fatalf("listxattr %s: %v", path, err)
	}
	var out []string
	for name := range strings.SplitSeq(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 64<<10)
		k, err := unix.Lgetxattr(path, name, v)
		if err != nil {
			t.Fatalf("getxattr %s %s: %v", path, name, err)
		}
		out = append(out, name+" 0x"+hex.EncodeToString(v[:k]))
	}
	slices.Sort(out)
	return out
}

func gunzip(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	z, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, z); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func appendFile(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// lineDiff shows the lines only in want ("-") and only in got ("+").
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
