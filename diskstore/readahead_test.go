package diskstore

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"conquest/pram"
)

// countDevice counts reads.
type countDevice struct {
	Device
	reads atomic.Int64
	// With delay set, every read takes that long, and the device records
	// the most reads in flight at once and the largest read.
	delay           time.Duration
	inFlight, maxIn atomic.Int64
	largest         atomic.Int64
}

func (c *countDevice) ReadAt(p []byte, off int64) (int, error) {
	c.reads.Add(1)
	if c.delay > 0 {
		n := c.inFlight.Add(1)
		defer c.inFlight.Add(-1)
		for m := c.maxIn.Load(); n > m && !c.maxIn.CompareAndSwap(m, n); m = c.maxIn.Load() {
		}
		for l := c.largest.Load(); int64(len(p)) > l && !c.largest.CompareAndSwap(l, int64(len(p))); l = c.largest.Load() {
		}
		time.Sleep(c.delay)
	}
	return c.Device.ReadAt(p, off)
}

// streamFile writes a file of size bytes of pattern 1 through e and opens
// a Readahead on it (closed when the test ends).
func streamFile(e *env, size int64) (pram.Off, []byte, *Readahead) {
	e.t.Helper()
	seg := e.newFile(1)
	data := pattern(1, 0, int(size))
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, data) })
	ra := e.s.NewReadahead()
	e.t.Cleanup(ra.Close)
	return seg, data, ra
}

// readSequentially writes a file of size bytes on dev and reads it back in
// chunk-sized sequential reads through a Readahead, checking every byte;
// before the reads it calls ready (if set) with the environment. It returns
// the Readahead's counters.
func readSequentially(t *testing.T, dev Device, size, chunk int64, ready func(*env)) ReadaheadStats {
	t.Helper()
	e := newEnv(t, envOpts{dev: dev})
	seg, data, ra := streamFile(e, size)
	if ready != nil {
		ready(e)
	}
	for off := int64(0); off < size; off += chunk {
		p := make([]byte, chunk)
		if _, err := e.s.ReadAt(seg, p, off, ra); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p, data[off:off+chunk]) {
			t.Fatalf("data at %d differs", off)
		}
	}
	return ra.Stats()
}

// Options.OnReadahead hears of every window fetched ahead, and of nothing
// else: not of the reads themselves, nor of random reads.
func TestOnReadahead(t *testing.T) {
	var calls atomic.Int64
	e := newEnv(t, envOpts{o: Options{OnReadahead: func() { calls.Add(1) }}})
	seg := e.newFile(1)
	const size, chunk = 16 << 20, 128 << 10
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, pattern(1, 0, size)) })
	ra := e.s.NewReadahead()
	defer ra.Close()
	p := make([]byte, chunk)
	for i := int64(0); i < 30; i++ { // random
		if _, err := e.s.ReadAt(seg, p[:4096], (i*7%100)*chunk, ra); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("random reads: %d calls", n)
	}
	for off := int64(0); off < size; off += chunk {
		if _, err := e.s.ReadAt(seg, p, off, ra); err != nil {
			t.Fatal(err)
		}
	}
	if st := ra.Stats(); st.Prefetches == 0 || calls.Load() != st.Prefetches {
		t.Fatalf("%d calls for %+v", calls.Load(), st)
	}
}

// A window is fetched in pieces of at most raPiece read at the same time:
// on a slow device several prefetch reads are in flight together, none
// larger than a piece, and the data still comes out right.
func TestReadaheadPiecesInParallel(t *testing.T) {
	cd := &countDevice{Device: NewMemDevice(64 << 20), delay: 3 * time.Millisecond}
	const size, chunk = 24 << 20, 128 << 10
	st := readSequentially(t, cd, size, chunk, nil)
	t.Logf("%+v; at most %d device reads at once, the largest %d bytes", st, cd.maxIn.Load(), cd.largest.Load())
	if cd.maxIn.Load() < 2 {
		t.Errorf("prefetch reads never overlapped (at most %d in flight)", cd.maxIn.Load())
	}
	if cd.largest.Load() > raPiece {
		t.Errorf("a device read of %d bytes, pieces are at most %d", cd.largest.Load(), raPiece)
	}
	if st.Hits < int64(size/chunk)*3/4 {
		t.Errorf("only %d of %d reads hit the readahead cache", st.Hits, size/chunk)
	}
}

