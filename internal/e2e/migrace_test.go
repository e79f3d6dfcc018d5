package e2e

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/fusefs"
	"conquest/internal/mounttest"
	"conquest/internal/posixtest"
)

// TestMigrationRace: three writers change three files at random (pwrites
// of 1 byte to 1 MiB anywhere in the first 3 MiB, truncates to sizes on
// both sides of the 1 MiB threshold and to half of it, fsyncs, a second
// name linked and unlinked, and a file written under a temporary name
// renamed over one), through either name, so the files move
// between the arena and the disk again and again, while four readers read
// them with pread and through read-only shared mappings (those in a helper
// process: a page fault on the mount must not happen in the process that
// serves it in-process). Every writer
// writes only file i's own pattern at its own offsets, so the one thing a
// reader may see at an offset besides that byte is a zero (a hole, or the
// file was cut and grown back): a byte of another file's pattern, of a
// deleted file or of the wrong offset is an error. Afterwards the file
// system checks clean and the files keep the rule after a remount. Both
// page-cache modes.
func TestMigrationRace(t *testing.T) {
	cacheModes(t, func(t *testing.T, wb bool) {
		m := mount(t, mounttest.WithFuseOptions(fusefs.Options{AllowOther: true, WritebackCache: wb}))
		dur := 3 * time.Second
		if testing.Short() {
			dur = time.Second
		}
		base := seed(t)
		t.Logf("seed %d", base)
		const nfiles, span = 3, 3 << 20
		pats := make([]pattern, nfiles)
		for i := range pats {
			pats[i] = pattern{seed: uint64(i) + 11, size: span}
		}
		path := func(i int) string { return m.Path(fmt.Sprintf("m%d", i)) }
		// alias is a second name of file i, made and removed by the
		// writers. After m<i> is replaced it may name the old file, whose
		// bytes are i's pattern as well.
		alias := func(i int) string { return m.Path(fmt.Sprintf("l%d", i)) }
		// either names file i by one of its names, the alias a third of
		// the time when it exists.
		either := func(r *rand.Rand, i int) string {
			if r.Intn(3) == 0 {
				if _, err := os.Lstat(alias(i)); err == nil {
					return alias(i)
				}
			}
			return path(i)
		}
		for i := range pats {
			createPattern(t, path(i), pattern{pats[i].seed, 1<<20 + 4096}, []int{128 << 10}, 0)
		}
		stop := time.Now().Add(dur)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failures []string
		fail := func(format string, args ...any) {
			mu.Lock()
			if len(failures) < 10 {
				failures = append(failures, fmt.Sprintf(format, args...))
			}
			mu.Unlock()
		}
		ops := make([]int, 7)
		for w := 0; w < 3; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewSource(base + int64(w)))
				buf := make([]byte, 1<<20)
				tmp := m.Path(fmt.Sprintf("tmp%d", w))
				for time.Now().Before(stop) {
					i := r.Intn(nfiles)
					fd, err := unix.Open(either(r, i), unix.O_RDWR|unix.O_CLOEXEC, 0)
					if errors.Is(err, unix.ENOENT) {
						continue // the alias went away meanwhile
					}
					if err != nil {
						fail("writer %d: open m%d: %v", w, i, err)
						return
					}
					switch op := r.Intn(20); {
					case op < 12:
						off := []int64{0, r.Int63n(span), 1<<20 - r.Int63n(70000), r.Int63n(1 << 20)}[r.Intn(4)]
						n := []int64{1, 100, 4096, 8192, 65536, 131072, 300000, 1 << 20}[r.Intn(8)]
						n = min(n, span-off)
						pats[i].fill(buf[:n], off)
						if _, err := unix.Pwrite(fd, buf[:n], off); err != nil {
							fail("writer %d: pwrite m%d at %d: %v", w, i, off, err)
						}
					case op < 15:
						size := []int64{0, 1000, 1<<20 - 1, 1 << 20, 1<<20 + 1, 1 << 19, r.Int63n(span)}[r.Intn(7)]
						if err := unix.Ftruncate(fd, size); err != nil {
							fail("writer %d: truncate m%d to %d: %v", w, i, size, err)
						}
					case op < 17:
						if err := unix.Fsync(fd); err != nil {
							fail("writer %d: fsync m%d: %v", w, i, err)
						}
					case op == 17:
						err := unix.Link(path(i), alias(i))
						if errors.Is(err, unix.EEXIST) {
							err = unix.Unlink(alias(i))
						}
						if err != nil && !errors.Is(err, unix.ENOENT) {
							fail("writer %d: link or unlink l%d: %v", w, i, err)
						}
					default:
						size := []int64{5000, 1<<20 + 7, 2 << 20}[r.Intn(3)]
						tfd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
						if err == nil {
							_, err = writePattern(tfd, pats[i], 0, size, []int{64 << 10, 200000}, r.Intn(2))
							unix.Close(tfd)
						}
						if err == nil {
							err = unix.Rename(tmp, path(i))
						}
						if err != nil {
							fail("writer %d: replace m%d: %v", w, i, err)
						}
					}
					unix.Close(fd)
					mu.Lock()
					ops[w]++
					mu.Unlock()
				}
			}()
		}
		for rd := 0; rd < 4; rd++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewSource(base + 100 + int64(rd)))
				buf := make([]byte, 1<<20)
				want := make([]byte, 1<<20)
				for time.Now().Before(stop) {
					i := r.Intn(nfiles)
					name := either(r, i)
					fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
					if errors.Is(err, unix.ENOENT) {
						continue
					}
					if err != nil {
						fail("reader %d: open m%d: %v", rd, i, err)
						return
					}
					var st unix.Stat_t
					if err := unix.Fstat(fd, &st); err != nil || st.Size == 0 {
						unix.Close(fd)
						continue
					}
					off := r.Int63n(st.Size)
					n := min([]int64{1, 4096, 65536, 1 << 20}[r.Intn(4)], st.Size-off)
					var got []byte
					if rd%2 == 0 {
						k, err := unix.Pread(fd, buf[:n], off)
						if err != nil {
							fail("reader %d: pread m%d at %d: %v", rd, i, off, err)
						}
						got = buf[:max(k, 0)]
					} else {
						// Through a mapping, made by a helper process
						// (see posixtest's mmapread).
						n = min(n, 64<<10)
						out, err := posixtest.RunAs(t, posixtest.Root, "mmapread", name, fmt.Sprint(off), fmt.Sprint(n))
						_, hexed, _ := strings.Cut(out, " ")
						if err == nil {
							got, err = hex.DecodeString(hexed)
						}
						if err != nil && !errors.Is(err, unix.ENOENT) {
							fail("reader %d: mapped read of m%d at %d: %v", rd, i, off, err)
						}
					}
					unix.Close(fd)
					pats[i].fill(want[:len(got)], off)
					for k := range got {
						if got[k] != 0 && got[k] != want[k] {
							fail("reader %d: m%d byte %d is %#x: neither zero nor the file's own %#x", rd, i, off+int64(k), got[k], want[k])
							break
						}
					}
					mu.Lock()
					ops[3+rd]++
					mu.Unlock()
				}
			}()
		}
		waitAll(t, &wg, dur+90*time.Second, "writers or readers")
		for _, f := range failures {
			t.Error(f)
		}
		for k, n := range ops {
			if n == 0 {
				t.Errorf("worker %d did nothing", k)
			}
		}
		t.Logf("operations per worker (3 writers, 4 readers): %v", ops)
		verify := func(when string) {
			for i := range pats {
				for _, name := range []string{path(i), alias(i)} {
					got, err := readAllRaw(name)
					if errors.Is(err, unix.ENOENT) && name == alias(i) {
						continue
					}
					if err != nil {
						t.Fatalf("%s: reading %s: %v", when, name, err)
					}
					want := make([]byte, len(got))
					pats[i].fill(want, 0)
					for k := range got {
						if got[k] != 0 && got[k] != want[k] {
							t.Fatalf("%s: %s byte %d is %#x: neither zero nor the file's own %#x", when, name, k, got[k], want[k])
						}
					}
				}
			}
		}
		verify("after the run")
		check(t, m, "after the run")
		remount(t, m)
		verify("after a remount")
	})
}
