package diskstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"conquest/alloc"
	"conquest/pram"
)

// Arena parameter indices (pram.Geometry().Params), fixed by docs/DESIGN.md.
const (
	ParamThreshold  = 0 // large-file threshold in bytes (mkfs --large-threshold)
	ParamBlockSize  = 1 // disk block size in bytes
	ParamDiskBlocks = 2 // disk size in blocks, block 0 included
)

// Root slots of the arena superblock owned by diskstore.
const (
	RootFreeMap = 5 // offset of the free map
	RootStats   = 6 // offset of the stats record
)

// The stats record (root slot 6), statsSize bytes:
//
//	+0  magic          uint64 statsMagic
//	+8  files          uint64 live segment lists (logged)
//	+16 checksumErrors uint64 data checksum mismatches seen (unlogged counter)
//	+24 ioErrors       uint64 device errors seen (unlogged counter)
//	+32 epoch          uint64 device syncs so far, top bit: one is in flight
//	                          (unlogged: see unsynced.go, bgsync.go)
//	+40 quarantined    uint64 blocks in the quarantine (logged)
//	+48 intents        Off    the intent area of in-place appends (inplace.go)
//	+56 sumFormat      uint64 how block checksums are computed (checksum.go):
//	                          0 whole-block hash (arenas formatted before
//	                          page sums), 1 page sums, 2 page sums with a
//	                          check word per checksum page (Format)
//
// Arenas formatted before the epoch and quarantine existed have zeros there,
// which is their correct initial value.
const (
	statsMagic       = 0x31545344514e4f43 // "CONQDST1"
	statsSize        = 64
	stOffFiles       = 8
	stOffChecksumEr  = 16
	stOffIOErr       = 24
	stOffEpoch       = 32
	stOffQuarantined = 40
	stOffSumFormat   = 56
)

// maxSumFormat bounds the checksum formats a newer Conquest could have
// made: a larger format word is damaged. fsck (Options.ForCheck) opens
// such a store with the format the word is fewer bits away from (its low
// bit: right for any one flipped bit), the walk reports it in a
// *StoreHeaderError, and RewriteHeaders writes that format back.
const maxSumFormat = 0xff

// sumFormat is the checksum format that the stats record's word f means:
// a word past any format is taken as the known format it is fewest bits
// away from.
func sumFormat(f uint64) uint64 {
	if f <= maxSumFormat {
		return f
	}
	best := uint64(sumFormatWhole)
	for k := uint64(sumFormatWhole); k <= sumFormatChecked; k++ {
		if bits.OnesCount64(f^k) < bits.OnesCount64(f^best) {
			best = k
		}
	}
	return best
}

// Durability chooses when written data reaches the device; see doc.go,
// "Durability".
type Durability int

const (
	// DurableOnProcessCrash (the default) writes data to the device
	// (pwrite) before Write returns and publishes it in the same
	// transaction without waiting for a device sync; the blocks published
	// so are on the arena's unsynced list until the next sync, and Open
	// verifies them after a crash. A completed Write survives the death of
	// the process (kill -9); a power failure loses at most what was written
	// since the last sync, block by block back to the contents of that sync
	// or to zeros, never to another file's data.
	DurableOnProcessCrash Durability = iota
	// GatherInMemory gathers writes in Go memory (Options.FileBuffer,
	// TotalBuffer) and writes them out in large requests, syncing the
	// device before it publishes them. Written data that was not flushed yet
	// is lost when the process dies, even without a power failure.
	GatherInMemory
)

