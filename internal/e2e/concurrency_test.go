package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/internal/posixtest"
)

// record is a self-checking file body: a header naming its writer, its
// sequence number, its length and a CRC of the body.
func record(writer, seq, n int) []byte {
	body := fill(uint64(writer)<<32|uint64(seq), n)
	return append([]byte(fmt.Sprintf("w=%d i=%d n=%d crc=%08x\n", writer, seq, n, crc32.ChecksumIEEE(body))), body...)
}

func validRecord(b []byte) error {
	head, body, found := bytes.Cut(b, []byte("\n"))
	if !found {
		return fmt.Errorf("no header in %d bytes", len(b))
	}
	var w, i, n int
	var crc uint32
	if _, err := fmt.Sscanf(string(head), "w=%d i=%d n=%d crc=%x", &w, &i, &n, &crc); err != nil {
		return fmt.Errorf("bad header %q: %v", head, err)
	}
	if len(body) != n || crc32.ChecksumIEEE(body) != crc {
		return fmt.Errorf("record w=%d i=%d: body of %d bytes (want %d) or CRC differs: torn or mixed content", w, i, len(body), n)
	}
	return nil
}

// TestConcurrentDir runs writers (write a new file, rename it over a shared
// name), renamers, unlinkers, readers and O_APPEND loggers on one directory
// at once. Every file a reader opens must hold one complete record (never a
// mix), a stat of a shared name never fails for another reason than
// ENOENT, the log holds every appended record exactly once in each
// writer's order, and the file system checks clean. Run with -race: the
// daemon is in this process.
func TestConcurrentDir(t *testing.T) {
	m := mount(t)
	dir := m.Path("c")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const pool = 16
	name := func(i int) string { return fmt.Sprintf("%s/n%02d", dir, i) }
	duration := 2 * time.Second
	if testing.Short() {
		duration = 500 * time.Millisecond
	}
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	var failed atomic.Bool
	var mu sync.Mutex
	var problems []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
		failed.Store(true)
	}
	running := func() bool { return time.Now().Before(deadline) && !failed.Load() }
	var writes, renames, unlinks, reads, appends atomic.Int64

	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for i := 0; running(); i++ {
				tmp := fmt.Sprintf("%s/tmp-%d-%d", dir, w, i)
				if err := posixtest.WriteFile(tmp, record(w, i, rng.Intn(6000)), 0o644); err != nil {
					fail("writer %d: %v", w, err)
					return
				}
				if err := os.Rename(tmp, name(rng.Intn(pool))); err != nil {
					fail("writer %d: rename: %v", w, err)
					return
				}
				writes.Add(1)
			}
		}(w)
	}
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(100 + r)))
			for running() {
				err := os.Rename(name(rng.Intn(pool)), name(rng.Intn(pool)))
				if err != nil && !errors.Is(err, unix.ENOENT) {
					fail("renamer: %v", err)
					return
				}
				renames.Add(1)
			}
		}(r)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewSource(200))
		for running() {
			time.Sleep(time.Millisecond)
			if err := os.Remove(name(rng.Intn(pool))); err != nil && !errors.Is(err, unix.ENOENT) {
				fail("unlinker: %v", err)
				return
			}
			unlinks.Add(1)
		}
	}()
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for running() {
				ents, err := os.ReadDir(dir)
				if err != nil {
					fail("reader: readdir: %v", err)
					return
				}
				for _, e := range ents {
					if !strings.HasPrefix(e.Name(), "n") {
						continue
					}
					b, err := posixtest.ReadFile(dir + "/" + e.Name())
					if errors.Is(err, unix.ENOENT) {
						continue // renamed or removed since the listing
					}
					if err != nil {
						fail("reader: %s: %v", e.Name(), err)
						return
					}
					if err := validRecord(b); err != nil {
						fail("reader: %s: %v", e.Name(), err)
						return
					}
					reads.Add(1)
				}
			}
		}(r)
	}
	const recLen = 64
	var appendCount [2]int
	for a := 0; a < 2; a++ {
		wg.Add(1)
		go func(a int) {
			defer wg.Done()
			fd, err := unix.Open(dir+"/log", unix.O_CREAT|unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0o644)
			if err != nil {
				fail("appender: %v", err)
				return
			}
			defer unix.Close(fd)
			for i := 0; running(); i++ {
				rec := fmt.Sprintf("appender=%d seq=%d", a, i)
				rec += strings.Repeat(".", recLen-1-len(rec)) + "\n"
				if n, err := unix.Write(fd, []byte(rec)); err != nil || n != recLen {
					fail("appender: wrote %d: %v", n, err)
					return
				}
				appendCount[a]++
				appends.Add(1)
			}
		}(a)
	}
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}
	if t.Failed() {
		return
	}
	t.Logf("%d writes, %d renames, %d unlinks, %d verified reads, %d appends", writes.Load(), renames.Load(), unlinks.Load(), reads.Load(), appends.Load())
	if writes.Load() == 0 || reads.Load() == 0 || appends.Load() == 0 {
		t.Fatal("a kind of worker made no progress")
	}
	// Every shared name holds one complete record.
	for i := 0; i < pool; i++ {
		b, err := posixtest.ReadFile(name(i))
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := validRecord(b); err != nil {
			t.Errorf("%s: %v", name(i), err)
		}
	}
	// The log: every record whole, each appender's in order, none lost.
	log, err := posixtest.ReadFile(dir + "/log")
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != (appendCount[0]+appendCount[1])*recLen {
		t.Fatalf("log has %d bytes, want %d records of %d", len(log), appendCount[0]+appendCount[1], recLen)
	}
	next := [2]int{}
	for off := 0; off < len(log); off += recLen {
		var a, seq int
		if _, err := fmt.Sscanf(string(log[off:off+recLen]), "appender=%d seq=%d", &a, &seq); err != nil || a < 0 || a > 1 {
			t.Fatalf("log record at %d is torn: %q", off, log[off:off+recLen])
		}
		if seq != next[a] {
			t.Fatalf("log record at %d: appender %d seq %d, want %d", off, a, seq, next[a])
		}
		next[a]++
	}
	check(t, m, "after the concurrent workload")
}
