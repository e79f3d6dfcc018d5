package posixtest

import (
	"encoding/binary"
	"fmt"
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
