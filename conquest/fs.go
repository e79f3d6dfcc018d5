package conquest

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"conquest/alloc"
	"conquest/dirhash"
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
	noAtime bool

	vol volatile // kernel refs, open counts, handles

	closed bool // protected by mu
}

// Mkfs formats pramPath as an empty Conquest file system: a pram arena, the
// allocator, and a root directory. diskPath must be "" until diskstore is
// integrated.
func Mkfs(pramPath, diskPath string, o MkfsOptions) error {
	if diskPath != "" {
		return fmt.Errorf("%s: %w: large-file disk not supported yet", diskPath, ErrNotSupported)
	}
	var params [pram.NumParams]uint64
	params[0] = o.LargeFileThreshold
	a, err := pram.Format(pramPath, pram.Options{Size: o.PramSize, JournalLen: o.JournalLen, Params: params})
	if err != nil {
		return err
	}
	fs := &FS{a: a, logf: func(string, ...any) {}, now: wallClock}
	err = fs.update(func(tx *pram.Tx) error {
		h, err := alloc.Format(tx)
		if err != nil {
			return err
		}
		fs.h = h
		mode := o.RootMode & 0o7777
		if mode == 0 {
			mode = 0o755
		}
		root, err := fs.newInode(tx, inode{}, S_IFDIR|mode, 0, Cred{Uid: o.RootUid, Gid: o.RootGid}, fs.now())
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
		return nil
	})
	if err != nil {
		a.Abandon()
		return fmt.Errorf("%s: mkfs: %w", pramPath, err)
	}
	return a.Close()
}

// Open opens the file system in pramPath: the arena is mapped (an
// interrupted transaction is rolled back), the allocator and the root are
// validated, and every orphan left by a crash is freed.
func Open(pramPath, diskPath string, o Options) (*FS, error) {
	if diskPath != "" {
		return nil, fmt.Errorf("%s: %w: large-file disk not supported yet", diskPath, ErrNotSupported)
	}
	a, err := pram.Open(pramPath)
	if err != nil {
		return nil, err
	}
	fs := &FS{a: a, logf: o.Logf, now: o.Now, noAtime: o.NoAtime}
	if fs.logf == nil {
		fs.logf = func(string, ...any) {}
	}
	if fs.now == nil {
		fs.now = wallClock
	}
	fs.vol.init()
	if n := a.Recovered(); n > 0 {
		fs.logf("%s: recovered %d journal records", pramPath, n)
	}
	if fs.h, err = alloc.Open(a); err != nil {
		a.Close()
		return nil, fmt.Errorf("%s: %w", pramPath, err)
	}
	if err := fs.checkRoot(); err != nil {
		a.Close()
		return nil, fmt.Errorf("%s: %w", pramPath, err)
	}
	fs.mu.Lock()
	n, err := fs.reapOrphansLocked()
	fs.mu.Unlock()
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("%s: processing orphans: %w", pramPath, err)
	}
	if n > 0 {
		fs.logf("%s: freed %d orphans", pramPath, n)
	}
	return fs, nil
}

// checkRoot validates the root inode at Open.
func (fs *FS) checkRoot() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: root inode: %v", ErrCorrupt, r)
		}
	}()
	root, err := fs.inode(RootIno)
	if err != nil {
		return fmt.Errorf("%w: root inode: %v", ErrCorrupt, err)
	}
	if !root.isDir() || root.data() == 0 {
		return fmt.Errorf("%w: root inode is not a directory", ErrCorrupt)
	}
	return nil
}

// Close frees the orphans (nothing is open any more), marks the arena clean
// and unmaps it. The FS must not be used afterwards.
func (fs *FS) Close() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return nil
	}
	fs.closed = true
	fs.vol.reset()
	if _, err := fs.reapOrphansLocked(); err != nil {
		fs.logf("%s: freeing orphans at close: %v", fs.a.Path(), err)
	}
	return fs.a.Close()
}

// Arena is the underlying arena (for tools such as `conquest stat`).
func (fs *FS) Arena() *pram.Arena { return fs.a }

// Heap is the underlying allocator.
func (fs *FS) Heap() *alloc.Heap { return fs.h }

func wallClock() Timespec {
	t := time.Now()
	return Timespec{Sec: t.Unix(), Nsec: uint32(t.Nanosecond())}
}

// simulatedCrash is the panic value crash tests raise from the store hook;
// the operation wrappers let it through untouched (no Abort), as kill -9.
type simulatedCrash struct{}

// update runs fn in one transaction: Commit if it returns nil, Abort if it
// returns an error or panics (a panic becomes ErrIO and is logged).
// Preconditions: fs.mu held exclusively (or fs not yet shared).
func (fs *FS) update(fn func(tx *pram.Tx) error) (err error) {
	tx := fs.a.Begin()
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if _, ok := r.(simulatedCrash); ok {
			panic(r)
		}
		if tx.Active() {
			tx.Abort()
		}
		fs.logf("%s: operation aborted: %v\n%s", fs.a.Path(), r, debug.Stack())
		err = ErrIO
	}()
	if err = fn(tx); err != nil {
		tx.Abort()
		return fs.mapErr(err)
	}
	tx.Commit()
	return nil
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
	fs.logf("%s: read operation failed: %v\n%s", fs.a.Path(), r, debug.Stack())
	*err = ErrIO
}

// mapErr translates errors of the layers below into the core's sentinels.
func (fs *FS) mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, alloc.ErrNoSpace):
		return ErrNoSpace
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
	fs.logf("%s: internal error: %v", fs.a.Path(), err)
	return ErrIO
}

var sentinels = []error{ErrNotFound, ErrExists, ErrNotDir, ErrIsDir, ErrNotEmpty, ErrNameTooLong,
	ErrNoSpace, ErrInvalid, ErrPerm, ErrAccess, ErrNoData, ErrRange, ErrFileTooBig, ErrTooManyLinks,
	ErrIO, ErrStale, ErrNotSupported, ErrBusy, ErrXattr2Big}

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
