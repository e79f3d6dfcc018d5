package conquest

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"conquest/alloc"
	"conquest/dirhash"
	"conquest/diskstore"
	"conquest/pram"
)

// ErrCorrupt is returned by Open when the arena is a valid pram image whose
// file-system structure (root inode, orphan list) is damaged. Operations on
// a mounted file system report damage as ErrIO instead.
var ErrCorrupt = errors.New("conquest: file system structure is corrupt")

// FS is an open Conquest file system.
//
// Locking (see doc.go): mu is taken first; mutations hold it exclusively and
// run in pram transactions, lookups and reads hold it shared. vol.mu guards
// the volatile state and is taken after mu (or alone).
type FS struct {
	mu sync.RWMutex // protects the arena contents
	a  *pram.Arena  // immutable after Open
	h  *alloc.Heap  // immutable after Open

	logf    func(format string, args ...any)
	now     func() Timespec
	noAtime atomic.Bool  // Options.NoAtime, or SetNoAtime
	stacked atomic.Bool  // a panic was logged with its stack (damageLog)
	damaged atomic.Bool  // an operation met damage or an internal error: Close marks a full check due
	coarse  atomic.Bool  // new regular files' times from the coarse clock (UseCoarseClock)
	badSize atomic.Int32 // reads refused for an impossible file size, logged (file.go)

	lostOnce   sync.Once                        // the first fault on the arena was logged (lost.go)
	lostLogf   func(format string, args ...any) // logf that still logs once the arena is lost (lost.go)
	lostClosed atomic.Bool                      // Close of a lost arena ran (lost.go)

	vol volatile // kernel refs, open counts, handles

	readOnly bool // Options.ReadOnly: nothing is written (readonly.go)
	// customClock: Options.Now set the clock (UseCoarseClock then does nothing).
	customClock bool

	// The large-file path (file_disk.go); ds is nil without a disk.
	ds           *diskstore.Store // immutable after Open
	diskPath     string
	threshold    uint64
	lsize        map[Ino]uint64   // disk files' sizes above the published iSize (mu)
	lsizeUndo    []lsizeChange    // changes to lsize in the open Tx (mu held exclusively)
	spills       uint64           // files sent to the disk by spill since Open (mu held exclusively)
	moving       map[Ino]struct{} // arena files above the threshold queued for the disk commit (move.go; mu)
	moveHeld     map[Ino]struct{} // files whose move at a write overflowed the journal: they wait for the commit (move.go; mu)
	moveErr      string           // the last error of a move logged (move.go; mu held exclusively)
	moveWait     int              // ticks the disk commit waits before moving again after a failed batch (move.go; mu)
	adopting     bool             // a batch's move is in its transaction: update starts no batch (moveForSpace; mu)
	recordsRetry bool             // update is retrying with writes allowed on the heap's reserve (updateRecordsFromReserve; mu)
	moveAll      bool             // moveForSpace's batches move files unlinked while open too (moveCandidate; mu)
	// moveFound holds arena files above the threshold that an open found
	// unqueued (a crash forgets the queue); the next batch queues them
	// (move.go). Its mutex is a leaf, taken under FS.mu (shared or not).
	moveFound struct {
		sync.Mutex
		inos map[Ino]struct{}
	}

	closed bool       // protected by mu
	commit diskCommit // the periodic disk commit (disk_commit.go)
	// stuck: an unlinked inode could not be freed for lack of space (a
	// large file's free can take an arena page for the disk's free map);
	// the next successful free retries the orphan list (orphan.go). mu.
	stuck bool
	// cutsLeft: files whose cut an error stopped after its size was
	// published (finishCutAfter), on the orphan list with links until
	// their next change finishes it (finishCutLocked), or Close or the
	// next Open; Check accepts them. mu.
	cutsLeft map[Ino]struct{}
	// freeHook, if set (tests), runs before each step of freeing an
	// inode and can fail it.
	freeHook func(Ino) error
	// cutHook, if set (tests), runs before each later step of a cut
	// (finishShrinkLocked) and can fail it.
	cutHook func(Ino) error
	// moveHook, if set (tests), runs in the transaction that switches a
	// file of a batch of moves to its staged blocks (move.go), with the
	// file and its place in the batch; it can overflow the journal (panic
	// with pram.ErrTxFull) as a real move may.
	moveHook func(ino Ino, n int)
	// stagedHook, if set (tests), runs in a batch of moves after the
	// staged data is written and synced, before any file is switched, with
	// FS.mu not held by the tick.
	stagedHook func()
	// onMoved: SetMovedHook's function, or nil.
	onMoved atomic.Pointer[func(Ino)]
}

