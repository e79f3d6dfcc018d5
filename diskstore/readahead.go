package diskstore

import (
	"fmt"
	"sync"
	"sync/atomic"

	"conquest/pram"
)

// Readahead is the sequential-read state of one open file handle. When
// reads follow each other, it fetches the blocks ahead asynchronously into
// a small cache: whenever less than half a window lies fetched (or in
// flight) ahead of the reads, it fetches the next blocks in pieces of at
// most raPiece, each read and verified by a goroutine of its own, until
// half a window is ahead again (so the disk has requests queued, and each
// piece is served as soon as it is in, not when a whole window is:
// measured on a cold 1 GiB read, 1.13 GB/s against 0.95 with one request
// per window); the window doubles with every sequential read up to
// Options.ReadaheadMax. A read that does not
// continue the previous one drops the cache and stops prefetching until
// reads are sequential again.
//
// Prefetching never reads the arena from its goroutine: the foreground read
// (under the core's read lock) resolves the blocks and their checksums, the
// goroutine only reads the device and verifies. Cached data is tagged with
// the file's generation, which every flush, truncate or destroy changes, so
// a write makes the cache stale; buffered writes are overlaid on every read
// anyway. Data that fails its checksum in a prefetch is not cached, and the
// foreground read reports it.
//
// A Readahead is safe for concurrent use; Close it when the handle closes.
type Readahead struct {
	s  *Store
	mu sync.Mutex
	// The fields below are guarded by mu.
	seg    pram.Off
	next   int64 // where a sequential read would start
	run    int64 // bytes read by the sequential run so far
	window int64
	bufs   []*raBuf // prefetched ranges in file order
	ahead  int64    // end of the last prefetch
	spare  [][]byte // buffers of finished prefetches, for reuse
	closed bool
	stats  ReadaheadStats
	// reorder is how far (bytes) a read of the sequential run may land
	// ahead of or behind where the run stands: the most reads ever in
	// flight at once on this handle times the largest read. The kernel
	// sends a readahead window as parallel requests, and the daemon's
	// threads may take them up in any order among themselves; with the
	// kernel's default window (128 KiB) that is one or two requests, with
	// the 1 MiB the mount sets (fusefs/bdi.go) up to eight, and an admin
	// may raise the mount's read_ahead_kb further (measured: with 4 MiB and
	// a fixed 128 KiB slack, sequential detection failed and a cold read
	// dropped from 1.3 to 0.6 GB/s).
	reorder int64

	inflight atomic.Int64 // reads in read() now
}

// ReadaheadStats counts what a Readahead did.
type ReadaheadStats struct {
	Hits       int64 // reads served from the cache
	Misses     int64 // reads that went to disk
	Prefetches int64 // prefetch requests issued
	Bytes      int64 // bytes prefetched
}

type raBuf struct {
	start, end int64
	gen        uint64
	data       []byte
	err        error         // set before done is closed
	done       chan struct{} // closed when data or err is ready
}

const (
	raInitial = 256 << 10
	raSlack   = 128 << 10 // a read starting this close to the expected offset still counts as sequential
	raBehind  = 1 << 20   // and one this far behind the furthest read so far (out-of-order arrival)
	// raStream is how much must be read in one sequential run before the
	// store prefetches: more than one large random read (the kernel splits
	// a 1 MiB read into requests of at most 1 MiB, 128 KiB on kernels without
	// max_pages, and adds one of its own readahead),
	// whose prefetch would only compete with the next random read for the
	// disk (measured: random 1 MiB reads from a cold disk 3x slower).
	raStream = 3 << 19
	// A window is fetched in pieces of at most raPiece, each read and
	// verified by its own goroutine: the disk sees several requests at
	// once, and the first piece can be served before the last is read.
	raPiece     = 2 << 20
	raMaxPieces = 16
)

// NewReadahead returns the readahead state for a new open handle.
func (s *Store) NewReadahead() *Readahead {
	return &Readahead{s: s, window: raInitial}
}

// Stats reports counters.
func (ra *Readahead) Stats() ReadaheadStats {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	return ra.stats
}

