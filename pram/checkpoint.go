package pram

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCheckpointInterval is how long a change may stay only in the RAM
// copy before a checkpoint writes it to the image. ext4 commits its journal
// every 5 seconds, and sync(1) commits it at once; sync(1) never reaches a
// FUSE daemon (the kernel sends SYNCFS only to virtiofs), so a shorter
// interval keeps what a power loss right after a sync(1) can lose small.
// Measured: PostMark with 1 s against 5 s, 0.98x and 1.00x (noise).
const DefaultCheckpointInterval = time.Second

// shadow is the state of a shadowed arena (see shadow.go): the RAM copy
// that the mapping is, the image it is checkpointed to, and the pages
// changed since the last checkpoint.
//
// Lock order: ckptMu, then Arena.txMu, then Arena.loose. A checkpoint holds
// txMu and loose only while it copies the changed pages (no transaction and
// no unlogged store is in progress then), and ckptMu throughout, so
// checkpoints run one at a time and in sequence order.
type shadow struct {
	path string   // the RAM copy's file
	f    *os.File // its descriptor (the mapping's)
	img  ImageFile
	// slots is where the checkpoint slots are in the image.
	slots slotArea

	cur   atomic.Pointer[dirtySet] // pages changed since the last checkpoint
	spare *dirtySet                // the other set (ckptMu)
	// hw is one past the highest page that may not be zeros: the pages
	// loaded from the image that were not, and every page marked since.
	// Each checkpoint records it in the superblock (offLoadEnd), so that
	// the next load of a block device reads only that far: past it the
	// image holds zeros, since the first load read it all and found them,
	// and only checkpoints, which cover their pages, write there after.
	hw atomic.Uint64

	limit  int64 // pages: Begin makes a checkpoint before a transaction past this
	kickAt int64 // pages: the background checkpointer is woken at this many

	ckptMu   sync.Mutex
	seq      uint64      // newest sequence number used or found (ckptMu)
	stage    []byte      // staging buffer of the last checkpoint (ckptMu)
	prevRuns [][2]uint64 // image byte ranges the previous checkpoint applied, not yet dropped (ckptMu)
	failedAt time.Time   // when a checkpoint last failed (ckptMu)

	phase    atomic.Int32 // of the checkpoint in progress, for Abandon
	interval time.Duration
	stop     chan struct{}
	done     chan struct{}
	kick     chan struct{}
	reset    chan time.Duration // a new interval for the checkpointer (SetCheckpointInterval)
	logf     func(string, ...any)
	onCommit func(seq uint64)
	hooks    []CheckpointHooks // ckptMu

	reused, loaded bool

	// statistics
	mu          sync.Mutex // protects the fields below
	checkpoints uint64
	written     uint64 // pages written to slots
	last        time.Time
	err         error // the last checkpoint's error (nil after a success)

	verifyErr error // first mismatch found (verify.go; txMu)
}

// limitPages is the backpressure limit for an arena of size bytes: 1/8 of
// it, from 32 MiB (or the whole of a smaller arena) to 256 MiB. The
// background checkpointer starts at a quarter of it, so a transaction waits
// only when changes come faster than checkpoints write them. (At 8 MiB, a
// 4 MiB file written and deleted in a 64 MiB arena made the delete wait for
// a checkpoint's sync, and statfs right after it missed the freed space.)
func limitPages(size uint64) int64 {
	b := min(max(size/8, 32<<20), 256<<20, size)
	return int64(b / PageSize)
}

// mark records that [off, off+n) is about to be or was stored to.
func (a *Arena) mark(off Off, n uint64) {
	sh := a.sh
	if sh == nil || n == 0 {
		return
	}
	d := sh.cur.Load()
	last := (uint64(off) + n - 1) / PageSize
	added := d.mark(uint64(off)/PageSize, last)
	if added == 0 {
		return
	}
	sh.raiseHW(last + 1)
	if c := d.count(); sh.kick != nil && c >= sh.kickAt && c-added < sh.kickAt {
		select {
		case sh.kick <- struct{}{}:
		default:
		}
	}
}