// Mkfs formats pramPath as an empty Conquest file system: a pram arena, the
// allocator, a root directory and, if diskPath is not "" (or o.Device is
// set), the large-file disk: a regular file is created or resized to
// o.DiskSize, the disk superblock gets the arena's UUID, and the arena
// records the threshold, block size and block count.
func Mkfs(pramPath, diskPath string, o MkfsOptions) error {
	threshold := o.LargeFileThreshold
	if threshold == 0 {
		threshold = diskstore.DefaultThreshold
	}
	if threshold < MinLargeFileThreshold || threshold > MaxLargeFileThreshold {
		return fmt.Errorf("%w: large-file threshold %d outside [%d, %d]", ErrInvalid, threshold,
			MinLargeFileThreshold, MaxLargeFileThreshold)
	}
	var params [pram.NumParams]uint64
	params[diskstore.ParamThreshold] = threshold
	var features uint32
	bs := o.DiskBlockSize
	dev := o.Device
	if diskPath != "" || dev != nil {
		if bs == 0 {
			bs = diskstore.DefaultBlockSize
		}
		if !diskstore.ValidBlockSize(uint64(bs)) {
			return fmt.Errorf("%w: disk block size %d", ErrInvalid, bs)
		}
		if threshold > diskStep*uint64(bs) {
			// Moving a file to disk writes it in one transaction.
			return fmt.Errorf("%w: large-file threshold %d above %d blocks of %d bytes (at most %d with this block size)",
				ErrInvalid, threshold, diskStep, bs, diskStep*uint64(bs))
		}
		if dev == nil {
			var err error
			if dev, err = createDisk(diskPath, o.DiskSize); err != nil {
				return err
			}
			defer dev.Close()
		}
		n := diskstore.BlockCount(dev.Size(), bs)
		if n < diskstore.MinBlocks {
			return fmt.Errorf("%w: %s: a disk of %d bytes holds no data block of %d bytes", ErrInvalid, diskPath, dev.Size(), bs)
		}
		params[diskstore.ParamBlockSize] = uint64(bs)
		params[diskstore.ParamDiskBlocks] = n
		features |= pram.FeatureDisk
	}
	a, err := pram.Format(pramPath, pram.Options{Size: o.PramSize, JournalLen: o.JournalLen, Features: features, Params: params})
	if err != nil {
		return err
	}
	fs := &FS{a: a, logf: func(string, ...any) {}, now: wallClock, lsize: make(map[Ino]uint64)}
	err = fs.update(func(tx *pram.Tx) error {
		h, err := alloc.Format(tx)
		if err != nil {
			return err
		}
		fs.h = h
		if dev != nil {
			if fs.ds, err = diskstore.Format(tx, h, dev, bs, diskstore.Options{Logf: fs.logf}); err != nil {
				return fmt.Errorf("%s: %w", diskPath, err)
			}
		}
		mode := o.RootMode & 0o7777
		if mode == 0 {
			mode = 0o755
		}
		root, err := fs.newInode(tx, inode{}, S_IFDIR|mode, 0, Cred{Uid: o.RootUid, Gid: o.RootGid}, fs.now(), false)
		if err != nil {
			return err
		}
		tx.Set64(pram.RootOff(slotRoot), uint64(root.off))
		root.ino = RootIno
		b := a.Bytes(root.off, inodeSize)
		putU64(b[iIno:], uint64(RootIno))
		putU64(b[iParent:], uint64(RootIno))
		d, err := dirhash.Create(tx, h)
		if err != nil {
			return err
		}
		putU64(b[iData:], uint64(d))
		return fs.writeSuperCopy(tx)
	})
	if err != nil {
		a.Abandon()
		return fmt.Errorf("%s: mkfs: %w", pramPath, err)
	}
	if dev != nil {
		if err := dev.Sync(); err != nil {
			a.Abandon()
			return fmt.Errorf("%s: mkfs: syncing the disk: %w", diskPath, err)
		}
	}
	return a.Close()
}