// ReadaheadBytes is how much all Readaheads have prefetched (or asked the
// page cache to read ahead) since Open: it grows while some file is being
// streamed from the disk. The daemon watches it (cmd/conquest, procs.go).
func (s *Store) ReadaheadBytes() int64 { return s.streamed.Load() }

// Close drops the cache and waits for prefetches in flight.
func (ra *Readahead) Close() {
	ra.mu.Lock()
	bufs, spare := ra.bufs, ra.spare
	ra.bufs, ra.spare, ra.closed = nil, nil, true
	ra.mu.Unlock()
	for _, b := range bufs {
		<-b.done
		ra.s.raHeld.Add(-int64(cap(b.data)))
	}
	for _, b := range spare {
		ra.s.raHeld.Add(-int64(cap(b)))
	}
}

// HeldBytes is the memory all Readaheads hold for prefetched data (at most
// about Options.ReadaheadBudget).
func (s *Store) HeldBytes() int64 { return s.raHeld.Load() }

// read fills p from the cache or the disk (not the write buffer).
func (ra *Readahead) read(seg pram.Off, p []byte, off int64) error {
	s := ra.s
	inflight := ra.inflight.Add(1)
	defer ra.inflight.Add(-1)
	if !s.prefetch {
		ra.mu.Lock()
		ra.noteConcurrency(inflight, len(p))
		ra.advise(seg, off, int64(len(p)))
		ra.mu.Unlock()
		return s.readDisk(seg, p, off) // see PrefetchAuto
	}
	ra.mu.Lock()
	if ra.closed {
		ra.mu.Unlock()
		return s.readDisk(seg, p, off)
	}
	ra.noteConcurrency(inflight, len(p))
	ra.track(seg, off, int64(len(p)))
	gen := s.genOf(seg)
	// Drop what is stale or well behind us.
	keep := ra.bufs[:0]
	for _, b := range ra.bufs {
		if b.gen == gen && b.end+max(raBehind, ra.reorder) > off {
			keep = append(keep, b)
		} else {
			ra.recycle(b)
		}
	}
	clear(ra.bufs[len(keep):])
	ra.bufs = keep
	hit := ra.serve(p, off)
	if hit {
		ra.stats.Hits++
	} else {
		ra.stats.Misses++
	}
	if ra.run >= raStream {
		ra.window = min(ra.window*2, s.o.ReadaheadMax)
		ra.prefetch(seg, ra.next, gen)
	}
	ra.mu.Unlock()
	// A miss reads from the disk without holding ra.mu: the reads the
	// kernel sends in parallel on one handle (its own readahead, a large
	// read split in 128 KiB requests) reach the disk in parallel too.
	if !hit {
		return s.readDisk(seg, p, off)
	}
	return nil
}

// noteConcurrency records that a read of n bytes found inflight reads
// (itself included) in read(): see Readahead.reorder.
// Preconditions: ra.mu held.
func (ra *Readahead) noteConcurrency(inflight int64, n int) {
	ra.reorder = max(ra.reorder, inflight*int64(n))
}

// track records a read of [off, off+n) of seg: it continues the
// sequential run or starts a new one. The kernel sends reads ahead
// asynchronously and two or more daemon threads serve them, so a sequential
// stream arrives slightly out of order: a read a little behind the furthest
// one, or ahead of it by no more than the reads in flight at once could
// have overtaken (ra.reorder), still belongs to it.
// Preconditions: ra.mu held.
func (ra *Readahead) track(seg pram.Off, off, n int64) {
	if seg != ra.seg {
		ra.reset()
		ra.seg = seg
	}
	if off >= ra.next-max(raBehind, ra.reorder) && off <= ra.next+max(raSlack, ra.reorder) {
		ra.run += n
		ra.next = max(ra.next, off+n)
		return
	}
	ra.reset()
	ra.next = off + n
}

// reset forgets the sequential run and the cache.
// Preconditions: ra.mu held.
func (ra *Readahead) reset() {
	for _, b := range ra.bufs {
		ra.recycle(b) // prefetches in flight finish into buffers nobody reads
	}
	ra.run = 0
	ra.window = raInitial
	ra.bufs = nil
	ra.ahead = 0
}