// raiseHW makes hw at least end (pages).
func (sh *shadow) raiseHW(end uint64) {
	for {
		cur := sh.hw.Load()
		if end <= cur || sh.hw.CompareAndSwap(cur, end) {
			return
		}
	}
}

// backpressure makes a checkpoint before a transaction when too many pages
// wait for one (Begin): the slot, the staging buffer and the work at the
// next power-loss recovery stay bounded.
//
// While a checkpoint is in progress (its I/O outside the locks), changes may
// pile up to twice the limit before a transaction waits for it: a burst of
// writes then overlaps the checkpoint's sync instead of stalling on it.
func (a *Arena) backpressure() {
	sh := a.sh
	if sh == nil {
		return
	}
	c := sh.cur.Load().count()
	if c < sh.limit || c < 2*sh.limit && sh.phase.Load() == phaseWorking {
		return
	}
	_ = a.checkpointAtLeast(sh.limit)
}

// checkpoint writes the pages changed since the last checkpoint to the
// image, atomically with respect to a power loss:
//
//  1. with no transaction and no unlogged store in progress (txMu, loose),
//     record the next sequence number in the superblock, take the set of
//     changed pages (a new, empty set takes the marks from now on) and copy
//     those pages into a staging buffer;
//  2. write them to the next slot with its index and header, and sync: the
//     checkpoint is now durable (a power loss from here on leaves a valid
//     slot, which the next Open applies again), and so are the in-place
//     writes of the previous checkpoint (step 3 of the last one);
//  3. write the pages into the arena part of the image, without a sync:
//     the next checkpoint's sync (its step 2) makes them durable, and only
//     the checkpoint after that one reuses this slot. Until then this slot
//     stays valid, so a power loss in between is recovered by applying it
//     again (and, if the next slot was written whole, that one after it:
//     recoverSlots).
//
// If a step fails, the pages are marked changed again, so that a later
// checkpoint writes them: an image is never left with part of a checkpoint
// that no slot holds.
func (a *Arena) checkpoint() error { return a.checkpointAtLeast(0) }

// checkpointAtLeast is checkpoint, made only if at least n pages are
// changed once the previous checkpoint has ended (backpressure: that one
// may have taken them), and, for n > 0, not within a second of a failed
// one (the image is failing: no retry at every transaction).
func (a *Arena) checkpointAtLeast(n int64) error {
	sh := a.sh
	sh.ckptMu.Lock()
	defer sh.ckptMu.Unlock()
	if err := a.Lost(); err != nil {
		return err // nothing from a lost arena reaches the image (fault.go)
	}
	if c := sh.cur.Load().count(); c == 0 || c < n || n > 0 && time.Since(sh.failedAt) < time.Second {
		return nil
	}
	sh.phase.Store(phaseWaiting)
	a.txMu.Lock()
	sh.phase.Store(phaseWorking)
	defer sh.phase.Store(phaseIdle)
	a.loose.Lock()
	a.mark(offCkptSeq, 8)
	d := sh.cur.Load()
	parts := splitParts(uint64(d.count()), sh.slots.pages)
	seq := sh.seq + parts
	store64(a.m[offCkptSeq:], seq)
	end := sh.hw.Load() * PageSize
	store64(a.m[offLoadEnd:], end)
	store64(a.m[offLoadCheck:], loadCheck(end, a.geo.UUID))
	sh.cur.Store(sh.spare)
	pages := d.take()
	np := uint64(len(pages))
	_, dataOff := slotLayout(np)
	need := dataOff + np*PageSize
	if uint64(cap(sh.stage)) < need {
		sh.stage = make([]byte, need)
	}
	stage := sh.stage[:need]
	for i, p := range pages {
		copy(stage[dataOff+uint64(i)*PageSize:], a.m[p*PageSize:(p+1)*PageSize])
	}
	if verifyCheckpoints {
		a.verifyLocked(pages)
	}
	for _, h := range sh.hooks {
		if h.Snapshot != nil {
			h.Snapshot()
		}
	}
	a.loose.Unlock()
	a.txMu.Unlock()
	sh.spare = d

	var err error
	if parts == 1 {
		err = a.commitSlot(seq, pages, stage)
	} else {
		err = a.commitParts(seq, parts, pages, stage)
	}
	if err != nil {
		a.remark(pages)
		// The previous checkpoint's pages written in place were made
		// durable by this checkpoint's sync, which failed: after a failed
		// writeback Linux drops the writes it could not make, so they go
		// into the next slot again.
		a.remarkRuns(sh.prevRuns)
		sh.failedAt = time.Now()
		sh.note(err, 0)
		sh.logf("pram: %s: checkpoint %d failed, the changes stay in the RAM copy %s: %v", a.path, seq, sh.path, err)
		return err
	}
	if uint64(cap(sh.stage)) > 2*uint64(sh.limit)*PageSize {
		sh.stage = nil // a rare large checkpoint: do not keep its buffer
	}
	sh.note(nil, np)
	// The image holds seq now; the record also follows a rename of the
	// image while it is open (shadow_moved.go).
	recordImage(sh.path, a.f, imageState{seq: seq, mounts: a.U64(offMounts)}, sh.logf)
	for _, h := range sh.hooks {
		if h.Durable != nil {
			h.Durable()
		}
	}
	if sh.onCommit != nil {
		sh.onCommit(seq)
	}
	return nil
}