// createDisk opens the disk for Mkfs: a missing path (or an existing
// regular file, when size is given) becomes an image file of size bytes; a
// block device given a size is used up to it (sizedDevice); a block device
// or an existing file is used whole otherwise.
func createDisk(path string, size uint64) (diskstore.Device, error) {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.Mode().IsRegular() && size > 0, errors.Is(err, os.ErrNotExist):
		if size == 0 {
			return nil, fmt.Errorf("%s: %w: a new disk image needs a size", path, ErrInvalid)
		}
		if err := diskstore.CreateFile(path, int64(size)); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	case st.Mode()&os.ModeDevice != 0 && size > 0:
		// A block device given a size: its first size bytes are the disk,
		// as mkfs.ext4 DEVICE SIZE uses only part of a device.
		dev, err := diskstore.OpenDevice(path, diskstore.DeviceOptions{})
		if err != nil {
			return nil, err
		}
		if size > uint64(dev.Size()) {
			dev.Close()
			return nil, fmt.Errorf("%w: a disk of %d bytes does not fit on %s, a device of %d bytes", ErrInvalid, size, path, dev.Size())
		}
		return sizedDevice{dev, int64(size)}, nil
	}
	return diskstore.OpenDevice(path, diskstore.DeviceOptions{})
}

// sizedDevice is the first size bytes of a device, for Mkfs: the disk's
// superblock and the arena record its block count, and later opens use
// the device whole but only as many blocks as were recorded (a device
// that grows keeps its disk's size).
type sizedDevice struct {
	diskstore.Device
	size int64
}

func (d sizedDevice) Size() int64 { return d.size }