// recycle keeps the buffer of a finished prefetch for the next one; a
// prefetch still in flight finishes into a buffer nobody reads, which is
// let go.
// Preconditions: ra.mu held.
func (ra *Readahead) recycle(b *raBuf) {
	select {
	case <-b.done:
		ra.spare = append(ra.spare, b.data[:cap(b.data)])
		if len(ra.spare) > 3 { // keep the three largest
			small := 0
			for i, x := range ra.spare {
				if len(x) < len(ra.spare[small]) {
					small = i
				}
			}
			ra.s.raHeld.Add(-int64(cap(ra.spare[small])))
			ra.spare = append(ra.spare[:small], ra.spare[small+1:]...)
		}
	default:
		ra.s.raHeld.Add(-int64(cap(b.data)))
	}
}

// buffer returns an aligned buffer of n bytes, reused when possible (fresh
// ones are rounded up to a power of two so that they can be reused as the
// window grows), or nil when a fresh one would take the store's readahead
// memory past Options.ReadaheadBudget.
// Preconditions: ra.mu held.
func (ra *Readahead) buffer(n int64) []byte {
	for i, b := range ra.spare {
		if int64(len(b)) >= n {
			ra.spare = append(ra.spare[:i], ra.spare[i+1:]...)
			return b[:n]
		}
	}
	c := int64(raInitial)
	for c < n {
		c *= 2
	}
	for {
		held := ra.s.raHeld.Load()
		if held+c > ra.s.o.ReadaheadBudget {
			return nil
		}
		if ra.s.raHeld.CompareAndSwap(held, held+c) {
			return AlignedBuffer(int(c))[:n]
		}
	}
}

// serve copies [off, off+len(p)) from the cache if it holds all of it.
// Preconditions: ra.mu held.
func (ra *Readahead) serve(p []byte, off int64) bool {
	end := off + int64(len(p))
	pos := off
	for _, b := range ra.bufs {
		if b.end <= pos || b.start > pos {
			continue
		}
		<-b.done
		if b.err != nil {
			return false
		}
		hi := min(b.end, end)
		copy(p[pos-off:hi-off], b.data[pos-b.start:hi-b.start])
		pos = hi
		if pos == end {
			return true
		}
	}
	return false
}

// nextWindow is the block-aligned range [from, to) to fetch after end, up
// to one window ahead and within the file's mapped blocks; ok is false when
// at least half a window is fetched already, or nothing is left.
// Preconditions: ra.mu held; the core's read lock held (reads the arena).
func (ra *Readahead) nextWindow(seg pram.Off, end int64) (from, to int64, ok bool) {
	if ra.ahead-end >= ra.window/2 {
		return 0, 0, false
	}
	bs := int64(ra.s.bs)
	mend, err := ra.s.mappedEnd(seg)
	if err != nil {
		return 0, 0, false
	}
	from = max(ra.ahead, end/bs*bs)
	to = min((end+ra.window+bs-1)/bs*bs, int64(mend)*bs)
	return from, to, from < to
}

// piece is a run of blocks a prefetch reads: len(sums) blocks from disk
// (sums all non-zero), at byte rel of the buffer.
type piece struct {
	rel  int64
	fb   uint64
	disk Block
	sums []uint64
}

// prefetch starts fetching, in pieces, the blocks after end until half a
// window is fetched or in flight ahead of end (see nextWindow).
// Preconditions: ra.mu held; the core's read lock held (reads the arena).
func (ra *Readahead) prefetch(seg pram.Off, end int64, gen uint64) {
	for n := 0; n < raMaxPieces; n++ {
		from, to, ok := ra.nextWindow(seg, end)
		if !ok {
			return
		}
		if !ra.prefetchRange(seg, from, min(to, from+raPiece), gen) {
			return
		}
	}
}