// splitParts is how many checkpoints a checkpoint of n pages takes with
// slots of at most per pages: one, unless it is larger than a slot (a block
// device's slots are smaller than the arena, slot.go). Each part holds the
// superblock's page and per-1 others (commitParts).
func splitParts(n, per uint64) uint64 {
	if n <= per || per < 2 {
		return 1
	}
	return (n - 1 + per - 2) / (per - 1)
}

// commitParts is commitSlot for a checkpoint too large for one slot: it
// writes it as parts checkpoints in a row, numbered up to seq. Each part
// holds the superblock (page 0) with its own sequence number, so that the
// image always says which part it holds, and the load end of the whole.
// Each part is atomic, the whole is not: a power loss before the last part
// is durable leaves the image with some of the changes and not others,
// which the boot-ID walk at the next mount may find damaged. The
// backpressure limit (an eighth of a slot) keeps checkpoints this large
// for a RAM copy reused after a crash of the daemon that had changed most
// of a large arena; the log says so. Preconditions: sh.ckptMu held; pages
// increasing, pages[0] == 0; stage laid out for all of them (slotLayout).
func (a *Arena) commitParts(seq, parts uint64, pages []uint64, stage []byte) error {
	sh := a.sh
	sh.logf("pram: %s: a checkpoint of %d pages is larger than a checkpoint slot (%d pages): writing it in %d parts; a power loss before the last is durable may leave the image damaged",
		a.path, len(pages), sh.slots.pages, parts)
	_, dataOff := slotLayout(uint64(len(pages)))
	page := func(i uint64) []byte { return stage[dataOff+i*PageSize : dataOff+(i+1)*PageSize] }
	per := sh.slots.pages - 1 // pages besides the superblock's
	first := seq - parts + 1
	for k := uint64(0); k < parts; k++ {
		lo := 1 + k*per
		hi := min(lo+per, uint64(len(pages)))
		n := 1 + hi - lo
		_, partData := slotLayout(n)
		part := make([]byte, partData+n*PageSize)
		ps := make([]uint64, 0, n)
		ps = append(ps, 0)
		copy(part[partData:], page(0))
		store64(part[partData+offCkptSeq:], first+k)
		for i := lo; i < hi; i++ {
			copy(part[partData+uint64(len(ps))*PageSize:], page(i))
			ps = append(ps, pages[i])
		}
		if err := a.commitSlot(first+k, ps, part); err != nil {
			return fmt.Errorf("part %d of %d: %w", k+1, parts, err)
		}
	}
	return nil
}