func (d Durability) String() string {
	switch d {
	case DurableOnProcessCrash:
		return "durable-on-process-crash"
	case GatherInMemory:
		return "gather-in-memory"
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// Options tunes a Store. Zero values choose the defaults.
type Options struct {
	// Logf receives messages about damaged data (checksum mismatches name
	// the file, offset and disk block). Default: log.Printf.
	Logf func(format string, args ...any)
	// Durability: DurableOnProcessCrash (default) or GatherInMemory.
	Durability Durability
	// SyncBytes bounds, in DurableOnProcessCrash mode, the data written to
	// the device since its last sync, and the space held in quarantine: a
	// Write that passes either syncs the device (and so also bounds the
	// unsynced list and what a power failure can lose). Default
	// DefaultSyncBytes.
	SyncBytes int64
	// ForegroundSync makes the Write that passes SyncBytes sync the device
	// itself and wait, instead of starting the sync in the background and
	// waiting only when the next SyncBytes are written before it is done
	// (bgsync.go).
	ForegroundSync bool

	// Tests: testSyncBG runs a background sync (given the device's Sync);
	// testWait is called before (true) and after (false) a writer waits
	// for one.
	testSyncBG func(sync func() error) error
	testWait   func(waiting bool)
	// FileBuffer (GatherInMemory) is how many bytes of written data one
	// file may gather before they are written to disk. Default
	// DefaultFileBuffer.
	FileBuffer int
	// TotalBuffer (GatherInMemory) caps the gathered bytes of all files.
	// Default DefaultTotalBuffer.
	TotalBuffer int
	// MaxExtent caps the size in bytes of one allocation as a file grows.
	// Default DefaultMaxExtent.
	MaxExtent uint64
	// ReadaheadMax caps the readahead window in bytes. Default
	// DefaultReadaheadMax.
	ReadaheadMax int64
	// ReadaheadBudget caps the memory all Readaheads hold for prefetched
	// data (each up to about ReadaheadMax plus spare buffers): past it,
	// further streams read without prefetching, so that many files read
	// at once cannot exhaust the daemon's memory. Default
	// DefaultReadaheadBudget.
	ReadaheadBudget int64
	// OnReadahead, if set, is called each time a Readahead fetches a
	// window ahead (or asks the page cache to): while a file is streamed.
	// It runs in the reading goroutine with the readahead's lock held, so
	// it must return at once and must not call the store.
	OnReadahead func()
	// ForCheck opens the store for fsck: a damaged list of files with
	// unsynced blocks does not fail Open (Recovery counts it as Damaged,
	// and recovery waits for the next Open), so that the walk can report
	// it and a repair rebuild it. A mount leaves it false: it refuses the
	// damage, naming it.
	ForCheck bool
	// ReadOnly opens a store whose device was opened read-only, under an
	// arena opened read-only (pram.OpenOptions.ReadOnly): Open does not
	// add the superblock's backup copy when it lacks one, and Close does
	// not sync. The caller makes no changes.
	ReadOnly bool
	// CacheBytes is the memory the verified-block cache may use
	// (blockcache.go): recently read or written blocks, so that small
	// reads and writes inside one block read and hash it once. Default
	// DefaultCacheBytes; negative: no cache.
	CacheBytes int64
	// Prefetch chooses whether sequential reads prefetch in the
	// background (readahead.go). Default PrefetchAuto.
	Prefetch PrefetchMode
	// PunchFree lets GiveBack give the free blocks of an image file back
	// to the file system it is on (giveback.go). A mount sets it; fsck, df
	// and stat do not.
	PunchFree bool
}

// PrefetchMode chooses when a Readahead fetches ahead in the background.
type PrefetchMode int

// Prefetch choices.
const (
	// PrefetchAuto prefetches except on a device read entirely through
	// the page cache (an image file on a file system that refuses
	// O_DIRECT, such as tmpfs): there a read is a copy from the page cache,
	// handing each window to a goroutine costs more than it saves (with the
	// daemon on one P, the goroutine competes with the request it
	// prefetches for), and the kernel is asked to read the next window into
	// the page cache instead (posix_fadvise WILLNEED, see Readahead.advise).
	// An image file that allows O_DIRECT is prefetched with direct reads
	// (see directReadMin).
	PrefetchAuto PrefetchMode = iota
	PrefetchOn                // always prefetch sequential reads
	PrefetchOff               // never: every read is synchronous
)

// Defaults for Options.
const (
	DefaultSyncBytes   = 64 << 20
	DefaultFileBuffer  = 8 << 20
	DefaultTotalBuffer = 64 << 20
	DefaultMaxExtent   = 64 << 20
	// DefaultReadaheadMax: a cold 1 GiB dd read from an image file on
	// this VM's disk measured a median of 1,431 MiB/s with 16 MiB against
	// 1,331 with 8 MiB (16 reads each, interleaved; two more runs gave
	// 1,388 against 1,181 and 1,312 against 1,196 with 32 MiB).
	DefaultReadaheadMax = 16 << 20
	// DefaultReadaheadBudget lets about 12 files stream at full window.
	DefaultReadaheadBudget = 256 << 20
	DefaultCacheBytes      = 32 << 20
	// MaxRuns is how many disjoint ranges one file's write buffer holds
	// before a write that starts a new one flushes it.
	MaxRuns = 16
	// MaxFileSize is the largest file offset the store accepts.
	MaxFileSize = 1 << 50
)

// Store is the large-file disk path of one mounted file system: the device,
// the free map in the arena and the volatile write buffers.
//
// Concurrency. The store follows the core's lock: methods that take a
// *pram.Tx change metadata and must be called with the file system's write
// lock held (one at a time); ReadAt, Stats and Usage only read metadata and
// may run concurrently with each other, with the write lock held shared.
// s.mu guards the volatile state below and is taken after the core's lock;
// readahead goroutines never touch the arena.
type Store struct {
	a     *pram.Arena
	h     *alloc.Heap
	dev   Device
	super Super
	bs    uint64
	o     Options
	fm    pram.Off // free map
	st    pram.Off // stats record
	zero  []byte   // one zero block

	cache     *blockCache  // verified blocks (own lock)
	damaged   damageLog    // when each damaged block was last logged (own lock)
	blocks    sync.Pool    // *[]byte: aligned one-block buffers for reads
	prefetch  bool         // Readahead fetches ahead in the background
	pageSums  bool         // checksums are page sums (checksum.go); immutable
	sumChecks bool         // checksum pages keep a check word (sumcheck.go); immutable
	streamed  atomic.Int64 // bytes prefetched or advised by all Readaheads
	raHeld    atomic.Int64 // bytes of buffers all Readaheads hold (ReadaheadBudget)
	fastApp   atomic.Int64 // appends written by appendFast

	mu         sync.Mutex
	files      map[pram.Off]*fileState // volatile per-file state, by segment list
	buffered   int                     // bytes in all write buffers
	gen        uint64                  // source of fileState generations
	scratch    []byte                  // flush staging buffer (writers only)
	appendBuf  []byte                  // appendFast's two page ranges (writers only)
	quarantine []extent                // freed in the open Tx: not reused before it commits
	undo       []func()                // volatile changes of the open Tx, undone by Abort
	heldInTx   []extent                // put into the (persistent) quarantine by the open Tx
	tidyHeld   []extent                // freed by the open Tx's tidy, held only for the checkpoint (allocKeeping)
	intents    []intentRec             // in-place writes of the open Tx, by intent slot
	unsynced   int64                   // bytes written to the device since its last sync
	kicked     int64                   // bytes written since writeback was last started (kickBytes)
	syncing    int64                   // bytes the sync in flight covers (bgsync.go)
	rover      Block                   // where allocFree's last long search ended (writers only)
	scanned    uint64                  // free extents allocFree has examined (tests; writers only)
	needTidy   bool                    // stale unsynced records or quarantine may exist
	// hold: extents freed by committed transactions that the last durable
	// checkpoint of a shadowed arena may still give to a file
	// (watchCheckpoints), each with the snapshot generation it was freed
	// in; sorted by first block, disjoint. Not reused until released.
	hold []heldExtent
	// staged: free extents reserved by Stage until Unstage (stage.go),
	// sorted by first block, disjoint; allocation skips them like the
	// hold. stageRover: where the last reservation ended (writers only).
	staged     []extent
	stageRover Block
	stageBufs  sync.Pool     // *[]byte: aligned staging buffers (stage.go)
	shadowed   bool          // the arena is shadowed (immutable after Open)
	snapGen    atomic.Uint64 // checkpoint copies taken since Open
	snapSeen   uint64        // snapGen at the copy of the checkpoint in progress (its hooks)
	// fresh: the disk blocks written since checkpoint copy freshGen was
	// taken (shadowed arenas; see inPlaceSafe). Guarded by mu.
	fresh    map[Block]struct{}
	freshGen uint64
	forSpace bool // syncAllForSpace is tidying: free without holding (mu)
	// useReserve: writes over mapped blocks may take the heap's free
	// reserve (SetUseReserve); writers only.
	useReserve bool
	// ckptRetry: the caller of the operation in progress aborts, makes a
	// checkpoint and retries on ErrSpaceHeld (SetCheckpointRetry).
	ckptRetry atomic.Bool
	// openedClean: Open found nothing to recover (recover) and no
	// transaction has ended since, so GiveBack may punch the free space.
	openedClean bool
	// recoverySkipped: Open (ForCheck) could not read the unsynced list;
	// no new epoch starts, so that the next Open recovers.
	recoverySkipped bool
	recovery        RecoveryReport // what Open found
	recoveredSegs   []pram.Off     // files with live unsynced records at Open (RecoveredFiles)
	lost            lostRun        // recovery's pending log line
	closed          bool
	wg              sync.WaitGroup // readahead goroutines
	// The sync in flight and the failure of one, to report (bgsync.go);
	// writers only. bgWG: the goroutines of syncs and writeback starts.
	bg      *bgSync
	syncErr error
	bgWG    sync.WaitGroup
	// Ticks to skip before the next foreground sync a tick makes after
	// failed syncs, and the length of the last such pause (tick.go).
	tickSkip, tickPause int
	kicking             atomic.Bool // a writeback start is running
}

func (o *Options) fill() {
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	if o.FileBuffer <= 0 {
		o.FileBuffer = DefaultFileBuffer
	}
	if o.TotalBuffer <= 0 {
		o.TotalBuffer = DefaultTotalBuffer
	}
	if o.SyncBytes <= 0 {
		o.SyncBytes = DefaultSyncBytes
	}
	if o.MaxExtent == 0 {
		o.MaxExtent = DefaultMaxExtent
	}
	if o.ReadaheadMax <= 0 {
		o.ReadaheadMax = DefaultReadaheadMax
	}
	if o.ReadaheadBudget <= 0 {
		o.ReadaheadBudget = DefaultReadaheadBudget
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = DefaultCacheBytes
	}
}

// checkParams compares the arena's static parameters (when set) with the
// disk's geometry.
func checkParams(g pram.Geometry, sup Super) error {
	if bs := g.Params[ParamBlockSize]; bs != 0 && bs != uint64(sup.BlockSize) {
		return fmt.Errorf("%w: arena says block size %d, disk has %d", ErrGeometry, bs, sup.BlockSize)
	}
	if n := g.Params[ParamDiskBlocks]; n != 0 && n != sup.Blocks {
		return fmt.Errorf("%w: arena says %d disk blocks, disk has %d", ErrGeometry, n, sup.Blocks)
	}
	return nil
}

// Format writes the disk superblock (with the arena's UUID), syncs it, and
// lays an empty free map and stats record in the arena through tx (root
// slots 5 and 6). Arena parameters ParamBlockSize and ParamDiskBlocks, if
// set, must match blockSize and BlockCount(dev.Size(), blockSize). The caller
// commits tx with Store.Commit.
func Format(tx *pram.Tx, h *alloc.Heap, dev Device, blockSize uint32, o Options) (*Store, error) {
	a := tx.Arena()
	g := a.Geometry()
	if err := checkParams(g, Super{BlockSize: blockSize, Blocks: BlockCount(dev.Size(), blockSize)}); err != nil {
		return nil, err
	}
	sup, err := FormatDisk(dev, g.UUID, blockSize)
	if err != nil {
		return nil, err
	}
	fm, err := h.AllocZero(tx, freeMapSize)
	if err != nil {
		return nil, err
	}
	st, err := h.AllocZero(tx, statsSize)
	if err != nil {
		return nil, err
	}
	tx.Set64(fm, freeMapMagic)
	tx.Set64(fm+fmOffBlockSize, uint64(blockSize))
	tx.Set64(fm+fmOffBlocks, sup.Blocks)
	tx.Set64(st, statsMagic)
	tx.Set64(st+stOffSumFormat, sumFormatChecked)
	tx.Set64(pram.RootOff(RootFreeMap), uint64(fm))
	tx.Set64(pram.RootOff(RootStats), uint64(st))
	s := newStore(a, h, dev, sup, fm, st, o)
	s.freeList().initHeader(tx)
	s.unsyncedFiles().initHeader(tx)
	s.quarantineList().initHeader(tx)
	if err := s.newIntentArea(tx); err != nil {
		return nil, err
	}
	if err := s.freeExtent(tx, extent{1, Block(sup.Blocks)}); err != nil {
		return nil, err
	}
	return s, nil
}

// CheckPair reads dev's superblock and checks that it belongs to the arena
// of geometry g (UUID, block size, block count), as Open does first. The
// core calls it before it opens the arena, whose open counts the mount: a
// wrong disk is then refused without a byte of either image written.
// Errors are Open's.
func CheckPair(dev Device, g pram.Geometry) error {
	_, err := checkPair(dev, g)
	return err
}

func checkPair(dev Device, g pram.Geometry) (Super, error) {
	sup, err := ReadSuper(dev)
	if err != nil {
		return sup, err
	}
	if sup.UUID != g.UUID {
		return sup, fmt.Errorf("%w: disk %s, arena %s", ErrUUIDMismatch, pram.FormatUUID(sup.UUID), g.UUIDString())
	}
	return sup, checkParams(g, sup)
}

func newStore(a *pram.Arena, h *alloc.Heap, dev Device, sup Super, fm, st pram.Off, o Options) *Store {
	o.fill()
	s := &Store{a: a, h: h, dev: dev, super: sup, bs: uint64(sup.BlockSize), o: o, fm: fm, st: st,
		zero: make([]byte, sup.BlockSize), files: make(map[pram.Off]*fileState),
		cache: newBlockCache(uint64(sup.BlockSize), o.CacheBytes)}
	f := sumFormat(a.U64(st + stOffSumFormat))
	s.pageSums = f >= sumFormatPages && f <= sumFormatChecked
	s.sumChecks = f == sumFormatChecked
	s.blocks.New = func() any { b := AlignedBuffer(int(sup.BlockSize)); return &b }
	switch o.Prefetch {
	case PrefetchOn:
		s.prefetch = true
	case PrefetchAuto:
		c, ok := dev.(interface{ pageCached() bool })
		s.prefetch = !ok || !c.pageCached()
	}
	return s
}

// Open reads the disk superblock, checks that the disk belongs to this arena
// (UUID, block size, block count), finds the free map, and recovers the
// unsynced list: if the last run ended without syncing the device (a crash,
// kill -9, power failure), every block published since the last sync is
// read back and verified, a block whose data did not reach the disk goes
// back to its contents at the last sync or to zeros (logged with inode,
// offset and disk block; see Recovery), and the quarantine is released.
// This runs its own transactions, so Open must be called before any other
// transaction of the arena begins (right after alloc.Open), whatever the
// Durability chosen; on a clean arena it costs nothing. Errors wrap
// ErrNotConquestDisk, ErrVersion, ErrChecksum, ErrUUIDMismatch, ErrGeometry,
// ErrIO or ErrCorrupt.
func Open(h *alloc.Heap, dev Device, o Options) (*Store, error) {
	a := h.Arena()
	sup, err := checkPair(dev, a.Geometry())
	if err != nil {
		return nil, err
	}
	if !o.ReadOnly {
		if err := writeBackup(dev); err != nil {
			return nil, err
		}
	}
	fm, st, err := findRecords(a, sup, o.ForCheck)
	if err != nil {
		return nil, err
	}
	if bs, n := a.U64(fm+fmOffBlockSize), a.U64(fm+fmOffBlocks); (bs != uint64(sup.BlockSize) || n != sup.Blocks) && !o.ForCheck {
		return nil, fmt.Errorf("%w: free map for %d blocks of %d bytes, disk has %d of %d",
			ErrGeometry, n, bs, sup.Blocks, sup.BlockSize)
	}
	if free := a.U64(fm + fmOffFree); free >= sup.Blocks && !o.ForCheck { // the walk counts, the repair rebuilds
		return nil, fmt.Errorf("%w: free map counts %d free blocks of %d", ErrCorrupt, free, sup.Blocks)
	}
	if f := a.U64(st + stOffSumFormat); f > sumFormatChecked && f <= maxSumFormat {
		return nil, fmt.Errorf("%w: unknown checksum format %d (made by a newer Conquest?)", ErrVersion, f)
	} else if f > maxSumFormat && !o.ForCheck {
		return nil, fmt.Errorf("%w: checksum format word %#x in the stats record is damaged", ErrCorrupt, f)
	}
	s := newStore(a, h, dev, sup, fm, st, o)
	clean, err := s.recover()
	if err != nil {
		return nil, err
	}
	s.openedClean = clean
	s.watchCheckpoints()
	return s, nil
}

// findRecords finds the free map (root slot 5) and the stats record (root
// slot 6) of the store whose disk superblock is sup. fsck (forCheck) opens a
// store whose free map or stats record has a magic damaged in a byte or
// two, or whose free map's copy of the geometry disagrees with the disk
// superblock and the arena's parameters (both checksummed, and they agreed
// in checkPair): the walk reports a *StoreHeaderError and the repair
// rewrites them. A record not found is a *MissingRecordError.
func findRecords(a *pram.Arena, sup Super, forCheck bool) (fm, st pram.Off, err error) {
	fm, st = pram.Off(a.Root(RootFreeMap)), pram.Off(a.Root(RootStats))
	magicOK := func(got, want uint64) bool { return got == want || forCheck && magicDamaged(got, want) }
	if forCheck {
		// The root slots are not checksummed: a pointer damaged in one
		// byte is mended if exactly one pointer a byte away finds the
		// record's magic; the walk reports it and the repair writes it.
		fm = mendRoot(a, fm, freeMapSize, freeMapMagic, func(o pram.Off) bool {
			return a.U64(o+fmOffBlockSize) == uint64(sup.BlockSize) && a.U64(o+fmOffBlocks) == sup.Blocks
		})
		st = mendRoot(a, st, statsSize, statsMagic, func(o pram.Off) bool {
			return a.U64(o+stOffSumFormat) <= maxSumFormat
		})
	}
	if !a.InHeap(fm, freeMapSize) || fm%8 != 0 || !magicOK(a.U64(fm), freeMapMagic) {
		return fm, st, &MissingRecordError{Slot: RootFreeMap, What: "free map", Off: fm}
	}
	if !a.InHeap(st, statsSize) || st%8 != 0 || !magicOK(a.U64(st), statsMagic) {
		return fm, st, &MissingRecordError{Slot: RootStats, What: "stats record", Off: st}
	}
	return fm, st, nil
}

// mendRoot returns off if it points at a record of size bytes starting with
// magic, else the one pointer a byte away from off that does, else the one
// place in the heap that holds such a record and passes valid (the fields
// that follow from the disk superblock), else off. The search covers a root
// slot damaged in more than one byte (zeroed, say: a corruption test's 8
// zero bytes at slot 6 made every open refuse the image, its files intact);
// a record whose magic and fields a file's data repeats elsewhere in the
// heap makes two, and nothing is mended.
func mendRoot(a *pram.Arena, off pram.Off, size, magic uint64, valid func(pram.Off) bool) pram.Off {
	ok := func(o pram.Off) bool { return a.InHeap(o, size) && o%8 == 0 && a.U64(o) == magic }
	if ok(off) {
		return off
	}
	if c, one := nearPointer(off, ok); one {
		return c
	}
	g := a.Geometry()
	heap := a.View(g.HeapOff, g.Size-uint64(g.HeapOff))
	found, n := off, 0
	for i := 0; i+int(size) <= len(heap); i += 8 {
		if binary.LittleEndian.Uint64(heap[i:]) == magic {
			if o := g.HeapOff + pram.Off(i); valid(o) {
				found = o
				n++
			}
		}
	}
	if n != 1 {
		return off
	}
	return found
}

// heldExtent is an extent of Store.hold.
type heldExtent struct {
	x   extent
	gen uint64
}

// watchCheckpoints follows a shadowed arena's checkpoints (pram/shadow.go).
// After a power loss the arena is as of its last durable checkpoint, which
// may still give a file the blocks that the arena in RAM has freed since
// (a delete, a truncate, or the end of a quarantine: a copy-on-write's old
// block). Such blocks must keep their contents until a checkpoint that no
// longer gives them to anyone is durable, so they are held from reuse
// until then, as ext4 reuses no block a transaction freed before that
// transaction commits. The hold is volatile: after a crash of the process
// the arena that Open checkpoints is the one that freed them, and after a
// power loss it is the durable one. An arena mapped in place is durable as
// it is stored to, as far as the store can know, and nothing is held.
func (s *Store) watchCheckpoints() {
	if !s.a.Shadowed() {
		return
	}
	s.shadowed = true
	s.a.AddCheckpointHooks(pram.CheckpointHooks{
		Snapshot: func() { s.snapSeen = s.snapGen.Add(1) },
		Durable: func() {
			// Everything committed before that copy was taken.
			s.mu.Lock()
			s.releaseHeldLocked(s.snapSeen)
			s.mu.Unlock()
		},
	})
}

// releaseHeldLocked lets extents held since before generation gen be
// reused. Preconditions: s.mu held.
func (s *Store) releaseHeldLocked(gen uint64) {
	kept := s.hold[:0]
	for _, h := range s.hold {
		if h.gen >= gen {
			kept = append(kept, h)
		}
	}
	clear(s.hold[len(kept):])
	s.hold = kept
}

// holdFreedLocked moves the extents freed by the transaction that committed
// into the hold (shadowed arenas). Preconditions: s.mu held.
func (s *Store) holdFreedLocked() {
	if !s.shadowed || len(s.quarantine) == 0 {
		return
	}
	gen := s.snapGen.Load()
	for _, x := range s.quarantine {
		i, _ := slices.BinarySearchFunc(s.hold, x.b, func(h heldExtent, b Block) int { return int(int64(h.x.b) - int64(b)) })
		s.hold = slices.Insert(s.hold, i, heldExtent{x, gen})
	}
}

// SetCheckpointRetry says whether the caller of the operations that follow
// will, on ErrSpaceHeld, abort the transaction, call PrepareForSpace and
// then make a checkpoint (pram.Arena.Sync), which releases the blocks held
// for it, and retry: then a full disk reuses no block freed since the last
// checkpoint, as ext4 forces a commit before it reports ENOSPC. When it is
// not set, such an allocation takes the held blocks at once (logged).
func (s *Store) SetCheckpointRetry(on bool) { s.ckptRetry.Store(on) }

// PrepareForSpace syncs the device and frees what that makes stale (the
// quarantine of copy-on-write's old blocks, which on a shadowed arena goes
// into the hold), as far as tx's journal allows: the step before the
// checkpoint of SetCheckpointRetry.
func (s *Store) PrepareForSpace(tx *pram.Tx) error { return s.syncAll(tx) }

// HeldBlocks is the number of free blocks held from reuse until a
// checkpoint (watchCheckpoints).
func (s *Store) HeldBlocks() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint64
	for _, h := range s.hold {
		n += h.x.len()
	}
	return n
}

// Close waits for readahead, syncs and closes the device. Buffered writes
// that were never flushed are dropped: the core flushes every file (Flush or
// Fsync) before it closes the store. If writes reached the device since the
// last sync, Close syncs and starts a new epoch, so the next Open has
// nothing to verify; call it before closing the arena.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	dirty := s.unsynced > 0 || s.bg != nil
	s.mu.Unlock()
	s.wg.Wait()
	err := s.settle(true)
	s.bgWG.Wait()
	if e := s.syncUnlessReadOnly(); err == nil {
		err = e
	}
	if err == nil && dirty {
		s.endEpoch(s.tag() + 1)
	}
	if err == nil {
		err = s.takeSyncErr()
	}
	if e := s.dev.Close(); err == nil {
		err = e
	}
	return err
}

