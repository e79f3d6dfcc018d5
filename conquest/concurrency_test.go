package conquest

import (
	"bytes"
	"errors"
	"math/rand"
	"sync"
	"testing"

	"conquest/diskstore"
)

// TestConcurrency runs creators, renamers, unlinkers, writers, readers and
// directory scanners on one directory at once (run it with -race). Each
// writer owns a file and checks its contents at the end; the others only
// require that every error is one the operation may legitimately return.
func TestConcurrency(t *testing.T) { runConcurrency(t, fsOpt{}) }

// TestConcurrencyDisk is TestConcurrency with a disk: the writers' files
// cross the 64 KiB threshold; reads of large files run concurrently (with
// readahead) under the shared lock.
func TestConcurrencyDisk(t *testing.T) {
	runConcurrency(t, fsOpt{disk: true, diskOpts: diskstore.Options{FileBuffer: 128 << 10}})
}

func runConcurrency(t *testing.T, o fsOpt) {
	fs, _ := newTestFSOpt(t, o)
	d := mkdir(t, fs, RootIno, "shared")
	const workers = 3
	iters := 300
	if testing.Short() {
		iters = 100
	}
	var wg sync.WaitGroup
	errc := make(chan error, 100)
	fail := func(format string, args ...any) {
		select {
		case errc <- errors.New(sprintf(format, args...)):
		default:
		}
	}
	allowed := func(err error, ok ...error) bool {
		if err == nil {
			return true
		}
		for _, e := range ok {
			if errors.Is(err, e) {
				return true
			}
		}
		return false
	}
	// Writers: each owns file wN and appends to it, reading it back.
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			at, h, err := fs.Create(d.Ino, sprintf("w%d", w), 0o644, O_CREAT|O_RDWR, user)
			if err != nil {
				fail("create w%d: %v", w, err)
				return
			}
			var model []byte
			for i := 0; i < iters; i++ {
				chunk := pattern(1+i*37%5000, byte(w+i))
				if _, err := fs.Write(at.Ino, h, int64(len(model)), chunk, false); err != nil {
					fail("write: %v", err)
					return
				}
				model = append(model, chunk...)
				if i%20 == 0 {
					buf := make([]byte, len(model))
					n, err := fs.Read(at.Ino, h, 0, buf)
					if err != nil || n != len(model) || !bytes.Equal(buf, model) {
						fail("writer %d read back %d bytes, %v", w, n, err)
						return
					}
				}
			}
			fs.Release(at.Ino, h)
			fs.Forget(at.Ino, 1)
		}(w)
	}
	// Creators, renamers and unlinkers over a small shared name space.
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(w)))
			name := func() string { return sprintf("n%d", r.Intn(20)) }
			for i := 0; i < iters; i++ {
				switch r.Intn(5) {
				case 0:
					at, h, err := fs.Create(d.Ino, name(), 0o644, O_CREAT|O_EXCL|O_RDWR, user)
					if err == nil {
						_, err = fs.Write(at.Ino, h, 0, pattern(r.Intn(10000), 1), false)
						fs.Release(at.Ino, h)
						fs.Forget(at.Ino, 1)
					}
					if !allowed(err, ErrExists) {
						fail("create: %v", err)
					}
				case 1:
					at, err := fs.Mkdir(d.Ino, name(), 0o755, user)
					if err == nil {
						fs.Forget(at.Ino, 1)
					}
					if !allowed(err, ErrExists) {
						fail("mkdir: %v", err)
					}
				case 2:
					err := fs.Rename(d.Ino, name(), d.Ino, name(), []uint32{0, RenameNoReplace, RenameExchange}[r.Intn(3)])
					if !allowed(err, ErrNotFound, ErrExists, ErrIsDir, ErrNotDir, ErrNotEmpty) {
						fail("rename: %v", err)
					}
				case 3:
					err := fs.Unlink(d.Ino, name())
					if !allowed(err, ErrNotFound, ErrIsDir) {
						fail("unlink: %v", err)
					}
				case 4:
					err := fs.Rmdir(d.Ino, name())
					if !allowed(err, ErrNotFound, ErrNotDir, ErrNotEmpty) {
						fail("rmdir: %v", err)
					}
				}
			}
		}(w)
	}
	// Readers: lookups, getattr, reads of whatever they find, readdir.
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(100 + w)))
			buf := make([]byte, 8192)
			for i := 0; i < iters; i++ {
				at, err := fs.Lookup(d.Ino, sprintf("n%d", r.Intn(20)))
				if err == nil {
					if at.Mode&S_IFMT == S_IFREG {
						if _, err := fs.Read(at.Ino, 0, 0, buf); err != nil {
							fail("read: %v", err)
						}
					}
					if _, err := fs.GetAttr(at.Ino); err != nil {
						fail("getattr of a referenced inode: %v", err)
					}
					fs.Forget(at.Ino, 1)
				} else if !allowed(err, ErrNotFound) {
					fail("lookup: %v", err)
				}
				seen := map[string]bool{}
				err = fs.ReadDir(d.Ino, 0, func(name string, ino Ino, typ uint8, next uint64) bool {
					if seen[name] {
						fail("readdir returned %q twice", name)
					}
					seen[name] = true
					return true
				})
				if err != nil {
					fail("readdir: %v", err)
				}
				_ = fs.StatFS()
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for w := 0; w < workers; w++ {
		at := lookup(t, fs, d.Ino, sprintf("w%d", w))
		fs.Forget(at.Ino, 1)
		var want int
		for i := 0; i < iters; i++ {
			want += 1 + i*37%5000
		}
		if at.Size != uint64(want) {
			t.Errorf("w%d: size %d, want %d", w, at.Size, want)
		}
	}
}
