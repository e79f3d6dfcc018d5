package pram

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mmap "github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"
)

// Arena is an open, mapped persistent-RAM arena.
//
// Concurrency: the accessors may be called from many goroutines; the layers
// above serialize writers (one Tx at a time, see Begin) and exclude readers
// from ranges a writer is changing.
type Arena struct {
	path  string
	f     *os.File
	m     mmap.MMap // the image itself, or its RAM copy (shadow.go)
	geo   Geometry
	kind  Kind
	dirty bool // the arena was not closed cleanly before this Open

	recovered     int   // undo entries rolled back by this Open
	discarded     error // the damage of the journal this Open emptied (OpenOptions.DiscardJournal)
	recoveredCkpt bool  // this Open applied checkpoint slots a crash left (ShadowInfo.Finished)

	txMu  sync.Mutex // held by the open Tx
	tx    Tx
	txSeq uint64 // Seq of the latest Tx; guarded by txMu

	// loose is held shared by stores made outside the journal (PutU64)
	// and exclusively by a checkpoint while it copies pages (after txMu).
	loose sync.RWMutex

	sh      *shadow // nil when the image is mapped in place
	inPlace string  // why the image is mapped in place ("" after Format)

	storeHook func() // test hook, see SetStoreHook

	res reservation // blocks of an image file, see Reserve

	readOnly bool // opened with OpenOptions.ReadOnly (readonly.go)

	lost atomic.Pointer[LostError] // the first fault on the mapping (fault.go)
}

// Kind is the type of backing store.
type Kind int

// Backing store kinds.
const (
	KindFile  Kind = iota // a regular file (sparse)
	KindDAX               // a device-DAX character device
	KindBlock             // a block device such as /dev/pmem0
)

func (k Kind) String() string {
	switch k {
	case KindDAX:
		return "device-dax"
	case KindBlock:
		return "block device"
	}
	return "file"
}

// Options tunes Format.
type Options struct {
	Size       uint64            // bytes; for devices 0 means the whole device
	JournalLen uint64            // 0 chooses a default from Size
	Features   uint32            // feature flags to record
	Params     [NumParams]uint64 // static parameters of the layers above
	UUID       *[16]byte         // nil generates a random one
}

// DefaultJournalLen is the journal size Format picks for an arena of size n:
// 1/128 of the arena, at least 256 KiB and at most 64 MiB.
func DefaultJournalLen(n uint64) uint64 {
	j := n / 128
	j = max(j, 256<<10)
	j = min(j, 64<<20)
	return j &^ (PageSize - 1)
}