// CheckpointHooks let a layer above follow what a power loss would keep of
// a shadowed arena. Snapshot runs as a checkpoint takes its copy, with no
// transaction and no unlogged store in progress: it may read the arena,
// not change it. Durable runs once that copy is durable. Neither may call
// back into the arena's checkpoints (Sync, Persist, Begin).
type CheckpointHooks struct {
	Snapshot, Durable func()
}

// AddCheckpointHooks registers hooks with a shadowed arena; an arena
// mapped in place makes no checkpoints (every store is as durable as the
// image's page cache makes it) and ignores them.
func (a *Arena) AddCheckpointHooks(h CheckpointHooks) {
	if sh := a.sh; sh != nil {
		sh.ckptMu.Lock()
		sh.hooks = append(sh.hooks, h)
		sh.ckptMu.Unlock()
	}
}

// Shadowed reports whether the arena is a RAM copy of its image, which
// changes only at checkpoints (shadow.go).
func (a *Arena) Shadowed() bool { return a.sh != nil }

// SetCheckpointInterval changes how often the background checkpointer of
// a shadowed arena runs (OpenOptions.Interval; a remount's commit=). It
// reports false, and changes nothing, for an arena mapped in place or one
// opened without a checkpointer; d must be positive.
func (a *Arena) SetCheckpointInterval(d time.Duration) bool {
	sh := a.sh
	if sh == nil || sh.reset == nil || d <= 0 {
		return false
	}
	select {
	case sh.reset <- d:
	case <-sh.done: // closing
		return false
	}
	return true
}

// commitSlot is steps 2 and 3 of checkpoint.
// Preconditions: sh.ckptMu held.
func (a *Arena) commitSlot(seq uint64, pages []uint64, stage []byte) error {
	sh := a.sh
	size := a.geo.Size
	sealSlot(stage, a.geo.UUID, seq, size, pages)
	base := sh.slots.off(seq % 2)
	if _, err := sh.img.WriteAt(stage, base); err != nil {
		return fmt.Errorf("writing checkpoint slot: %w", err)
	}
	if err := sh.img.Sync(); err != nil {
		return fmt.Errorf("syncing checkpoint slot: %w", err)
	}
	sh.seq = seq
	// The slot and the previous checkpoint's in-place pages are on the
	// device now: the RAM copy has them, the page cache need not.
	sh.img.Drop(base, int64(len(stage)))
	for _, r := range sh.prevRuns {
		sh.img.Drop(int64(r[0]), int64(r[1]))
	}
	sh.prevRuns = sh.prevRuns[:0]
	_, dataOff := slotLayout(uint64(len(pages)))
	if err := applyPages(sh.img, pages, stage[dataOff:]); err != nil {
		return fmt.Errorf("writing checkpoint %d in place: %w", seq, err)
	}
	for i := 0; i < len(pages); {
		j := i + 1
		for j < len(pages) && pages[j] == pages[j-1]+1 {
			j++
		}
		sh.prevRuns = append(sh.prevRuns, [2]uint64{pages[i] * PageSize, uint64(j-i) * PageSize})
		i = j
	}
	return nil
}

// remark marks pages changed again after a failed checkpoint.
func (a *Arena) remark(pages []uint64) {
	d := a.sh.cur.Load()
	for _, p := range pages {
		d.mark(p, p)
	}
}

// remarkRuns is remark for runs of bytes {offset, length} (shadow.prevRuns).
func (a *Arena) remarkRuns(runs [][2]uint64) {
	d := a.sh.cur.Load()
	for _, r := range runs {
		if r[1] > 0 {
			d.mark(r[0]/PageSize, (r[0]+r[1]-1)/PageSize)
		}
	}
}

func (sh *shadow) note(err error, pages uint64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.err = err
	if err == nil {
		sh.checkpoints++
		sh.written += pages
		sh.last = time.Now()
	}
}

