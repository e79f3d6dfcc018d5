package posixtest

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sort"
	"testing"

	"golang.org/x/sys/unix"
)

// Reading directories through getdents64, with offsets (telldir/seekdir) and
// concurrent deletion.
var readdirTests = map[string]Test{
	"ReaddirBig":          testReaddirBig,
	"ReaddirTypes":        testReaddirTypes,
	"ReaddirDeleteChunks": testReaddirDeleteChunks,
	"ReaddirSeekStable":   testReaddirSeekStable,
	"ReaddirRewind":       testReaddirRewind,
	"ReaddirFresh":        testReaddirFresh,
	"ReaddirDotDotMoved":  testReaddirDotDotMoved,
}

// dirent is one entry returned by getdents64.
type dirent struct {
	Ino  uint64
	Off  int64 // the cookie to seek to for the entry after this one
	Type uint8
	Name string
}

// parseDirents decodes a getdents64 buffer.
func parseDirents(buf []byte) []dirent {
	var out []dirent
	for len(buf) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(buf[16:18]))
		if reclen < 19 || reclen > len(buf) {
			break
		}
		name := buf[19:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		out = append(out, dirent{
			Ino:  binary.NativeEndian.Uint64(buf[0:8]),
			Off:  int64(binary.NativeEndian.Uint64(buf[8:16])),
			Type: buf[18],
			Name: string(name),
		})
		buf = buf[reclen:]
	}
	return out
}

// getdents reads one chunk of at most bufSize bytes from fd.
func getdents(fd, bufSize int) ([]dirent, error) {
	buf := make([]byte, bufSize)
	n, err := unix.Getdents(fd, buf)
	if err != nil {
		return nil, err
	}
	return parseDirents(buf[:n]), nil
}

// readDirents lists a directory, "." and ".." included, in the order the
// file system returns them.
func readDirents(dir string) ([]dirent, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var all []dirent
	for {
		ents, err := getdents(fd, 8192)
		if err != nil {
			return nil, err
		}
		if len(ents) == 0 {
			return all, nil
		}
		all = append(all, ents...)
	}
}