// Format creates (if needed) and formats path as an empty arena. A regular
// file is created sparse at opts.Size. A device-DAX is formatted over its
// whole size (or opts.Size if smaller); a block device leaves room after
// the arena for the checkpoint slots of its RAM copy (DeviceArenaSize, the
// default, is the largest arena that does). The returned arena is open,
// mapped in place, and locked.
func Format(path string, opts Options) (*Arena, error) {
	f, kind, devSize, err := openBacking(path, true)
	if err != nil {
		return nil, err
	}
	size := opts.Size &^ (PageSize - 1)
	switch kind {
	case KindFile:
		if size == 0 && opts.Size != 0 {
			f.Close()
			return nil, fmt.Errorf("%s: arena size %d is too small (under one page of %d bytes)", path, opts.Size, PageSize)
		}
		if size == 0 {
			f.Close()
			return nil, fmt.Errorf("%s: no arena size given for a new image file", path)
		}
	case KindBlock:
		// The checkpoint slots follow the arena (slot.go).
		most := DeviceArenaSize(devSize)
		if size == 0 {
			size = most
		} else if size > most {
			f.Close()
			return nil, fmt.Errorf("%s: an arena of %d bytes leaves no room for its checkpoint slots on this %d-byte device: at most %d", path, size, devSize, most)
		}
	default:
		if size == 0 || size > devSize {
			size = devSize &^ (PageSize - 1)
		}
	}
	if size < MinSize {
		f.Close()
		return nil, fmt.Errorf("%s: %w: %d bytes, need at least %d", path, ErrTooSmall, size, MinSize)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if kind == KindFile {
		// Truncate to zero first so stale bytes of an old image never survive.
		if err := f.Truncate(0); err == nil {
			err = f.Truncate(int64(size))
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: sizing image: %w", path, err)
		}
	}
	jl := opts.JournalLen
	if jl == 0 {
		jl = DefaultJournalLen(size)
	}
	jl = (jl + PageSize - 1) &^ (PageSize - 1)
	g := Geometry{Size: size, JournalOff: PageSize, JournalLen: jl, HeapOff: Off(PageSize + jl),
		Features: opts.Features, CreatedNs: time.Now().UnixNano(), Params: opts.Params}
	if opts.UUID != nil {
		g.UUID = *opts.UUID
	} else if _, err := rand.Read(g.UUID[:]); err != nil {
		f.Close()
		return nil, err
	}
	if err := g.check(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m, err := mmap.MapRegion(f, int(size), mmap.RDWR, 0, 0)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: mapping %d bytes: %w", path, size, err)
	}
	a := &Arena{path: path, f: f, m: m, geo: g, kind: kind}
	if err := a.Reserve(uint64(g.HeapOff)); err != nil {
		a.unmap(false)
		return nil, err
	}
	if kind != KindFile {
		clear(m[:uint64(g.HeapOff)]) // devices hold old contents
	}
	if kind == KindBlock {
		if err := clearDeviceSlots(f, size, devSize); err != nil {
			a.unmap(false)
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	// Write the superblock last, after the journal header is zero, and make
	// both durable: a half-formatted image has no valid magic.
	clear(m[:PageSize])
	clear(m[g.JournalOff : uint64(g.JournalOff)+journalHeader])
	if err := a.Persist(0, uint64(g.HeapOff)); err != nil {
		a.unmap(false)
		return nil, err
	}
	encodeSuper(m[:PageSize], g)
	binary.LittleEndian.PutUint64(m[offState:], StateDirty)
	binary.LittleEndian.PutUint64(m[offMounts:], 1)
	boot := bootID()
	copy(m[offBoot:offBoot+16], boot[:])
	if err := a.Persist(0, PageSize); err != nil {
		a.unmap(false)
		return nil, err
	}
	return a, nil
}

// OpenOptions tunes OpenWith. The zero value is what Open does.
type OpenOptions struct {
	// InPlace maps an image file itself even where it would be shadowed
	// (shadow.go): a power loss can then leave it damaged.
	InPlace bool
	// ShadowDir is the directory of RAM copies; "" means $CONQUEST_SHADOW_DIR,
	// else DefaultShadowDir.
	ShadowDir string
	// Interval is how often a checkpoint is made when something changed;
	// 0 means DefaultCheckpointInterval. A negative value means no
	// background checkpoints at all, only Sync, Persist, Close and the
	// backpressure limit's (tests that must know when each happens).
	Interval time.Duration
	// WrapImage, if set, wraps the image's I/O (tests: CrashImage).
	WrapImage func(ImageFile) ImageFile
	// Logf receives messages about checkpoints and RAM copies; nil discards them.
	Logf func(format string, args ...any)
	// DiscardJournal empties a damaged undo journal (ErrJournal) instead
	// of refusing the arena, rolling nothing back: the transaction it held,
	// if any, stays as far as it got, for a consistency walk to find
	// (fsck --repair). DiscardedJournal says whether it did.
	DiscardJournal bool
	// OnCheckpoint, if set, is called once each checkpoint is durable, with
	// its sequence number, from the goroutine that made it (tests).
	OnCheckpoint func(seq uint64)
	// ReadOnly opens the image without writing to it, ever (readonly.go):
	// for images that cannot be written (a read-only file, device or file
	// system, an immutable file).
	ReadOnly bool
}

// Open maps an existing arena, validates its superblock, rolls back a
// transaction that a crash interrupted, and marks the arena dirty until
// Close. Errors name the path and wrap the sentinel errors of errors.go.
func Open(path string) (*Arena, error) { return OpenWith(path, OpenOptions{}) }

// OpenWith is Open with options. An image file on a disk is shadowed
// (shadow.go): the arena is a RAM copy of it, checkpointed back.
func OpenWith(path string, o OpenOptions) (*Arena, error) {
	if o.ReadOnly {
		return openReadOnly(path)
	}
	f, kind, devSize, _, g, err := openLocked(path, os.O_RDWR)
	if err != nil {
		return nil, err
	}
	a := &Arena{path: path, f: f, geo: g, kind: kind}
	var img ImageFile = osImage{f: f}
	var slots slotArea
	shadowed := false
	switch kind {
	case KindFile:
		slots, shadowed = fileSlots(g.Size), !o.InPlace && !onRAM(f)
	case KindBlock:
		img = osImage{f: f, dev: devSize}
		var room bool
		slots, room = deviceSlots(g.Size, devSize)
		shadowed = room && !o.InPlace
	}
	if shadowed && o.WrapImage != nil {
		img = o.WrapImage(img)
	}
	switch {
	case shadowed:
		why, err := a.openShadow(img, slots, o)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if why != "" {
			a.inPlace = why
			if o.Logf != nil {
				o.Logf("pram: %s: mapping the image in place (a power loss may damage it): %s", path, why)
			}
		}
	case o.InPlace && kind != KindDAX:
		a.inPlace = "asked to"
	case kind == KindFile:
		a.inPlace = "the image is on tmpfs or ramfs"
	case kind == KindBlock:
		a.inPlace = "the device has no room for checkpoint slots after the arena (formatted by an older mkfs, or with an arena too large for them): reformat to keep a RAM copy"
	default:
		a.inPlace = "a " + kind.String() + " is mapped in place"
	}
	if a.m == nil {
		m, err := mmap.MapRegion(f, int(a.geo.Size), mmap.RDWR, 0, 0)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: mapping %d bytes: %w", path, a.geo.Size, err)
		}
		a.m = m
	}
	g = a.geo
	m := a.m
	// The superblock and the journal are stored to before anything else.
	if err := a.Reserve(uint64(g.HeapOff)); err != nil {
		a.failOpen()
		return nil, err
	}
	if !bytes.Equal(m[offBackup:offBackup+superStatic], m[:superStatic]) {
		// An arena made before the copy existed, or a damaged copy:
		// the static part was just validated (persisted below).
		copy(a.Bytes(offBackup, superStatic), m[:superStatic])
	}
	a.dirty = a.U64(offState) != StateClean
	n, err := a.recover()
	if err != nil && o.DiscardJournal && errors.Is(err, ErrJournal) {
		a.PutU64(a.geo.JournalOff, 0) // validated before anything was rolled back
		a.discarded, n, err = err, 0, nil
	}
	if err != nil {
		a.failOpen()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	a.recovered = n
	a.noteBoot()
	if shadowed && a.sh == nil {
		a.forgetCheckpoints()
	}
	a.PutU64(offState, StateDirty)
	a.PutU64(offMounts, a.U64(offMounts)+1)
	if err := a.Persist(0, PageSize); err != nil {
		a.failOpen()
		return nil, err
	}
	if sh := a.sh; sh != nil && sh.interval > 0 {
		sh.stop, sh.done, sh.kick = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
		sh.reset = make(chan time.Duration)
		go a.checkpointer()
	}
	return a, nil
}

// openLocked opens an existing image with the access mode flags (os.O_RDWR
// or os.O_RDONLY), locks it, and reads and validates its superblock; it
// returns the superblock's page too. Errors name the path.
func openLocked(path string, flags int) (f *os.File, kind Kind, devSize uint64, page []byte, g Geometry, err error) {
	f, kind, devSize, err = openBackingMode(path, flags, false)
	if err != nil {
		return nil, 0, 0, nil, g, err
	}
	fail := func(err error) (*os.File, Kind, uint64, []byte, Geometry, error) {
		f.Close()
		return nil, 0, 0, nil, Geometry{}, err
	}
	if err := lockFile(f); err != nil {
		return fail(fmt.Errorf("%s: %w", path, err))
	}
	page = make([]byte, PageSize)
	if n, err := f.ReadAt(page, 0); n < superDynEnd {
		if err != nil && n == 0 {
			return fail(fmt.Errorf("%s: %w: cannot read superblock: %v", path, ErrNotConquest, err))
		}
		return fail(fmt.Errorf("%s: %w: image is only %d bytes", path, ErrNotConquest, n))
	}
	if g, err = validateOn(page, kind, devSize); err != nil {
		return fail(fmt.Errorf("%s: %w", path, err))
	}
	return f, kind, devSize, page, g, nil
}

// forgetCheckpoints is for an image that should have been shadowed but is
// mapped in place (openShadow gave a reason: no shadow directory, no room
// in it, ...). This session stores to the image directly, so what a later
// shadowed Open trusts must not undo those stores: the checkpoint sequence
// number jumps past every slot in the image and every RAM copy a crashed
// session may have left (they count as older than the image from then on,
// and are neither applied nor reused), and the load end is forgotten (this
// session may store past it). The caller persists page 0.
func (a *Arena) forgetCheckpoints() {
	a.PutU64(offCkptSeq, a.U64(offCkptSeq)+inPlaceSeqGap)
	a.PutU64(offLoadEnd, 0)
	a.PutU64(offLoadCheck, 0)
}

// inPlaceSeqGap is forgetCheckpoints' jump: a RAM copy left by a crash is
// ahead of the image by the checkpoint it was making, split in parts at
// most (commitParts), never by this many.
const inPlaceSeqGap = 1 << 32

// Close marks the arena clean, flushes it and releases the mapping and lock.
// An open transaction is rolled back first. A shadowed arena makes its last
// checkpoint, cuts the checkpoint slots off the image (so that a closed
// image is just the arena) and removes its RAM copy; if that checkpoint
// fails, the RAM copy stays (the next Open uses it) and Close reports the
// error.
func (a *Arena) Close() error {
	if a.m == nil {
		return nil
	}
	if a.Lost() != nil {
		return a.release()
	}
	if a.tx.active {
		a.tx.Abort()
	}
	if a.readOnly {
		return a.unmap(false) // nothing to write (readonly.go)
	}
	if a.sh != nil {
		a.sh.stopCheckpointer(false)
	}
	err := a.Sync()
	if err == nil {
		a.PutU64(offState, StateClean)
		err = a.Persist(0, PageSize)
	}
	if err == nil && a.sh != nil && verifyCheckpoints {
		err = a.verifyImage()
	}
	if err == nil && a.sh != nil {
		err = a.sh.dropSlots(a.geo.Size)
	}
	if e := a.unmap(err == nil); err == nil {
		err = e
	}
	return err
}

// Abandon releases the mapping and lock without marking the arena clean, as
// a crash would. Tests use it to simulate kill -9: a shadowed arena's RAM
// copy stays, as it would (RemoveShadow then simulates a power loss).
func (a *Arena) Abandon() error {
	if a.sh != nil {
		// A transaction the "crash" interrupted holds txMu for ever; a
		// checkpoint would wait for it. Otherwise let one in progress end.
		a.sh.stopCheckpointer(a.tx.active)
	}
	return a.unmap(false)
}

// failOpen undoes a failed Open: a RAM copy it loaded from the image is
// removed, one a crash left (newer than the image) stays.
func (a *Arena) failOpen() { a.unmap(a.sh != nil && a.sh.loaded) }

// unmap releases the mapping, the RAM copy's descriptor (removing the copy
// when removeShadow is set) and the image.
func (a *Arena) unmap(removeShadow bool) error {
	if a.m == nil {
		return nil
	}
	err := a.m.Unmap()
	a.m = nil
	if sh := a.sh; sh != nil {
		if e := sh.f.Close(); err == nil {
			err = e
		}
		if removeShadow {
			if e := removeShadowFiles(sh.path); err == nil {
				err = e
			}
		}
	}
	if e := a.f.Close(); err == nil {
		err = e
	}
	return err
}

// Path is the arena's backing path.
func (a *Arena) Path() string { return a.path }

// Kind is the type of backing store.
func (a *Arena) Kind() Kind { return a.kind }

// Geometry is the arena's static description.
func (a *Arena) Geometry() Geometry { return a.geo }

// Size is the arena's length in bytes.
func (a *Arena) Size() uint64 { return a.geo.Size }

// WasDirty reports whether the arena had not been closed cleanly before
// this Open (the daemon crashed or was killed).
func (a *Arena) WasDirty() bool { return a.dirty }

// Recovered is the number of undo records this Open rolled back.
func (a *Arena) Recovered() int { return a.recovered }

// DiscardedJournal is the damage (wrapping ErrJournal) of the journal that
// this Open emptied under OpenOptions.DiscardJournal, or nil.
func (a *Arena) DiscardedJournal() error { return a.discarded }

// Mounts is the number of times the arena has been opened.
func (a *Arena) Mounts() uint64 { return a.U64(offMounts) }

// Root returns root slot i, a word of the superblock the upper layers use to
// anchor their structures.
func (a *Arena) Root(i int) uint64 { return a.U64(RootOff(i)) }

// RootOff is the arena offset of root slot i, for Tx.Set64.
func RootOff(i int) Off {
	if i < 0 || i >= NumRoots {
		panic(fmt.Errorf("%w: root slot %d", ErrOutOfRange, i))
	}
	return Off(offRoots + 8*i)
}

// InRange reports whether [off, off+n) lies inside the arena.
func (a *Arena) InRange(off Off, n uint64) bool {
	return uint64(off) <= a.geo.Size && n <= a.geo.Size-uint64(off)
}

// InHeap reports whether [off, off+n) lies inside the heap.
func (a *Arena) InHeap(off Off, n uint64) bool {
	return off >= a.geo.HeapOff && a.InRange(off, n)
}

// Bytes is the one accessor that turns an offset into writable memory: the
// n bytes at off, aliasing the mapping. It panics with ErrOutOfRange if the
// range is outside the arena. Writes through it bypass the journal: use them
// only for memory the current transaction allocated (file data), inside a
// transaction, or through a Tx. It marks the pages for the next checkpoint
// (shadow.go), so a caller that only reads should use View.
func (a *Arena) Bytes(off Off, n uint64) []byte {
	b := a.View(off, n)
	a.mark(off, n)
	return b
}

// View is Bytes for reading only: the bytes must not be written through it.
func (a *Arena) View(off Off, n uint64) []byte {
	if !a.InRange(off, n) {
		panic(fmt.Errorf("%w: [%d, +%d) in arena of %d bytes", ErrOutOfRange, off, n, a.geo.Size))
	}
	return a.m[off : uint64(off)+n : uint64(off)+n]
}

func (a *Arena) word8(off Off) []byte {
	if off&7 != 0 {
		panic(fmt.Errorf("%w: unaligned word at %d", ErrOutOfRange, off))
	}
	return a.View(off, 8)
}

// U64 reads the 8-byte word at off (8-aligned).
func (a *Arena) U64(off Off) uint64 { return load64(a.word8(off)) }

// PutU64 stores the 8-byte word at off with one store, bypassing the journal.
// It may be called outside a transaction (counters); a checkpoint sees the
// word either before or after the store, and the next one after.
func (a *Arena) PutU64(off Off, v uint64) {
	w := a.word8(off)
	a.loose.RLock()
	store64(w, v)
	a.mark(off, 8)
	a.loose.RUnlock()
}

// U32 reads a little-endian uint32 at off.
func (a *Arena) U32(off Off) uint32 { return binary.LittleEndian.Uint32(a.View(off, 4)) }

// U16 reads a little-endian uint16 at off.
func (a *Arena) U16(off Off) uint16 { return binary.LittleEndian.Uint16(a.View(off, 2)) }

// U8 reads the byte at off.
func (a *Arena) U8(off Off) uint8 { return a.View(off, 1)[0] }

// Persist is a write-ordering point: it flushes [off, off+n) to the backing
// store (msync MS_SYNC over the pages that cover it). On a file that lives on
// tmpfs this is cheap and changes nothing; on a disk-backed file or a block
// device it waits for the device. A shadowed arena cannot make part of its
// changes durable without breaking the image's consistency: it makes a
// checkpoint of all of them.
func (a *Arena) Persist(off Off, n uint64) error {
	if n == 0 {
		return nil
	}
	if !a.InRange(off, n) {
		return fmt.Errorf("%s: persist: %w: [%d, +%d) in arena of %d bytes", a.path, ErrOutOfRange, off, n, a.geo.Size)
	}
	if a.readOnly {
		return nil // nothing reaches the image (readonly.go)
	}
	if err := a.Lost(); err != nil {
		return err
	}
	if a.sh != nil {
		if err := a.checkpoint(); err != nil {
			return fmt.Errorf("%s: checkpoint: %w", a.path, err)
		}
		return nil
	}
	start := uint64(off) &^ (PageSize - 1)
	end := min((uint64(off)+n+PageSize-1)&^(PageSize-1), a.geo.Size)
	if err := unix.Msync(a.m[start:end], unix.MS_SYNC); err != nil {
		return fmt.Errorf("%s: msync: %w", a.path, err)
	}
	return nil
}

// Sync flushes the whole arena.
func (a *Arena) Sync() error { return a.Persist(0, a.geo.Size) }

// openBacking opens path, creating a regular file when create is set and it
// does not exist, and returns its kind and device size (0 for files, whose
// size is checked against the superblock by Validate through Stat).
func openBacking(path string, create bool) (*os.File, Kind, uint64, error) {
	return openBackingMode(path, os.O_RDWR, create)
}

// openBackingMode is openBacking with the access mode (os.O_RDWR or
// os.O_RDONLY).
func openBackingMode(path string, flags int, create bool) (*os.File, Kind, uint64, error) {
	if create {
		flags |= os.O_CREATE
	}
	// A FIFO's open waits for a peer (for ever, for a read-only open), so
	// what can be no image is refused before it is opened.
	if st, err := os.Stat(path); err == nil && st.Mode()&(os.ModeNamedPipe|os.ModeSocket|os.ModeDir) != 0 {
		return nil, 0, 0, fmt.Errorf("%s: not a regular file, device-DAX or block device", path)
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, 0, 0, err // *PathError names the path
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, 0, err
	}
	mode := st.Mode()
	switch {
	case mode.IsRegular():
		return f, KindFile, uint64(st.Size()), nil
	case mode&os.ModeDevice != 0 && mode&os.ModeCharDevice != 0:
		n, err := daxSize(path)
		if err != nil {
			f.Close()
			return nil, 0, 0, fmt.Errorf("%s: %w", path, err)
		}
		return f, KindDAX, n, nil
	case mode&os.ModeDevice != 0:
		n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKGETSIZE64)
		if err != nil {
			f.Close()
			return nil, 0, 0, fmt.Errorf("%s: reading device size: %w", path, err)
		}
		if flags&os.O_RDWR != 0 && ReadOnlyDevice(f) {
			// Opened for writing all the same; its writes would fail
			// (and a shared writable mapping of it does).
			f.Close()
			return nil, 0, 0, &os.PathError{Op: "open", Path: path, Err: unix.EROFS}
		}
		return f, KindBlock, uint64(n), nil
	}
	f.Close()
	return nil, 0, 0, fmt.Errorf("%s: not a regular file, device-DAX or block device", path)
}

// daxSize reads a device-DAX device's size from sysfs.
func daxSize(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	sys := fmt.Sprintf("/sys/dev/char/%d:%d/size", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	b, err := os.ReadFile(sys)
	if err != nil {
		return 0, fmt.Errorf("not a device-DAX device (no %s): %w", sys, err)
	}
	var n uint64
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &n); err != nil {
		return 0, fmt.Errorf("bad size in %s: %w", filepath.Clean(sys), err)
	}
	return n, nil
}

// lockFile takes an exclusive advisory lock, or fails with ErrLocked.
func lockFile(f *os.File) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}