// syncUnlessReadOnly syncs the device, which a read-only store never wrote.
func (s *Store) syncUnlessReadOnly() error {
	if s.o.ReadOnly {
		return nil
	}
	return s.dev.Sync()
}

// Super is the disk's superblock.
func (s *Store) Super() Super { return s.super }

// BlockSize is the disk block size in bytes.
func (s *Store) BlockSize() uint64 { return s.bs }

// FreeBytes is the free map's size in bytes (a counter; no walk).
// Preconditions: the caller's lock, as for Write.
func (s *Store) FreeBytes() uint64 { return s.freeBlocks() * s.bs }

// AvailBytes is FreeBytes less the blocks kept for overwrites: what files
// may grow into (overwriteReserve).
func (s *Store) AvailBytes() uint64 { return s.availBlocks() * s.bs }

// Device is the store's device.
func (s *Store) Device() Device { return s.dev }

// Commit commits tx and the store's volatile changes made in it: blocks
// freed in tx become reusable, flushed write buffers are forgotten. Every
// transaction that passed through a Store method must end with Store.Commit
// or Store.Abort rather than tx.Commit or tx.Abort; for others either works.
func (s *Store) Commit(tx *pram.Tx) {
	tx.Commit()
	s.mu.Lock()
	s.openedClean = false // GiveBack comes before any transaction
	s.undo = s.undo[:0]
	s.holdFreedLocked()
	s.quarantine = s.quarantine[:0]
	s.heldInTx = s.heldInTx[:0]
	s.tidyHeld = s.tidyHeld[:0]
	s.clearIntentsLocked()
	s.mu.Unlock()
}