func TestReadaheadSequential(t *testing.T) {
	cd := &countDevice{Device: NewMemDevice(64 << 20)}
	const size, chunk = 16 << 20, 128 << 10
	var e *env
	st := readSequentially(t, cd, size, chunk, func(en *env) { e = en; cd.reads.Store(0) })
	reads := int64(size / chunk)
	t.Logf("%d reads: %+v, %d device reads", reads, st, cd.reads.Load())
	if st.Hits < reads*9/10 {
		t.Fatalf("only %d of %d reads hit the readahead cache", st.Hits, reads)
	}
	if dr := cd.reads.Load(); dr > reads/4 {
		t.Fatalf("%d device reads for %d sequential reads: readahead did not gather", dr, reads)
	}
	if st.Bytes > size+DefaultReadaheadMax {
		t.Fatalf("prefetched %d bytes of a %d-byte file", st.Bytes, size)
	}
	if got := e.s.ReadaheadBytes(); got != st.Bytes {
		t.Fatalf("store counts %d bytes read ahead, the handle %d", got, st.Bytes)
	}
}

func TestReadaheadStopsOnRandom(t *testing.T) {
	e := newEnv(t, envOpts{})
	const size = 16 << 20
	seg, data, ra := streamFile(e, size)
	r := rand.New(rand.NewPCG(1, 2))
	read := func(off int64, n int) {
		p := make([]byte, n)
		if _, err := e.s.ReadAt(seg, p, off, ra); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p, data[off:off+int64(n)]) {
			t.Fatalf("data at %d differs", off)
		}
	}
	// Random reads (never near the previous one): no prefetching at all.
	for i := 1; i <= 50; i++ {
		read(int64(i*7%15)<<20+int64(r.IntN(1000)), 4096)
	}
	if st := ra.Stats(); st.Prefetches != 0 || st.Hits != 0 {
		t.Fatalf("random reads prefetched: %+v", st)
	}
	// Random 1 MiB reads, each arriving as the kernel sends it (eight 128
	// KiB requests and one more of its own readahead): no prefetching
	// either (it would only compete with the next one for the disk).
	for i := 0; i < 10; i++ {
		base := int64(i*5%14) << 20
		for k := int64(0); k < 9; k++ {
			read(base+k<<17, 128<<10)
		}
	}
	if st := ra.Stats(); st.Prefetches != 0 || st.Hits != 0 {
		t.Fatalf("random 1 MiB reads prefetched: %+v", st)
	}
	if n := e.s.ReadaheadBytes(); n != 0 {
		t.Fatalf("random reads count %d bytes read ahead (the daemon would take them for streaming)", n)
	}
	// Sequential again: prefetching resumes after raStream bytes.
	before := ra.Stats()
	for off := int64(4 << 20); off < 12<<20; off += 64 << 10 {
		read(off, 64<<10)
	}
	st := ra.Stats()
	if st.Prefetches == before.Prefetches || st.Hits-before.Hits < 100 {
		t.Fatalf("sequential reads after random ones: %+v (before %+v)", st, before)
	}
}

// TestReadaheadSeesWrites: data prefetched before a write (flushed or only
// buffered) is never served after it.
func TestReadaheadSeesWrites(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096})
	seg := e.newFile(1)
	const size = 8 << 20
	model := pattern(1, 0, size)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, model) })
	ra := e.s.NewReadahead()
	defer ra.Close()
	for off := int64(0); off < size; off += 64 << 10 {
		p := make([]byte, 64<<10)
		if _, err := e.s.ReadAt(seg, p, off, ra); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p, model[off:off+64<<10]) {
			t.Fatalf("read at %d: stale data", off)
		}
		switch (off >> 16) % 5 {
		case 1: // flushed overwrite just ahead (inside the prefetched window)
			w := pattern(uint32(off), off+100<<10, 20000)
			e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, off+100<<10, w) })
			copy(model[off+100<<10:], w)
		case 3: // buffered overwrite just ahead
			w := pattern(uint32(off)+7, off+70<<10, 3000)
			e.must(func(tx *pram.Tx) error { return e.s.Write(tx, seg, off+70<<10, w) })
			copy(model[off+70<<10:], w)
		}
	}
	if ra.Stats().Prefetches == 0 {
		t.Fatal("no prefetching")
	}
}