// Open opens the file system in pramPath and its disk diskPath (or
// o.Device): the arena is mapped (an interrupted transaction is rolled
// back), the allocator, the root and the disk's superblock are validated
// (a disk of another file system is refused), the whole file system is
// checked first if the system went down with the arena open (or damage
// was met while it was last mounted) and Options.OnCrashCheck asks for it,
// every orphan left by a crash is freed,
// and what an unfinished fallocate reserved past a file's end is given back
// (falloc_pending.go).
func Open(pramPath, diskPath string, o Options) (*FS, error) {
	ao := o.Arena
	if ao.Logf == nil {
		ao.Logf = o.Logf
	}
	if o.ReadOnly {
		ao.ReadOnly = true
		o.Disk.ReadOnly = true
		o.NoAtime = true
	}
	opened := false // o.Device is ours to close if the arena fails
	if o.Device == nil && diskPath != "" {
		// The disk first: one that cannot be opened for writing must be
		// refused before the arena is, which counts the mount and may
		// recover it. Other errors come in their usual order (openDisk).
		dev, err := diskstore.OpenDevice(diskPath, diskstore.DeviceOptions{ReadOnly: o.ReadOnly})
		switch {
		case err == nil:
			o.Device, opened = dev, true
		case errors.Is(err, syscall.EROFS), errors.Is(err, os.ErrPermission):
			return nil, err
		}
	}
	if o.Device != nil {
		// A disk that is not this arena's is refused before the arena's
		// open counts the mount (and perhaps recovers it): nothing is
		// written to either image. An arena whose superblock cannot be
		// read here gets its own error from the open below.
		if g, gerr := pram.ReadGeometry(pramPath); gerr == nil && g.Features&pram.FeatureDisk != 0 {
			if err := diskstore.CheckPair(o.Device, g); err != nil {
				if opened {
					o.Device.Close()
				}
				if errors.Is(err, diskstore.ErrNotConquestDisk) {
					if herr := alloc.CheckFormatted(pramPath, g); herr != nil {
						return nil, fmt.Errorf("%s: %w", pramPath, herr)
					}
				}
				return nil, diskPairErr(diskPath, pramPath, err)
			}
		}
	}
	// A heap of a newer format is refused before the arena's open writes.
	if g, gerr := pram.ReadGeometry(pramPath); gerr == nil {
		if err := alloc.CheckVersion(pramPath, g); err != nil {
			if opened {
				o.Device.Close()
			}
			return nil, fmt.Errorf("%s: %w", pramPath, err)
		}
	}
	a, err := pram.OpenWith(pramPath, ao)
	if err != nil {
		if opened {
			o.Device.Close()
		}
		return nil, err
	}
	fs := &FS{a: a, logf: o.Logf, now: o.Now, diskPath: diskPath, lsize: make(map[Ino]uint64), readOnly: o.ReadOnly}
	fs.noAtime.Store(o.NoAtime)
	if fs.logf == nil {
		fs.logf = func(string, ...any) {}
	}
	fs.lostLogf, fs.logf = fs.logf, quietWhenLost(a, fs.logf)
	fs.customClock = fs.now != nil
	if fs.now == nil {
		fs.now = wallClock
	}
	fs.vol.init()
	if n := a.Recovered(); n > 0 {
		fs.logf("%s: recovered %d journal records", pramPath, n)
	}
	fail := func(err error) (*FS, error) {
		if fs.ds != nil {
			fs.ds.Close()
		} else if o.Device != nil {
			o.Device.Close()
		}
		a.Close()
		return nil, err
	}
	if fs.h, err = alloc.Open(a); err != nil {
		return fail(fmt.Errorf("%s: %w", pramPath, err))
	}
	if err := fs.openDisk(diskPath, o); err != nil {
		return fail(err)
	}
	if err := fs.checkRoot(); err != nil {
		return fail(fmt.Errorf("%s: %w", pramPath, err))
	}
	checked := false
	if o.OnCrashCheck != nil && a.CheckDue() {
		if err := fs.crashCheck(o.OnCrashCheck); err != nil {
			return fail(fmt.Errorf("%s: %w", pramPath, err))
		}
		checked = true
	}
	if fs.readOnly {
		return fs, nil // the rest changes the file system (readonly.go)
	}
	if fs.ds != nil && (checked || !a.CheckDue()) && fs.orphanListSound() {
		// Before the first transaction, and not while damage may lie
		// unchecked: a damaged free map could list a file's blocks as
		// free (diskstore/giveback.go); nor when the orphan list is
		// damaged, which refuses the mount below (arena damage seldom
		// stops at one structure).
		if err := fs.ds.GiveBack(); errors.Is(err, diskstore.ErrCorrupt) {
			// The free map does not add up: allocating from it could
			// hand out a file's blocks. Refused, and checked in full
			// until repaired (a review: a mount that went on lost data).
			a.MarkDamaged()
			return fail(fmt.Errorf("%s: %w; run `conquest fsck --repair`", diskPath, err))
		} else if err != nil {
			fs.logf("%s: giving free space back to the disk image's file system: %v", diskPath, err)
		}
	}
	fs.mu.Lock()
	n, stuck, err := fs.reapOrphansLocked()
	fs.mu.Unlock()
	if err != nil && o.SkipDamagedOrphans {
		fs.logf("%s: processing orphans: %v (left for the repair)", pramPath, err)
	} else if err != nil {
		return fail(fmt.Errorf("%s: processing orphans: %w; %w", pramPath, err, ErrOrphanList))
	}
	if n > 0 {
		fs.logf("%s: freed %d orphans", pramPath, n)
	}
	for _, e := range stuck {
		fs.logf("%s: an unlinked file could not be freed (run `conquest fsck --repair`): %v", pramPath, e)
	}
	fs.mu.Lock()
	if err := fs.undoFallocLocked(); err != nil {
		// Only space is at stake: the next fallocate retries it.
		fs.logf("%s: %v", pramPath, err)
	}
	if fs.ds != nil {
		fs.trimRecoveredLocked()
	}
	if fs.a.Root(slotSuperCopy) == 0 { // an arena made before the copy existed
		if err := fs.update(fs.writeSuperCopy); err != nil {
			fs.logf("%s: writing a copy of the superblock in the heap: %v", pramPath, err)
		}
	}
	fs.mu.Unlock()
	fs.startDiskCommit(o.DiskCommit)
	return fs, nil
}

// checkRoot validates the root inode at Open.
func (fs *FS) checkRoot() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: root inode: %v (%w)", ErrCorrupt, r, ErrRootSlot)
		}
	}()
	root, err := fs.inode(RootIno)
	if err != nil {
		return fmt.Errorf("%w: root inode: %v (%w)", ErrCorrupt, err, ErrRootSlot)
	}
	if !root.isDir() || root.data() == 0 {
		return fmt.Errorf("%w: root inode is not a directory (%w)", ErrCorrupt, ErrRootSlot)
	}
	return nil
}