// readNames lists a directory without "." and "..", sorted.
func readNames(dir string) ([]string, error) {
	ents, err := readDirents(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.Name != "." && e.Name != ".." {
			names = append(names, e.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

func testReaddirBig(t *testing.T, dir string) {
	const n = 2000
	want := map[string]uint64{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("entry-%05d-%s", i, string(rune('a'+i%26)))
		p := join(dir, name)
		if i%10 == 0 {
			mkdir(t, p, 0755)
		} else {
			fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
			ok(t, err, "create")
			unix.Close(fd)
		}
		want[name] = lstat(t, p).Ino
	}
	for _, bufSize := range []int{512, 32768} {
		fd := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		seen := map[string]int{}
		offs := map[int64]bool{}
		for {
			ents, err := getdents(fd, bufSize)
			ok(t, err, "getdents")
			if len(ents) == 0 {
				break
			}
			for _, e := range ents {
				seen[e.Name]++
				if offs[e.Off] {
					t.Fatalf("offset %d returned twice", e.Off)
				}
				offs[e.Off] = true
				if e.Name == "." || e.Name == ".." {
					continue
				}
				if ino, found := want[e.Name]; !found {
					t.Fatalf("unexpected entry %q", e.Name)
				} else if ino != e.Ino {
					t.Fatalf("%s: readdir ino %d, stat ino %d", e.Name, e.Ino, ino)
				}
			}
		}
		for name, c := range seen {
			if c != 1 {
				t.Fatalf("buf %d: %q listed %d times", bufSize, name, c)
			}
		}
		if len(seen) != n+2 {
			t.Fatalf("buf %d: listed %d entries, want %d + . and ..", bufSize, len(seen), n)
		}
	}
}

func testReaddirTypes(t *testing.T, dir string) {
	writeFile(t, join(dir, "reg"), nil, 0644)
	mkdir(t, join(dir, "dir"), 0755)
	ok(t, unix.Symlink("reg", join(dir, "lnk")), "symlink")
	ok(t, unix.Mkfifo(join(dir, "fifo"), 0644), "mkfifo")
	want := map[string]uint8{".": unix.DT_DIR, "..": unix.DT_DIR, "reg": unix.DT_REG, "dir": unix.DT_DIR, "lnk": unix.DT_LNK, "fifo": unix.DT_FIFO}
	ents, err := readDirents(dir)
	ok(t, err, "readdir")
	if len(ents) != len(want) {
		t.Fatalf("listed %v", ents)
	}
	for _, e := range ents {
		if w, found := want[e.Name]; !found || w != e.Type {
			t.Fatalf("%q: d_type %d, want %d", e.Name, e.Type, w)
		}
	}
}

// testReaddirDeleteChunks is the rm -rf pattern: read a few entries with a
// small buffer, delete them, continue reading from the same descriptor.
// Nothing may be skipped, so the directory ends up empty.
func testReaddirDeleteChunks(t *testing.T, dir string) {
	d := join(dir, "d")
	mkdir(t, d, 0755)
	const n = 1000
	for i := 0; i < n; i++ {
		writeFile(t, join(d, fmt.Sprintf("file-with-a-longish-name-%04d", i)), nil, 0644)
	}
	fd := open(t, d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	deleted := map[string]bool{}
	for {
		ents, err := getdents(fd, 256) // a few entries per call
		ok(t, err, "getdents")
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			if e.Name == "." || e.Name == ".." {
				continue
			}
			if deleted[e.Name] {
				t.Fatalf("%q returned again after it was deleted", e.Name)
			}
			ok(t, unix.Unlink(join(d, e.Name)), "unlink "+e.Name)
			deleted[e.Name] = true
		}
	}
	if len(deleted) != n {
		left, _ := readNames(d)
		t.Fatalf("deleted %d of %d entries while reading; %d skipped", len(deleted), n, len(left))
	}
	ok(t, unix.Rmdir(d), "rmdir after deleting all")
}

// testReaddirSeekStable: offsets returned by getdents can be sought to
// (seekdir), and stay valid while other entries are deleted.
func testReaddirSeekStable(t *testing.T, dir string) {
	d := join(dir, "d")
	mkdir(t, d, 0755)
	const n = 300
	for i := 0; i < n; i++ {
		writeFile(t, join(d, fmt.Sprintf("f%03d", i)), nil, 0644)
	}
	fd := open(t, d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	var first []dirent
	for {
		ents, err := getdents(fd, 300)
		ok(t, err, "getdents")
		if len(ents) == 0 {
			break
		}
		first = append(first, ents...)
	}
	if len(first) != n+2 {
		t.Fatalf("listed %d entries, want %d", len(first), n+2)
	}
	readFrom := func(off int64) []dirent {
		t.Helper()
		got, err := unix.Seek(fd, off, 0)
		ok(t, err, "seekdir")
		if got != off {
			t.Fatalf("seekdir to %d landed at %d", off, got)
		}
		var out []dirent
		for {
			ents, err := getdents(fd, 300)
			ok(t, err, "getdents")
			if len(ents) == 0 {
				return out
			}
			out = append(out, ents...)
		}
	}
	// telldir after entry k, then seekdir there: the rest comes again.
	for _, k := range []int{0, 1, 5, n / 2, n} {
		rest := readFrom(first[k].Off)
		if !sameNames(rest, first[k+1:]) {
			t.Fatalf("after seekdir to entry %d: got %d entries, want %d", k, len(rest), len(first)-k-1)
		}
	}
	// Delete every third entry; offsets of the survivors still work and
	// give exactly the survivors after them.
	gone := map[string]bool{}
	for i, e := range first {
		if e.Name != "." && e.Name != ".." && i%3 == 0 {
			ok(t, unix.Unlink(join(d, e.Name)), "unlink")
			gone[e.Name] = true
		}
	}
	for _, k := range []int{1, 7, n / 2, n - 1} {
		if gone[first[k].Name] {
			k++
		}
		var want []dirent
		for _, e := range first[k+1:] {
			if !gone[e.Name] {
				want = append(want, e)
			}
		}
		rest := readFrom(first[k].Off)
		if !sameNames(rest, want) {
			t.Fatalf("after deletions, seekdir to entry %d (%q): got %d entries, want %d", k, first[k].Name, len(rest), len(want))
		}
	}
}

func sameNames(a, b []dirent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			return false
		}
	}
	return true
}

func testReaddirRewind(t *testing.T, dir string) {
	for i := 0; i < 50; i++ {
		writeFile(t, join(dir, fmt.Sprintf("f%d", i)), nil, 0644)
	}
	fd := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	one := readAllFd(t, fd)
	if len(one) != 52 {
		t.Fatalf("listed %d entries, want 52", len(one))
	}
	// An entry created after the scan ended shows after a rewind.
	writeFile(t, join(dir, "late"), nil, 0644)
	_, err := unix.Seek(fd, 0, 0)
	ok(t, err, "rewinddir")
	two := readAllFd(t, fd)
	if len(two) != len(one)+1 {
		t.Fatalf("after rewind %d entries, want %d", len(two), len(one)+1)
	}
}

// readAllFd reads a directory descriptor from its current offset to the end.
func readAllFd(t testing.TB, fd int) []dirent {
	t.Helper()
	var all []dirent
	for {
		ents, err := getdents(fd, 4096)
		ok(t, err, "getdents")
		if len(ents) == 0 {
			return all
		}
		all = append(all, ents...)
	}
}

// testReaddirFresh: a directory listed again after each kind of change to
// its entries shows exactly the entries it has, each with its inode number
// and type (Conquest: the kernel keeps listings and must reread them).
func testReaddirFresh(t *testing.T, dir string) {
	d := join(dir, "d")
	mkdir(t, d, 0755)
	other := join(dir, "other")
	mkdir(t, other, 0755)
	check := func(why string) {
		t.Helper()
		for round := 0; round < 2; round++ { // the second from the kernel's cache, if any
			ents, err := readDirents(d)
			ok(t, err, "readdir "+why)
			got := map[string]bool{}
			for _, e := range ents {
				if got[e.Name] {
					t.Fatalf("%s: %q listed twice", why, e.Name)
				}
				got[e.Name] = true
				st := lstat(t, join(d, e.Name))
				if e.Ino != st.Ino {
					t.Fatalf("%s: %q listed with inode %d, lstat says %d", why, e.Name, e.Ino, st.Ino)
				}
				if want := dtypeOf(st.Mode); e.Type != want {
					t.Fatalf("%s: %q listed with type %d, lstat says %d", why, e.Name, e.Type, want)
				}
			}
			f, err := os.Open(d)
			ok(t, err, "open")
			names, err := f.Readdirnames(-1)
			f.Close()
			ok(t, err, "readdirnames")
			if len(names)+2 != len(ents) {
				t.Fatalf("%s: getdents64 listed %d entries, Readdirnames %d (+2)", why, len(ents), len(names))
			}
			for _, n := range names {
				if !got[n] {
					t.Fatalf("%s: %q missing from getdents64", why, n)
				}
			}
		}
	}
	want := func(why string, names ...string) {
		t.Helper()
		check(why)
		got, err := readNames(d)
		ok(t, err, "readdir")
		sort.Strings(names)
		if !slices.Equal(got, names) {
			t.Fatalf("%s: listed %q, want %q", why, got, names)
		}
	}
	want("empty")
	writeFile(t, join(d, "a"), []byte("a"), 0644)
	want("create", "a")
	mkdir(t, join(d, "sub"), 0755)
	want("mkdir", "a", "sub")
	ok(t, unix.Symlink("a", join(d, "ln")), "symlink")
	want("symlink", "a", "ln", "sub")
	ok(t, unix.Mkfifo(join(d, "fifo"), 0644), "mkfifo")
	want("mkfifo", "a", "fifo", "ln", "sub")
	ok(t, unix.Link(join(d, "a"), join(d, "hard")), "link")
	want("link", "a", "fifo", "hard", "ln", "sub")
	ok(t, unix.Rename(join(d, "fifo"), join(d, "pipe")), "rename within")
	want("rename within", "a", "hard", "ln", "pipe", "sub")
	writeFile(t, join(other, "in"), nil, 0644)
	ok(t, unix.Rename(join(other, "in"), join(d, "in")), "rename in")
	want("rename in", "a", "hard", "in", "ln", "pipe", "sub")
	ok(t, unix.Rename(join(d, "ln"), join(other, "ln")), "rename out")
	want("rename out", "a", "hard", "in", "pipe", "sub")
	// A name that now stands for another inode of another type.
	mkdir(t, join(other, "x"), 0755)
	ok(t, unix.Rmdir(join(d, "sub")), "rmdir")
	want("rmdir", "a", "hard", "in", "pipe")
	writeFile(t, join(d, "sub"), nil, 0644)
	want("a file where a directory was", "a", "hard", "in", "pipe", "sub")
	writeFile(t, join(other, "new"), []byte("new"), 0644)
	ok(t, unix.Rename(join(other, "new"), join(d, "a")), "rename over")
	want("rename over", "a", "hard", "in", "pipe", "sub")
	ok(t, unix.Unlink(join(d, "pipe")), "unlink")
	want("unlink", "a", "hard", "in", "sub")
	if err := unix.Renameat2(unix.AT_FDCWD, join(d, "in"), unix.AT_FDCWD, join(other, "x"), unix.RENAME_EXCHANGE); err == nil {
		want("exchange", "a", "hard", "in", "sub")
	} else if err != unix.EINVAL && err != unix.ENOSYS {
		t.Fatalf("renameat2 RENAME_EXCHANGE: %v", err)
	}
	fd, err := unix.Open(d, unix.O_TMPFILE|unix.O_RDWR, 0644)
	if err == nil {
		ok(t, unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, join(d, "tmp"), unix.AT_SYMLINK_FOLLOW), "linkat")
		unix.Close(fd)
		want("O_TMPFILE linked", "a", "hard", "in", "sub", "tmp")
	}
}

// dtypeOf is the getdents64 d_type of a file of mode m: its type bits
// shifted down (the kernel's IFTODT; DT_DIR is S_IFDIR>>12 and so on).
func dtypeOf(m uint32) uint8 {
	return uint8((m & unix.S_IFMT) >> 12)
}

// testReaddirDotDotMoved: ".." in a listing of a directory moved to another
// parent (by rename or by RENAME_EXCHANGE) is the new parent, even when the
// directory was listed before the move (Conquest: the kernel's cached
// listing must be dropped).
func testReaddirDotDotMoved(t *testing.T, dir string) {
	a, b := join(dir, "a"), join(dir, "b")
	mkdir(t, a, 0755)
	mkdir(t, b, 0755)
	dots := func(p string) (dot, dotdot uint64) {
		t.Helper()
		for round := 0; round < 2; round++ {
			ents, err := readDirents(p)
			ok(t, err, "readdir "+p)
			dot, dotdot = 0, 0
			for _, e := range ents {
				switch e.Name {
				case ".":
					dot = e.Ino
				case "..":
					dotdot = e.Ino
				}
			}
		}
		return dot, dotdot
	}
	expect := func(p, parent, why string) {
		t.Helper()
		dot, dotdot := dots(p)
		if self := lstat(t, p).Ino; dot != self {
			t.Fatalf("%s: \".\" of %s is inode %d, want %d", why, p, dot, self)
		}
		if want := lstat(t, parent).Ino; dotdot != want {
			t.Fatalf("%s: \"..\" of %s is inode %d, want %d (its parent)", why, p, dotdot, want)
		}
	}
	x := join(a, "x")
	mkdir(t, x, 0755)
	writeFile(t, join(x, "f"), nil, 0644)
	expect(x, a, "before the move")
	ok(t, unix.Rename(x, join(b, "x")), "rename")
	expect(join(b, "x"), b, "after rename")
	y := join(a, "y")
	mkdir(t, y, 0755)
	expect(y, a, "before the exchange")
	expect(join(b, "x"), b, "before the exchange")
	err := unix.Renameat2(unix.AT_FDCWD, y, unix.AT_FDCWD, join(b, "x"), unix.RENAME_EXCHANGE)
	if err == unix.EINVAL || err == unix.ENOSYS {
		t.Skipf("no RENAME_EXCHANGE: %v", err)
	}
	ok(t, err, "renameat2 RENAME_EXCHANGE")
	expect(join(a, "y"), a, "after the exchange")
	expect(join(b, "x"), b, "after the exchange")
	if _, err := os.Stat(join(a, "y", "f")); err != nil {
		t.Fatalf("after the exchange a/y is not the old b/x: %v", err)
	}
}