// checkpointer is the background goroutine of a shadowed arena: it makes a
// checkpoint every interval when something changed, and at once when the
// changed pages reach kickAt.
func (a *Arena) checkpointer() {
	sh := a.sh
	defer close(sh.done)
	GuardFaults()
	t := time.NewTicker(sh.interval) // started only with an interval
	defer t.Stop()
	for {
		select {
		case <-sh.stop:
			return
		case d := <-sh.reset:
			t.Reset(d)
			continue
		case <-sh.kick:
		case <-t.C:
		}
		select {
		case <-sh.stop:
			return
		default:
		}
		if sh.cur.Load().count() > 0 && !a.backgroundCheckpoint() {
			return
		}
	}
}

// backgroundCheckpoint is one checkpoint of the checkpointer, which
// reports false when a fault on the mapping made the arena lost (its RAM
// copy truncated under the mount, fault.go): the checkpointer then ends.
// Other panics are not expected and are not recovered.
func (a *Arena) backgroundCheckpoint() (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if !a.Fault(r) {
				panic(r)
			}
			a.sh.logf("pram: %v; no more checkpoints", a.Lost())
			ok = false
		}
	}()
	err := a.checkpoint() // logged; Sync reports its own
	return !errors.Is(err, ErrLost)
}

// Phases of a checkpoint (shadow.phase).
const (
	phaseIdle    = iota
	phaseWaiting // for txMu
	phaseWorking // copying, writing, syncing
)

// stopCheckpointer ends the background goroutine and waits for it. When a
// crashed transaction holds txMu for ever (crashedTx: Abandon in a crash
// test), a checkpoint waiting for it never ends: then it waits only for one
// that is past that point, whose I/O would otherwise go on after the
// "crash" with the image's descriptor (and its lock) still held.
func (sh *shadow) stopCheckpointer(crashedTx bool) {
	if sh.stop == nil {
		return
	}
	select {
	case <-sh.stop:
	default:
		close(sh.stop)
	}
	if !crashedTx {
		<-sh.done
		return
	}
	for {
		select {
		case <-sh.done:
			return
		default:
		}
		if sh.phase.Load() != phaseWorking {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// ShadowInfo describes a shadowed arena's RAM copy and checkpoints.
type ShadowInfo struct {
	// Path is the RAM copy's file; "" when the image is mapped in place.
	Path string
	// Reused: Open found the RAM copy that a crashed process left (it
	// held changes the image did not have yet). Loaded: Open read the image
	// into a new RAM copy.
	Reused, Loaded bool
	// InPlace says why the image is mapped in place, when it is.
	InPlace string
	// Finished: Open found checkpoint slots (the process or the system
	// went down with the arena open) and applied them again, in case the
	// last checkpoint was cut short.
	Finished bool
	// Checkpoints made since Open, pages they wrote, the newest sequence
	// number, when the last one was made.
	Checkpoints, PagesWritten, Seq uint64
	Last                           time.Time
	// Dirty is the number of pages changed since the last checkpoint.
	Dirty int64
	// SlotPages is the most pages one checkpoint slot holds (the whole
	// arena for an image file; what mkfs left room for on a block device),
	// and Limit the changed pages at which a transaction waits for a
	// checkpoint.
	SlotPages uint64
	Limit     int64
	// Err is the last checkpoint's error, nil once one succeeded.
	Err error
}

// Shadow describes the arena's RAM copy and checkpoints.
func (a *Arena) Shadow() ShadowInfo {
	sh := a.sh
	if sh == nil {
		return ShadowInfo{InPlace: a.inPlace}
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return ShadowInfo{Path: sh.path, Reused: sh.reused, Loaded: sh.loaded, Finished: a.recoveredCkpt, Checkpoints: sh.checkpoints,
		PagesWritten: sh.written, Seq: a.U64(offCkptSeq), Last: sh.last, Dirty: sh.cur.Load().count(), Err: sh.err,
		SlotPages: sh.slots.pages, Limit: sh.limit}
}