// Close frees the orphans (nothing is open any more), marks the arena clean
// and unmaps it. The FS must not be used afterwards.
func (fs *FS) Close() error {
	if fs.a.Lost() != nil {
		return fs.closeLost() // takes no lock (lost.go)
	}
	fs.stopDiskCommit() // before the lock: a tick takes it
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return nil
	}
	if fs.readOnly {
		return fs.closeReadOnlyLocked()
	}
	if fs.ds != nil {
		fs.moveAllLocked()      // errors are logged: the files stay in the arena
		_ = fs.syncDiskLocked() // errors are logged: that data is lost
	}
	fs.vol.reset()
	_, stuck, rerr := fs.reapOrphansLocked()
	if rerr != nil {
		stuck = append(stuck, rerr)
	}
	for _, e := range stuck {
		fs.logf("%s: freeing orphans at close: %v", fs.a.Path(), e)
	}
	var err error
	if fs.ds != nil {
		err = fs.ds.Close()
		if err != nil {
			fs.logf("%s: closing the disk: %v", fs.diskPath, err)
		}
	}
	fs.closed = true
	if fs.damaged.Load() {
		fs.a.MarkDamaged()
		fs.logf("%s: damage was met while it was mounted: the next mount checks it in full (or run `conquest fsck`)", fs.a.Path())
	}
	if e := fs.a.Close(); err == nil {
		err = e
	}
	return err
}

// Arena is the underlying arena (for tools such as `conquest stat`).
func (fs *FS) Arena() *pram.Arena { return fs.a }

// Heap is the underlying allocator.
func (fs *FS) Heap() *alloc.Heap { return fs.h }

// Disk is the large-file store, or nil for a file system without a disk.
func (fs *FS) Disk() *diskstore.Store { return fs.ds }

// wallClock is the clock for timestamps when Options.Now is nil.
func wallClock() Timespec {
	t := time.Now()
	return Timespec{Sec: t.Unix(), Nsec: uint32(t.Nanosecond())}
}

// UseCoarseClock makes the times of a new regular file come from the
// coarse realtime clock (CLOCK_REALTIME_COARSE), the one the kernel stamps
// a file's times from; the FUSE adapter calls it for a mount with the
// writeback cache, where the kernel stamps a regular file's mtime and ctime
// at each write itself. The finer clock of the daemon's create ran up to a
// few milliseconds ahead of the kernel's, so a file created and then
// written showed atime after mtime (relatime then skipped its first read),
// and a file written after another one was created showed the older mtime
// of the two (495 of 500 times). Directories and other inodes, whose times
// only the daemon stamps, keep the finer clock (a stat, mkdir in the
// directory and stat shows a new mtime, as ext4's fine-grained stamps
// after a query do). No effect with Options.Now.
func (fs *FS) UseCoarseClock() { fs.coarse.Store(true) }

// newFileTime is the time to stamp on a new inode of mode, whose operation
// read now (UseCoarseClock).
func (fs *FS) newFileTime(mode uint32, now Timespec) Timespec {
	if mode&S_IFMT != S_IFREG || !fs.coarse.Load() || fs.customClock {
		return now
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts) != nil {
		return now
	}
	return Timespec{Sec: ts.Sec, Nsec: uint32(ts.Nsec)}
}

// simulatedCrash is the panic value crash tests raise from the store hook;
// the operation wrappers let it through untouched (no Abort), as kill -9.
type simulatedCrash struct{}

// update runs fn in one transaction: Commit if it returns nil, Abort if it
// returns an error or panics (a panic becomes ErrIO and is logged).
//
// On a shadowed arena, a disk whose only free blocks were freed since the
// last checkpoint (held for it: a power loss would bring back the files
// that had them) fails fn with diskstore.ErrSpaceHeld; update then aborts,
// syncs the disk, makes a checkpoint, which releases them, and runs fn
// again, as ext4 commits its journal before it reports ENOSPC. If fn still
// finds no space and some file holds blocks taken ahead of its writes and
// not written (preallocation), those are given back (dropPreallocs) and
// fn runs again. fn runs at most four times, each time in a fresh
// transaction after a full abort.
// Preconditions: fs.mu held exclusively (or fs not yet shared).
func (fs *FS) update(fn func(tx *pram.Tx) error) error {
	err := fs.updateHeld(fn)
	if errors.Is(err, ErrNoSpace) && fs.ds != nil && fs.dropPreallocs() {
		err = fs.updateHeld(fn)
	}
	if errors.Is(err, ErrNoSpace) && fs.ds != nil && fs.moveForSpace() {
		err = fs.updateHeld(fn)
	}
	if errors.Is(err, ErrNoSpace) && fs.ds != nil && !fs.recordsRetry {
		err = fs.updateRecordsFromReserve(fn, err)
	}
	return err
}

