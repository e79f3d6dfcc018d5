package fusefs

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// A stream open across a change to its directory, whose whole listing the
// kernel holds, reads on from the daemon (dircache.go): a name removed,
// renamed away or replaced before getdents reaches it is not returned, or
// comes with its new inode number. (The kernel's cache would return them
// all as they were; ext4 may return a few from the block it has read.)
func TestOpenStreamSeesChanges(t *testing.T) {
	_, mnt := mountHere(t, Options{})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const n = 200
	type dirent struct {
		ino  uint64
		name string
	}
	getdents := func(fd int) []dirent {
		buf := make([]byte, 1024)
		k, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		var out []dirent
		for b := buf[:k]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			out = append(out, dirent{binary.NativeEndian.Uint64(b[0:8]), string(name)})
			b = b[reclen:]
		}
		return out
	}
	cases := []struct {
		name   string
		dirs   bool // the entries are directories
		change func(d, other, x string)
		gone   bool // x must not be returned after the change
	}{
		{"unlink", false, func(d, _, x string) { must(unix.Unlink(filepath.Join(d, x))) }, true},
		{"rmdir", true, func(d, _, x string) { must(unix.Rmdir(filepath.Join(d, x))) }, true},
		{"rename away", false, func(d, other, x string) {
			must(unix.Rename(filepath.Join(d, x), filepath.Join(other, x)))
		}, true},
		{"rename within", false, func(d, _, x string) {
			must(unix.Rename(filepath.Join(d, x), filepath.Join(d, "r"+x)))
		}, true},
		{"rename over", false, func(d, other, x string) {
			must(os.WriteFile(filepath.Join(other, x), nil, 0o644))
			must(unix.Rename(filepath.Join(other, x), filepath.Join(d, x)))
		}, false},
		{"exchange", false, func(d, other, x string) {
			must(os.WriteFile(filepath.Join(other, x), nil, 0o644))
			must(unix.Renameat2(unix.AT_FDCWD, filepath.Join(d, x), unix.AT_FDCWD, filepath.Join(other, x), unix.RENAME_EXCHANGE))
		}, false},
	}
	for ci, c := range cases {
		d, other := filepath.Join(mnt, fmt.Sprintf("d%d", ci)), filepath.Join(mnt, fmt.Sprintf("o%d", ci))
		must(os.Mkdir(d, 0o755))
		must(os.Mkdir(other, 0o755))
		for i := range n {
			p := filepath.Join(d, fmt.Sprintf("e%03d", i))
			if c.dirs {
				must(os.Mkdir(p, 0o755))
			} else {
				must(os.WriteFile(p, nil, 0o644))
			}
		}
		for range 2 { // the second listing from the kernel's cache
			if ents, err := os.ReadDir(d); err != nil || len(ents) != n {
				t.Fatalf("%s: listed %d entries (%v)", c.name, len(ents), err)
			}
		}
		fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		must(err)
		t.Cleanup(func() { unix.Close(fd) }) // before the unmount, even on failure
		seen := map[string]bool{".": true, "..": true}
		first := getdents(fd)
		for _, e := range first {
			seen[e.name] = true
		}
		if len(first) < 3 || len(first) >= n {
			t.Fatalf("%s: the first getdents returned %d entries", c.name, len(first))
		}
		changed := map[string]bool{}
		for i := range n {
			if x := fmt.Sprintf("e%03d", i); !seen[x] {
				c.change(d, other, x)
				changed[x] = true
			}
		}
		for {
			ents := getdents(fd)
			if len(ents) == 0 {
				break
			}
			for _, e := range ents {
				if !changed[e.name] {
					continue
				}
				if c.gone {
					t.Fatalf("%s: the open stream returned %q after it was gone", c.name, e.name)
				}
				var st unix.Stat_t
				must(unix.Lstat(filepath.Join(d, e.name), &st))
				if e.ino != st.Ino {
					t.Fatalf("%s: the open stream returned %q with inode %d, now %d", c.name, e.name, e.ino, st.Ino)
				}
			}
		}
	}
}