// prefetchRange starts fetching [from, to) in a goroutine; it reports false
// if it could not.
func (ra *Readahead) prefetchRange(seg pram.Off, from, to int64, gen uint64) bool {
	s := ra.s
	bs := int64(s.bs)
	// Resolve blocks and checksums now; the goroutine touches only the device.
	var pieces []piece
	for fb := uint64(from / bs); fb < uint64(to/bs); {
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return false
		}
		n := min(sp.n, uint64(to/bs)-fb)
		if sp.disk != 0 {
			sums := make([]uint64, n)
			if err := s.getSums(seg, fb, sums); err != nil {
				return false
			}
			for i := uint64(0); i < n; {
				j := i + 1
				for j < n && (sums[j] == 0) == (sums[i] == 0) {
					j++
				}
				if sums[i] != 0 {
					pieces = append(pieces, piece{int64(fb+i)*bs - from, fb + i, sp.disk + Block(i), sums[i:j]})
				} else {
					for b := fb + i; b < fb+j; b = (b | (sumsPerPage - 1)) + 1 {
						if ok, _, err := s.checkPageOf(seg, b); err != nil || !ok {
							return false // a checksum maybe lost: the read itself fails (lostSumErr)
						}
					}
				}
				i = j
			}
		}
		fb += n
	}
	data := ra.buffer(to - from)
	if data == nil {
		return false // over budget: the reads go to the disk themselves
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ra.s.raHeld.Add(-int64(cap(data)))
		return false
	}
	s.wg.Add(1)
	s.mu.Unlock()
	b := &raBuf{start: from, end: to, gen: gen, data: data, done: make(chan struct{})}
	ra.bufs = append(ra.bufs, b)
	ra.fetched(from, to)
	seed := s.a.U64(seg + slOffSeed)
	go func() {
		defer s.wg.Done()
		defer close(b.done)
		// Holes and unwritten blocks read as zeros; the buffer may be reused.
		at := int64(0)
		for _, pc := range pieces {
			clear(b.data[at:pc.rel])
			at = pc.rel + int64(len(pc.sums))*bs
		}
		clear(b.data[at:])
		for _, pc := range pieces {
			dst := b.data[pc.rel : pc.rel+int64(len(pc.sums))*bs]
			if _, err := s.dev.ReadAt(dst, int64(pc.disk)*bs); err != nil {
				b.err = err
				return
			}
			for i, want := range pc.sums {
				if s.blockSum(seed, pc.fb+uint64(i), dst[int64(i)*bs:int64(i+1)*bs]) != want {
					b.err = fmt.Errorf("%w: prefetch of disk block %d", ErrDataChecksum, pc.disk+Block(i))
					return
				}
			}
		}
	}()
	return true
}

// fetched records that [from, to) is being fetched ahead: the handle's
// counters, the store's (ReadaheadBytes) and Options.OnReadahead.
// Preconditions: ra.mu held.
func (ra *Readahead) fetched(from, to int64) {
	s := ra.s
	ra.ahead = to
	ra.stats.Prefetches++
	ra.stats.Bytes += to - from
	s.streamed.Add(to - from)
	if s.o.OnReadahead != nil {
		s.o.OnReadahead()
	}
}

// advisor is a device read through the page cache that can be told which
// ranges will be read soon (posix_fadvise POSIX_FADV_WILLNEED: the kernel
// starts reading them in the background).
type advisor interface {
	willNeed(off, n int64)
}

// advise is the readahead of a device read through the page cache
// (PrefetchAuto): the foreground reads copy from the image file's page
// cache, and on sequential reads the kernel is asked, one window at a
// time, to read the next window into it in large requests (its own
// readahead of the image file follows requests of at most one FUSE read,
// 128 KiB, and ramps up slowly). Reads that turn random stop it.
// Preconditions: ra.mu held; the core's read lock held (reads the arena).
func (ra *Readahead) advise(seg pram.Off, off, n int64) {
	s := ra.s
	adv, ok := s.dev.(advisor)
	if !ok || ra.closed {
		return
	}
	ra.track(seg, off, n)
	if ra.run < raStream {
		return
	}
	ra.window = min(ra.window*2, s.o.ReadaheadMax)
	bs := int64(s.bs)
	from, to, ok := ra.nextWindow(seg, ra.next)
	if !ok {
		return
	}
	ra.fetched(from, to)
	for fb := uint64(from / bs); fb < uint64(to/bs); {
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return
		}
		k := min(sp.n, uint64(to/bs)-fb)
		if sp.disk != 0 {
			adv.willNeed(int64(sp.disk)*bs, int64(k)*bs)
		}
		fb += k
	}
}