// updateRecordsFromReserve runs fn once more with writes over disk blocks
// already mapped allowed to draw on the arena heap's free reserve
// (diskstore.SetUseReserve: their unsynced records and quarantine, which
// the next disk sync frees, and half of it for what a copy-on-write adds
// to the maps), and then, if it succeeded, syncs the disk, whose tidy
// frees the transient part and so fills the reserve again. So with a full
// arena a write into blocks fallocate reserved, or over data already
// written, goes on, as on ext4, at the price of a device sync per such
// write. Any other operation that found no space fails again as before.
// Preconditions: fs.mu held exclusively, no Tx open.
//
// Blocks written since the last sync are synced first, and fn tried again
// as usual: that sync's tidy frees their records. If it fails, fn fails
// with noSpace, its first error, without the reserve: a device that keeps
// failing its syncs would otherwise never give the reserve back, and each
// such write would take more of what deletes need.
func (fs *FS) updateRecordsFromReserve(fn func(tx *pram.Tx) error, noSpace error) error {
	fs.recordsRetry = true // the syncs below must not come back here
	defer func() { fs.recordsRetry = false }()
	if fs.ds.SyncPending() {
		if fs.syncWrittenLocked() != nil { // logged
			return noSpace
		}
		if err := fs.updateHeld(fn); !errors.Is(err, ErrNoSpace) {
			return err
		}
	}
	err := func() error {
		fs.ds.SetUseReserve(true)
		defer fs.ds.SetUseReserve(false) // also past a crash test's panic
		return fs.updateHeld(fn)
	}()
	if err == nil && fs.ds.SyncPending() {
		fs.syncWrittenLocked() // a failure is logged: the records wait for the next sync
	}
	return err
}

// moveForSpace moves the files queued for the disk commit (move.go) at
// once, when an operation found no space, and reports whether the arena
// has more room for it. Written faster than the commit moves them (a batch
// of moveBatch bytes a tick), files above the threshold could fill the arena
// while they wait: writes to them move them at once (the spill reserve), but
// a create failed with ENOSPC, a review found, with df showing 900 MB free.
// Files unlinked while open above the threshold move too, which the commit
// leaves in the arena (they may vanish at the next close): 48 such files of
// 1.2 MB held a 64 MiB arena full in the same review. Not inside a batch's
// own transaction, and not while the batches wait after a failure
// (moveWait: a full or failing disk).
// Preconditions: fs.mu held exclusively, no Tx open.
func (fs *FS) moveForSpace() bool {
	if fs.adopting || fs.moveWait > 0 {
		return false
	}
	queued := fs.takeFound()
	for _, ino := range fs.unlinkedToMove() {
		if fs.moving == nil {
			fs.moving = make(map[Ino]struct{})
		}
		fs.moving[ino] = struct{}{}
		queued = true
	}
	if !queued {
		return false
	}
	before := fs.h.Stats().AvailBytes
	fs.moveAll = true
	defer func() { fs.moveAll = false }()
	fs.moveAllLocked()
	if fs.moveWait > 0 && fs.ds.HeldBlocks() > 0 {
		// The batch failed, and the disk's free blocks may all be held for
		// the next checkpoint (blocks that closes gave back, with the arena
		// shadowed): staging, unlike a transaction, does not make that
		// checkpoint itself (updateHeld). Make it, and try once more.
		fs.checkpointForSpace()
		fs.moveWait = 0
		fs.moveAllLocked()
	}
	return fs.h.Stats().AvailBytes > before
}

// unlinkedToMove returns the arena files above the threshold that are
// unlinked but still open (on the orphan list with no links).
// Preconditions: fs.mu held exclusively.
func (fs *FS) unlinkedToMove() []Ino {
	return fs.orphansWhere(func(in inode) bool {
		return in.isReg() && in.nlink() == 0 && fs.wantDisk(in, in.size())
	})
}