// TestConcurrentReadersAndWriter runs readers with their own readahead
// under a shared lock and a writer under the exclusive lock, as the core
// does; with -race this checks the store's own synchronization.
func TestConcurrentReadersAndWriter(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096, o: Options{FileBuffer: 64 << 10}})
	seg := e.newFile(1)
	const size = 4 << 20
	model := pattern(1, 0, size)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, model) })
	var mu sync.RWMutex // the core's fs.mu
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 8)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			ra := e.s.NewReadahead()
			defer ra.Close()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			off := int64(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r.IntN(10) == 0 {
					off = r.Int64N(size - 65536)
				}
				p := make([]byte, 32<<10)
				if off+int64(len(p)) > size {
					off = 0
				}
				mu.RLock()
				_, err := e.s.ReadAt(seg, p, off, ra)
				ok := bytes.Equal(p, model[off:off+int64(len(p))])
				mu.RUnlock()
				if err != nil || !ok {
					errc <- err
					if err == nil {
						t.Errorf("reader %d: stale data at %d", g, off)
					}
					return
				}
				off += int64(len(p))
			}
		}(g)
	}
	r := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 150; i++ {
		off := r.Int64N(size - 40000)
		w := pattern(uint32(i+2), off, 1+r.IntN(40000))
		mu.Lock()
		err := e.do(func(tx *pram.Tx) error { return e.s.Write(tx, seg, off, w) })
		if err == nil {
			copy(model[off:], w)
		}
		mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	e.must(func(tx *pram.Tx) error { return e.s.Flush(tx, seg) })
	mu.Unlock()
	e.check(map[pram.Off]int64{seg: size})
}

// The kernel sends readahead READs asynchronously and several daemon
// threads serve them, so a sequential stream arrives slightly out of order
// (pairs swapped here): it is still sequential, prefetched and served from
// the cache.
func TestReadaheadOutOfOrder(t *testing.T) {
	cd := &countDevice{Device: NewMemDevice(64 << 20)}
	e := newEnv(t, envOpts{dev: cd})
	const size, chunk = 16 << 20, 128 << 10
	seg, data, ra := streamFile(e, size)
	cd.reads.Store(0)
	for off := int64(0); off < size; off += 2 * chunk {
		for _, o := range []int64{off + chunk, off} {
			p := make([]byte, chunk)
			if _, err := e.s.ReadAt(seg, p, o, ra); err != nil || !bytes.Equal(p, data[o:o+chunk]) {
				t.Fatalf("read at %d: %v", o, err)
			}
		}
	}
	st := ra.Stats()
	reads := int64(size / chunk)
	if st.Hits < reads*8/10 {
		t.Fatalf("only %d of %d out-of-order sequential reads hit the readahead cache: %+v", st.Hits, reads, st)
	}
	if dr := cd.reads.Load(); dr > reads/4 {
		t.Fatalf("%d device reads for %d reads: readahead did not gather", dr, reads)
	}
}

// adviseDevice is a device read through the page cache that records the
// ranges it is told will be needed.
type adviseDevice struct {
	Device
	mu     sync.Mutex
	ranges [][2]int64
}

func (d *adviseDevice) pageCached() bool { return true }
func (d *adviseDevice) willNeed(off, n int64) {
	d.mu.Lock()
	d.ranges = append(d.ranges, [2]int64{off, n})
	d.mu.Unlock()
}

