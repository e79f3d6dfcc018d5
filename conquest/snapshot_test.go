package conquest

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"testing"
)

// snapEntry is the observable state of one name (times excluded).
type snapEntry struct {
	Ino            Ino
	Mode, Nlink    uint32
	Uid, Gid, Rdev uint32
	Size, Blocks   uint64
	Data           string // sha256 of the contents (regular files)
	Target         string
	Xattrs         string
}

// snapshot walks the tree through the public API (no kernel references
// taken) and returns path -> state.
func snapshot(t *testing.T, fs *FS) map[string]snapEntry {
	t.Helper()
	m := make(map[string]snapEntry)
	var walk func(dir Ino, prefix string)
	walk = func(dir Ino, prefix string) {
		type ent struct {
			name string
			ino  Ino
		}
		var ents []ent
		must(t, fs.ReadDir(dir, 2, func(name string, ino Ino, typ uint8, next uint64) bool {
			ents = append(ents, ent{name, ino})
			return true
		}))
		for _, e := range ents {
			at, err := fs.GetAttr(e.ino)
			if err != nil {
				t.Fatalf("snapshot: %s%s: %v", prefix, e.name, err)
			}
			s := snapEntry{Ino: at.Ino, Mode: at.Mode, Nlink: at.Nlink, Uid: at.Uid, Gid: at.Gid, Rdev: at.Rdev, Size: at.Size, Blocks: at.Blocks}
			switch at.Mode & S_IFMT {
			case S_IFREG:
				buf := make([]byte, at.Size)
				n, err := fs.Read(at.Ino, 0, 0, buf)
				if err != nil || uint64(n) != at.Size {
					t.Fatalf("snapshot: read %s%s: %d, %v", prefix, e.name, n, err)
				}
				s.Data = fmt.Sprintf("%x", sha256.Sum256(buf))
			case S_IFLNK:
				s.Target, err = fs.Readlink(at.Ino)
				must(t, err)
			}
			names, err := fs.ListXattr(at.Ino)
			must(t, err)
			sort.Strings(names)
			var xs []string
			for _, n := range names {
				v, err := fs.GetXattr(at.Ino, n)
				must(t, err)
				xs = append(xs, fmt.Sprintf("%s=%x", n, sha256.Sum256(v)))
			}
			s.Xattrs = strings.Join(xs, ";")
			m[prefix+e.name] = s
			if at.Mode&S_IFMT == S_IFDIR {
				walk(at.Ino, prefix+e.name+"/")
			}
		}
	}
	walk(RootIno, "/")
	return m
}

func diffSnap(a, b map[string]snapEntry) string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, "-"+k)
		} else if v != w {
			d = append(d, fmt.Sprintf("~%s: %+v -> %+v", k, v, w))
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "+"+k)
		}
	}
	sort.Strings(d)
	if len(d) > 10 {
		d = append(d[:10], "...")
	}
	return strings.Join(d, "\n")
}

func equalSnap(a, b map[string]snapEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	must(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	must(t, err)
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	must(t, out.Close())
}

// resolve looks a path up without keeping kernel references.
func resolve(fs *FS, path string) (Ino, error) {
	ino := RootIno
	for _, c := range strings.Split(strings.Trim(path, "/"), "/") {
		if c == "" {
			continue
		}
		at, err := fs.Lookup(ino, c)
		if err != nil {
			return 0, err
		}
		fs.Forget(at.Ino, 1)
		ino = at.Ino
	}
	return ino, nil
}

// crashDuring runs op with a store hook that panics at the n-th journaled
// store (as kill -9 would stop the daemon) and reports whether it fired.
// The arena is then abandoned without Abort.
func crashDuring(fs *FS, n int, op func()) (crashed bool) {
	count := 0
	fs.a.SetStoreHook(func() {
		count++
		if count == n {
			panic(simulatedCrash{})
		}
	})
	defer func() {
		r := recover()
		if r == nil {
			fs.a.SetStoreHook(nil)
			return
		}
		if _, ok := r.(simulatedCrash); !ok {
			panic(r)
		}
		crashed = true
		fs.a.Abandon()
	}()
	op()
	return false
}

// countStores runs op and returns the number of journaled stores it made.
func countStores(fs *FS, op func()) int {
	count := 0
	fs.a.SetStoreHook(func() { count++ })
	op()
	fs.a.SetStoreHook(nil)
	return count
}