// dropPreallocs gives back, when an operation found no space, the blocks
// that writes took ahead of themselves and have not written, in every
// file, open ones too (Store.DropPrealloc over the whole window, past the
// end included; a write that follows takes what it needs again). Each file
// is its own transaction. It reports whether any block was freed: only
// then is the operation worth trying again.
// Preconditions: fs.mu held exclusively, no Tx open.
func (fs *FS) dropPreallocs() bool {
	before := fs.ds.FreeBytes()
	for _, seg := range fs.ds.PreallocSegs() {
		owner, err := fs.ds.Owner(seg)
		if err != nil {
			continue
		}
		for range maxDropTxs {
			dropped := false
			err = fs.updateOnce(func(tx *pram.Tx) error {
				if in, err := fs.inode(Ino(owner)); err != nil || !in.isReg() || !in.onDisk() || in.seg() != seg {
					return nil
				}
				dropped = true
				return fs.ds.DropPrealloc(tx, seg, diskstore.MaxFileSize)
			})
			if err != nil || !dropped || !fs.ds.HasPrealloc(seg, diskstore.MaxFileSize) {
				break
			}
		}
		if err != nil && !errors.Is(err, diskstore.ErrNoSpace) {
			fs.logf("%s: giving back preallocated blocks of inode %d: %v", fs.diskPath, owner, err)
		}
	}
	return fs.ds.FreeBytes() > before
}

// updateHeld is update with the retry after a checkpoint that frees the
// blocks held for it, and without the one after dropPreallocs.
func (fs *FS) updateHeld(fn func(tx *pram.Tx) error) error {
	if fs.ds == nil || !fs.a.Shadowed() {
		return fs.mapErr(fs.updateOnce(fn))
	}
	err := func() error {
		fs.ds.SetCheckpointRetry(true)
		defer fs.ds.SetCheckpointRetry(false) // also past a crash test's panic
		return fs.updateOnce(fn)
	}()
	if !errors.Is(err, diskstore.ErrSpaceHeld) {
		return fs.mapErr(err)
	}
	fs.checkpointForSpace()
	return fs.mapErr(fs.updateOnce(fn))
}

// checkpointForSpace makes the disk blocks held for the next checkpoint
// free (update). A failure is logged: the retry then takes them anyway.
func (fs *FS) checkpointForSpace() {
	held := fs.ds.HeldBlocks()
	if err := fs.updateOnce(fs.ds.PrepareForSpace); err != nil {
		fs.logf("%s: the disk is full: syncing it: %v", fs.diskPath, err)
	}
	if err := fs.a.Sync(); err != nil {
		fs.logf("%s: the disk is full, and the checkpoint that would free %d held blocks failed: %v", fs.diskPath, held, err)
	}
}

// updateOnce is update without the retry; its error is not mapped (update
// maps it).
func (fs *FS) updateOnce(fn func(tx *pram.Tx) error) (err error) {
	if fs.readOnly {
		return ErrReadOnly
	}
	if fs.a.Lost() != nil {
		return ErrIO // nothing touches a lost arena (lost.go)
	}
	tx := fs.a.Begin()
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if _, ok := r.(simulatedCrash); ok {
			panic(r)
		}
		if fs.NoteFault(r) {
			err = ErrIO // no Abort: its stores would fault too (lost.go)
			return
		}
		fs.abortTx(tx)
		if e, ok := r.(error); ok && errors.Is(e, pram.ErrTxFull) {
			fs.txFullLog(e)
			err = ErrIO
			return
		}
		fs.damageLog("operation aborted", r)
		err = ErrIO
	}()
	if err = fn(tx); err != nil {
		fs.abortTx(tx)
		return err
	}
	fs.commitTx(tx)
	return nil
}

// txFullLog logs an operation that outgrew the arena's journal, which is a
// bug of the operation's budget (what it checks of tx.Room()), not damage:
// the journal refuses a record before storing anything, and the rollback
// undid the rest, so the arena is as before the operation, which fails
// with EIO. Unlike damageLog it marks no full check due. The first one is
// logged with its stack.
func (fs *FS) txFullLog(err error) {
	msg := fmt.Sprintf("%s: an operation needed more than the arena's journal holds and was rolled back (the file system is consistent; please report it): %v", fs.a.Path(), err)
	if fs.stacked.CompareAndSwap(false, true) {
		msg += "\n" + string(debug.Stack())
	}
	fs.logf("%s", msg)
}

// commitTx commits tx, through the disk store when there is one (its
// volatile state follows the arena's transactions).
func (fs *FS) commitTx(tx *pram.Tx) {
	if fs.ds != nil {
		fs.ds.Commit(tx)
	} else {
		tx.Commit()
	}
	fs.lsizeUndo = fs.lsizeUndo[:0]
}