// On a device read through the page cache the store does not prefetch
// itself; sequential reads ask the kernel to read the next window ahead,
// covering the file's disk blocks, and random reads ask nothing.
func TestReadaheadAdvisesPageCachedDevice(t *testing.T) {
	ad := &adviseDevice{Device: NewMemDevice(64 << 20)}
	e := newEnv(t, envOpts{dev: ad})
	if e.s.prefetch {
		t.Fatal("prefetching goroutines on a page-cached device")
	}
	const size, chunk = 16 << 20, 128 << 10
	seg, data, ra := streamFile(e, size)
	for i := 0; i < 40; i++ { // random: no advice
		off := int64(i*7%100) * chunk
		p := make([]byte, 4096)
		if _, err := e.s.ReadAt(seg, p, off, ra); err != nil || !bytes.Equal(p, data[off:off+4096]) {
			t.Fatalf("random read at %d: %v", off, err)
		}
	}
	if len(ad.ranges) != 0 {
		t.Fatalf("random reads advised %v", ad.ranges)
	}
	for off := int64(0); off < size; off += chunk {
		p := make([]byte, chunk)
		if _, err := e.s.ReadAt(seg, p, off, ra); err != nil || !bytes.Equal(p, data[off:off+chunk]) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	var covered int64
	for _, r := range ad.ranges {
		if r[0] <= 0 || r[0]+r[1] > 64<<20 {
			t.Fatalf("advised range %v outside the data blocks", r)
		}
		covered += r[1]
	}
	if covered < size/2 || covered > size {
		t.Fatalf("advised %d bytes for a sequential read of %d: %v", covered, size, ad.ranges)
	}
	if n := e.s.ReadaheadBytes(); n < covered {
		t.Fatalf("store counts %d bytes read ahead, %d were advised", n, covered)
	}
}

// kickDevice counts the writebacks it is asked to start.
type kickDevice struct {
	Device
	kicks atomic.Int64
}

func (d *kickDevice) startWriteback() { d.kicks.Add(1) }

// On a page-cached device, the store starts the device's writeback every
// kickBytes written (so the disk writes while data keeps coming, instead of
// all at the next sync), and only then.
func TestWritebackStartedWhileWriting(t *testing.T) {
	kd := &kickDevice{Device: NewMemDevice(128 << 20)}
	e := newEnv(t, envOpts{dev: kd})
	seg := e.newFile(1)
	const chunk = 128 << 10
	for off := int64(0); off < kickBytes-chunk; off += chunk {
		e.must(func(tx *pram.Tx) error { return e.s.Write(tx, seg, off, pattern(1, off, chunk)) })
	}
	if n := kd.kicks.Load(); n != 0 {
		t.Fatalf("writeback started %d times before %d bytes were written", n, kickBytes)
	}
	for off := int64(kickBytes - chunk); off < 5*kickBytes/2; off += chunk {
		e.must(func(tx *pram.Tx) error { return e.s.Write(tx, seg, off, pattern(1, off, chunk)) })
	}
	if n := kd.kicks.Load(); n != 2 {
		t.Fatalf("writeback started %d times for %d bytes written, want 2", n, 5*kickBytes/2)
	}
	if got, err := e.read(seg, 0, 5*kickBytes/2); err != nil || !bytes.Equal(got, pattern(1, 0, 5*kickBytes/2)) {
		t.Fatalf("read back: %v", err)
	}
}

// Many files streamed at once hold at most Options.ReadaheadBudget of
// prefetched data between them; the streams past the budget read without
// prefetching and still get the right bytes, and closing the handles gives
// all of it back.
func TestReadaheadBudget(t *testing.T) {
	const files, size, chunk = 12, 8 << 20, 128 << 10
	const budget = 12 << 20
	cd := &countDevice{Device: NewMemDevice(256 << 20), delay: 200 * time.Microsecond}
	e := newEnv(t, envOpts{dev: cd, o: Options{ReadaheadBudget: budget}})
	segs := make([]pram.Off, files)
	data := make([][]byte, files)
	for i := range segs {
		segs[i] = e.newFile(uint64(i + 1))
		data[i] = pattern(uint32(i+1), 0, size)
		e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, segs[i], 0, data[i]) })
	}
	var peak atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() { // sample the held bytes while the streams run
		defer close(watched)
		for {
			if h := e.s.HeldBytes(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			default:
				time.Sleep(50 * time.Microsecond)
			}
		}
	}()
	ras := make([]*Readahead, files)
	var wg sync.WaitGroup
	var prefetched atomic.Int64
	for i := range segs {
		ras[i] = e.s.NewReadahead()
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, chunk)
			for off := int64(0); off < size; off += chunk {
				if _, err := e.s.ReadAt(segs[i], p, off, ras[i]); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(p, data[i][off:off+chunk]) {
					t.Errorf("file %d: data at %d differs", i, off)
					return
				}
			}
			if ras[i].Stats().Prefetches > 0 {
				prefetched.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-watched
	t.Logf("peak %d bytes held (budget %d); %d of %d streams prefetched", peak.Load(), budget, prefetched.Load(), files)
	if peak.Load() > budget {
		t.Errorf("readaheads held %d bytes, over the budget of %d", peak.Load(), budget)
	}
	if prefetched.Load() == 0 {
		t.Error("no stream prefetched at all")
	}
	for _, ra := range ras {
		ra.Close()
	}
	if h := e.s.HeldBytes(); h != 0 {
		t.Errorf("%d bytes still held after every handle closed", h)
	}
}