// Abort rolls back tx and the store's volatile changes made in it: write
// buffers are as before the transaction (data flushed in it is buffered
// again), readahead caches of the files involved are invalidated.
func (s *Store) Abort(tx *pram.Tx) {
	tx.Abort()
	s.mu.Lock()
	s.openedClean = false
	intents := append([]intentRec(nil), s.intents...)
	s.mu.Unlock()
	if len(intents) > 0 {
		// Blocks appended to in place: back to what the arena says again,
		// and synced, as Open's recovery does: a device sync that landed
		// inside tx made the appended bytes durable and the blocks'
		// unsynced records stale, so nothing else would repair them if a
		// power loss kept the appends and not their undoing.
		n, err := s.revertInPlace(intents, true)
		if err == nil && n > 0 {
			if serr := s.dev.Sync(); serr != nil {
				err = s.ioErr("syncing disk after undoing appends", serr)
			}
		}
		if err != nil {
			s.o.Logf("diskstore: undoing appends of an aborted operation: %v (Open will retry)", err)
			s.mu.Lock()
			s.intents = s.intents[:0] // the slots stay valid for Open
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	s.clearIntentsLocked()
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
	s.undo = s.undo[:0]
	s.quarantine = s.quarantine[:0]
	s.heldInTx = s.heldInTx[:0]
	s.tidyHeld = s.tidyHeld[:0]
	s.mu.Unlock()
}

// onAbortLocked records how to undo a volatile change.
// Preconditions: s.mu held.
func (s *Store) onAbortLocked(f func()) { s.undo = append(s.undo, f) }

// quarantineLocked records an extent freed in the open transaction.
// Preconditions: s.mu held.
func (s *Store) quarantineLocked(x extent) {
	i, _ := slices.BinarySearchFunc(s.quarantine, x, func(a, b extent) int {
		return int(int64(a.b) - int64(b.b))
	})
	s.quarantine = slices.Insert(s.quarantine, i, x)
}

// release frees extents of a file through tx and keeps them in quarantine
// until tx commits: until then a rollback gives them back to the file, so
// they must not be written for another purpose.
func (s *Store) release(tx *pram.Tx, xs []extent) error {
	for _, x := range xs {
		if err := s.freeExtent(tx, x); err != nil {
			return err
		}
		s.mu.Lock()
		s.quarantineLocked(x)
		s.mu.Unlock()
	}
	return nil
}

// ioErr wraps a device error: ENOSPC becomes ErrNoSpace, anything else
// ErrIO. It counts the error in the stats record.
func (s *Store) ioErr(what string, err error) error {
	s.a.PutU64(s.st+stOffIOErr, s.a.U64(s.st+stOffIOErr)+1)
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %s: %w", ErrNoSpace, what, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrIO, what, err)
}

// Stats describes disk usage.
type Stats struct {
	BlockSize      uint64
	Blocks         uint64 // on the disk, superblock included
	DataBlocks     uint64 // Blocks - 1
	FreeBlocks     uint64
	AvailBlocks    uint64 // FreeBlocks less the overwrite reserve: what growth may take
	UsedBlocks     uint64 // DataBlocks - FreeBlocks
	FreeExtents    uint64 // fragmentation of the free space
	Files          uint64 // segment lists alive
	ChecksumErrors uint64 // since format
	IOErrors       uint64 // since format
	BufferedBytes  uint64 // written, not yet on disk (GatherInMemory)
	// UnsyncedBytes: written to the device since its last sync
	// (DurableOnProcessCrash); a power failure may lose them.
	UnsyncedBytes uint64
	// QuarantinedBlocks hold the contents at the last sync of blocks
	// rewritten since; they count as used until the next sync.
	QuarantinedBlocks uint64
	// Syncs is the number of device syncs the store has made since format
	// (the epoch).
	Syncs uint64
	// FastAppends is the number of small appends written since Open
	// without reading or hashing the rest of their block (appendFast).
	FastAppends uint64
}

// Stats reports disk usage (for `conquest df`).
func (s *Store) Stats() Stats {
	free := s.freeBlocks()
	ext, _ := s.freeList().length()
	s.mu.Lock()
	buf, uns := s.buffered, s.unsynced+s.syncing
	s.mu.Unlock()
	st := Stats{
		BlockSize: s.bs, Blocks: s.super.Blocks, DataBlocks: s.super.DataBlocks(), FreeBlocks: free, AvailBlocks: s.availBlocks(),
		FreeExtents: ext, Files: s.a.U64(s.st + stOffFiles),
		ChecksumErrors: s.a.U64(s.st + stOffChecksumEr), IOErrors: s.a.U64(s.st + stOffIOErr),
		BufferedBytes: uint64(buf), UnsyncedBytes: uint64(uns),
		QuarantinedBlocks: s.quarantined(), Syncs: s.epoch(), FastAppends: uint64(s.fastApp.Load()),
	}
	if free <= st.DataBlocks {
		st.UsedBlocks = st.DataBlocks - free
	}
	return st
}

// freshBytes returns n bytes at base+at of an allocation that the current
// transaction made (written unlogged), after checking that they lie inside
// it. A failure is a bug in this package, not damage: it panics (and the
// core's recover aborts the transaction), like bbolt's always-on assertions.
func freshBytes(h *alloc.Heap, a *pram.Arena, base pram.Off, at, n uint64) []byte {
	if size, err := h.SizeOf(base); err != nil || at+n > size {
		panic(fmt.Sprintf("diskstore: assertion failed: write of [%d, +%d) into allocation %d (size %d, %v)", at, n, base, size, err))
	}
	return a.Bytes(base+pram.Off(at), n)
}

// Release syncs and closes the device without taking the store's lock,
// reading the arena or waiting for readahead and background syncs: Close
// for a file system whose arena is lost (pram/fault.go), where a fault may
// have left the lock held and the store's state can no longer be read or
// recorded. The store must not be used afterwards.
func (s *Store) Release() error {
	return errors.Join(s.syncUnlessReadOnly(), s.dev.Close())
}