// abortTx rolls tx back with the volatile state changed in it.
func (fs *FS) abortTx(tx *pram.Tx) {
	if tx.Active() {
		if fs.ds != nil {
			fs.ds.Abort(tx)
		} else {
			tx.Abort()
		}
	}
	fs.undoLsize()
}

// guard turns a panic in a read-only operation (a damaged arena) into ErrIO.
func (fs *FS) guard(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if _, ok := r.(simulatedCrash); ok {
		panic(r)
	}
	if fs.NoteFault(r) {
		*err = ErrIO
		return
	}
	fs.damageLog("read operation failed", r)
	*err = ErrIO
}

// damageLog logs an operation that a panic stopped (a damaged arena, or a
// bug) in one line. An offset out of the arena's range is damage that the
// arena's bounds checks caught, which the line names; any other panic may be
// a bug, and the first of those is logged with its stack. (Every damaged
// read used to log the first with its stack, which looked like a crash of
// the daemon to an outside corruption test that grepped its log.)
func (fs *FS) damageLog(what string, r any) {
	fs.damaged.Store(true)
	if pram.OutOfRange(r) {
		fs.logf("%s: %s: the arena is damaged: %v (run `conquest fsck`)", fs.a.Path(), what, r)
		return
	}
	if fs.stacked.CompareAndSwap(false, true) {
		fs.logf("%s: %s: %v (run `conquest fsck`)\n%s", fs.a.Path(), what, r, debug.Stack())
		return
	}
	fs.logf("%s: %s: %v (run `conquest fsck`)", fs.a.Path(), what, r)
}

// mapErr translates errors of the layers below into the core's sentinels.
func (fs *FS) mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, alloc.ErrNoSpace), errors.Is(err, diskstore.ErrNoSpace):
		return ErrNoSpace
	case errors.Is(err, diskstore.ErrFileTooBig):
		return ErrFileTooBig
	case errors.Is(err, diskstore.ErrIO):
		fs.logf("%s: %v", fs.diskPath, err)
		return ErrIO
	case errors.Is(err, dirhash.ErrExists):
		return ErrExists
	case errors.Is(err, dirhash.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, dirhash.ErrNameTooLong):
		return ErrNameTooLong
	case errors.Is(err, dirhash.ErrBadName):
		return ErrInvalid
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return err
		}
	}
	what := "internal error" // a bug, as far as the layers below can tell
	for _, c := range []error{ErrCorrupt, alloc.ErrCorrupt, diskstore.ErrCorrupt, dirhash.ErrCorrupt, pram.ErrCorrupt} {
		if errors.Is(err, c) {
			what = "damaged" // a structure failed its checks: damage, not a bug
			break
		}
	}
	fs.logf("%s: %s: %v", fs.a.Path(), what, err)
	fs.damaged.Store(true) // damage, or a bug: either way, check it in full next time
	return ErrIO
}

var sentinels = []error{ErrNotFound, ErrExists, ErrNotDir, ErrIsDir, ErrNotEmpty, ErrNameTooLong,
	ErrNoSpace, ErrInvalid, ErrPerm, ErrAccess, ErrNoData, ErrRange, ErrFileTooBig, ErrTooManyLinks,
	ErrIO, ErrStale, ErrNotSupported, ErrBusy, ErrXattr2Big, ErrReadOnly, ErrNoSuchOffset}

// write runs fn as one mutating operation: exclusive lock, one transaction.
func (fs *FS) write(fn func(tx *pram.Tx, now Timespec) error) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return ErrIO
	}
	now := fs.now()
	return fs.update(func(tx *pram.Tx) error { return fn(tx, now) })
}

// read runs fn as one read-only operation under the shared lock.
func (fs *FS) read(fn func() error) (err error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	if fs.closed {
		return ErrIO
	}
	defer fs.guard(&err)
	return fs.mapErr(fn())
}

// checkName validates one path component for creation or lookup.
func checkName(name string) error {
	switch {
	case name == "" || containsSlashOrNul(name):
		return ErrInvalid
	case len(name) > MaxName:
		return ErrNameTooLong
	}
	return nil
}

func containsSlashOrNul(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' || s[i] == 0 {
			return true
		}
	}
	return false
}

func putU64(b []byte, v uint64) {
	_ = b[7]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	b[4], b[5], b[6], b[7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
}