// TestReadaheadReorderedWindows: with the mount's read_ahead_kb raised, the
// kernel sends a whole window (here 2 MiB, sixteen 128 KiB requests) in
// parallel and the daemon's threads may take them in any order. A handle
// that has seen that many reads in flight at once still takes a window
// that arrives last request first for a sequential stream and keeps
// prefetching; a handle that never had reads in parallel does not accept
// such jumps (they are random reads there).
func TestReadaheadReorderedWindows(t *testing.T) {
	const size, chunk, window = 32 << 20, 128 << 10, 2 << 20
	run := func(parallel bool) (ReadaheadStats, int64) {
		cd := &countDevice{Device: NewMemDevice(64 << 20)}
		e := newEnv(t, envOpts{dev: cd})
		seg, data, ra := streamFile(e, size)
		if parallel {
			ra.mu.Lock()
			ra.noteConcurrency(window/chunk, chunk) // as read() notes it
			ra.mu.Unlock()
		}
		cd.reads.Store(0)
		for w := int64(0); w < size; w += window {
			for o := w + window - chunk; o >= w; o -= chunk {
				p := make([]byte, chunk)
				if _, err := e.s.ReadAt(seg, p, o, ra); err != nil || !bytes.Equal(p, data[o:o+chunk]) {
					t.Fatalf("read at %d: %v", o, err)
				}
			}
		}
		return ra.Stats(), cd.reads.Load()
	}
	reads := int64(size / chunk)
	st, dr := run(true)
	if st.Hits < reads*7/10 || dr > reads/4 {
		t.Fatalf("windows in reverse after %d reads in flight: %d of %d reads hit, %d device reads: %+v",
			window/chunk, st.Hits, reads, dr, st)
	}
	st, _ = run(false)
	if st.Prefetches != 0 {
		t.Fatalf("one read at a time, windows in reverse (jumps of %d bytes) prefetched: %+v", window, st)
	}
}

// read() counts the reads in flight on a handle: parallel readers raise
// its reorder tolerance, one reader at a time leaves it at one read.
func TestReadaheadCountsReadsInFlight(t *testing.T) {
	cd := &countDevice{Device: NewMemDevice(64 << 20), delay: 20 * time.Millisecond}
	e := newEnv(t, envOpts{dev: cd})
	const chunk = 128 << 10
	seg, _, ra := streamFile(e, 8<<20)
	p := make([]byte, chunk)
	for o := int64(0); o < 4*chunk; o += chunk {
		if _, err := e.s.ReadAt(seg, p, 5<<20+o*3, ra); err != nil {
			t.Fatal(err)
		}
	}
	ra.mu.Lock()
	one := ra.reorder
	ra.mu.Unlock()
	if one != chunk {
		t.Fatalf("one reader at a time: reorder %d, want %d", one, chunk)
	}
	var wg sync.WaitGroup
	for i := int64(0); i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := make([]byte, chunk)
			if _, err := e.s.ReadAt(seg, q, i*chunk, ra); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ra.mu.Lock()
	defer ra.mu.Unlock()
	if ra.reorder < 2*chunk {
		t.Fatalf("8 parallel readers (device reads of 20 ms): reorder %d", ra.reorder)
	}
}
