package diskstore

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Device is the one path of all disk I/O: a regular file, a block device, an
// in-memory disk, or a wrapper that injects faults or simulates a crash.
//
// ReadAt and WriteAt transfer all of p or return an error (a short transfer
// is an error, io.ErrUnexpectedEOF or io.ErrShortWrite if the device gave no
// other). Sync is an ordering point: when it returns, every write that
// completed before it was called is durable. Implementations are safe for
// concurrent use.
type Device interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Sync() error
	Size() int64
	Close() error
}

// DirectMode chooses whether OpenDevice uses O_DIRECT.
type DirectMode int

// Direct I/O choices.
const (
	// DirectAuto uses O_DIRECT on block devices and the page cache on
	// regular files. Why: on a block device the store already does its own
	// caching (readahead window, write gathering) in large block-aligned
	// requests, so the page cache would only hold a second copy and let the
	// kernel reorder and delay writes we then have to flush anyway. An image
	// file usually lives on a file system that is itself cached (and tmpfs
	// refuses O_DIRECT), and tests want cheap Syncs there.
	DirectAuto DirectMode = iota
	DirectOn              // always O_DIRECT (fails if the file system refuses it)
	DirectOff             // never O_DIRECT
)

// DeviceOptions tunes OpenDevice.
type DeviceOptions struct {
	Direct   DirectMode
	ReadOnly bool
}

// Alignment is the memory, offset and length alignment the direct-I/O path
// uses. It covers 512-byte and 4 KiB logical sectors.
const Alignment = 4096

// fileDevice is a Device on an *os.File: a regular file or a block device.
type fileDevice struct {
	f      *os.File
	path   string
	size   int64
	direct bool
	block  bool      // a block device (else a regular file)
	ro     bool      // opened read-only
	bounce sync.Pool // *[]byte of bounceSize, Alignment-aligned (direct only)
	// dr reads large aligned requests of an image file with O_DIRECT (nil
	// if f is direct already, or the file system refuses O_DIRECT): see
	// directReadMin.
	dr *os.File
	// prealloc: an image file on a file system that allocates its blocks
	// on demand (not tmpfs); see preallocate.
	prealloc atomic.Bool
	// allocated has a bit for each preallocChunk of the image that a
	// fallocate has allocated (the store gives space back to the image's
	// file system only at Open, before any allocation: see punch).
	allocated []atomic.Uint64
	noWiden   atomic.Bool  // a whole-chunk fallocate failed: allocate only ranges
	fallocs   atomic.Int64 // fallocate calls made (tests)
}

// preallocChunk is the unit in which preallocate allocates the image and
// remembers what it has allocated: random rewrites allocate a block at a
// time, and a fallocate call for each, almost always of space allocated
// long before, was 2.5 us of each 8 KiB random write.
const preallocChunk = 1 << 20

// directReadMin is the smallest aligned read of an image file that
// bypasses the page cache: readahead windows and other large reads. Cold
// reads through the page cache of the image file measured 360 MB/s here
// against 1.2-1.8 GB/s with O_DIRECT (the same 400 MiB, 8 MiB and 1 MiB
// requests), and the FUSE page cache keeps what a stream read. Smaller
// reads (one block: a random read, the old contents of a block rewritten in
// part) stay on the page cache, where recently written data still is: made
// direct too, with the image's clean pages dropped after each sync, they
// measured 4 KiB random reads 2.7x and writes 2.4x slower (fio, after a
// layout write). A direct read sees writes made through the page cache:
// the kernel writes back dirty pages of the range first.
const directReadMin = 256 << 10

const bounceSize = 1 << 20

// OpenDevice opens a regular file or a block device as a Device. See
// DirectMode for when O_DIRECT is used. Errors name the path.
func OpenDevice(path string, o DeviceOptions) (Device, error) {
	flags := os.O_RDWR
	if o.ReadOnly {
		flags = os.O_RDONLY
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	mode := st.Mode()
	isBlock := mode&os.ModeDevice != 0 && mode&os.ModeCharDevice == 0
	if !mode.IsRegular() && !isBlock {
		return nil, fmt.Errorf("%s: not a regular file or block device", path)
	}
	direct := o.Direct == DirectOn || (o.Direct == DirectAuto && isBlock)
	if direct {
		flags |= syscall.O_DIRECT
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		return nil, err
	}
	d := &fileDevice{f: f, path: path, direct: direct, block: isBlock, ro: o.ReadOnly}
	if isBlock {
		n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKGETSIZE64)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: reading device size: %w", path, err)
		}
		if ro, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKROGET); err == nil && ro != 0 && !o.ReadOnly {
			// A device set read-only (losetup -r, blockdev --setro) opens
			// for writing all the same and fails every write.
			f.Close()
			return nil, &os.PathError{Op: "open", Path: path, Err: unix.EROFS}
		}
		d.size = int64(n)
	} else {
		d.size = st.Size()
	}
	if !isBlock && !o.ReadOnly {
		var fs unix.Statfs_t
		d.prealloc.Store(unix.Fstatfs(int(f.Fd()), &fs) == nil && fs.Type != unix.TMPFS_MAGIC)
		if d.prealloc.Load() {
			chunks := (d.size + preallocChunk - 1) / preallocChunk
			d.allocated = make([]atomic.Uint64, (chunks+63)/64)
		}
	}
	if direct {
		d.bounce.New = func() any { b := AlignedBuffer(bounceSize); return &b }
	} else if o.Direct == DirectAuto && !isBlock {
		if dr, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0); err == nil {
			d.dr = dr // else (tmpfs: EINVAL) every read uses the page cache
		}
	}
	return d, nil
}

// CreateFile creates (or truncates) a sparse regular file of size bytes to
// serve as a disk image.
func CreateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if e := f.Close(); err == nil {
		err = e
	}
	return err
}

// AlignedBuffer returns a zeroed buffer of n bytes whose first byte is
// Alignment-aligned in memory, as O_DIRECT requires.
func AlignedBuffer(n int) []byte {
	b := make([]byte, n+Alignment)
	skip := 0
	if r := int(addr(b) % Alignment); r != 0 {
		skip = Alignment - r
	}
	return b[skip : skip+n : skip+n]
}

// addr is the address of b's first byte, for alignment checks only (reflect,
// because no package but pram imports unsafe).
func addr(b []byte) uintptr { return reflect.ValueOf(b).Pointer() }

func aligned(p []byte, off int64) bool {
	return off%Alignment == 0 && len(p)%Alignment == 0 && (len(p) == 0 || addr(p)%Alignment == 0)
}

func (d *fileDevice) Size() int64 { return d.size }

// pageCached reports that reads go through the kernel's page cache (no
// O_DIRECT): see PrefetchAuto.
func (d *fileDevice) pageCached() bool { return !d.direct && d.dr == nil }

// willNeed asks the kernel to read [off, off+n) into the page cache in the
// background (advisor; a hint: errors are ignored).
func (d *fileDevice) willNeed(off, n int64) {
	if !d.direct {
		_ = unix.Fadvise(int(d.f.Fd()), off, n, unix.FADV_WILLNEED)
	}
}

func (d *fileDevice) ReadAt(p []byte, off int64) (int, error) {
	if d.dr != nil && len(p) >= directReadMin && aligned(p, off) {
		n, err := d.dr.ReadAt(p, off)
		return n, fixShort(n, len(p), err, io.ErrUnexpectedEOF)
	}
	if !d.direct || aligned(p, off) {
		n, err := d.f.ReadAt(p, off)
		return n, fixShort(n, len(p), err, io.ErrUnexpectedEOF)
	}
	done := 0
	bp := d.bounce.Get().(*[]byte)
	defer d.bounce.Put(bp)
	for done < len(p) {
		pos := off + int64(done)
		start := pos &^ (Alignment - 1)
		end := min(start+bounceSize, (off+int64(len(p))+Alignment-1)&^(Alignment-1))
		buf := (*bp)[:end-start]
		if n, err := d.f.ReadAt(buf, start); n < len(buf) {
			return done, fixShort(n, len(buf), err, io.ErrUnexpectedEOF)
		}
		done += copy(p[done:], buf[pos-start:])
	}
	return done, nil
}

func (d *fileDevice) WriteAt(p []byte, off int64) (int, error) {
	if !d.direct || aligned(p, off) {
		n, err := d.f.WriteAt(p, off)
		return n, fixShort(n, len(p), err, io.ErrShortWrite)
	}
	// Unaligned direct write: read-modify-write of the aligned cover, in
	// bounce-sized pieces.
	done := 0
	bp := d.bounce.Get().(*[]byte)
	defer d.bounce.Put(bp)
	for done < len(p) {
		pos := off + int64(done)
		start := pos &^ (Alignment - 1)
		end := min(start+bounceSize, (off+int64(len(p))+Alignment-1)&^(Alignment-1))
		buf := (*bp)[:end-start]
		if pos != start || end > off+int64(len(p)) {
			if n, err := d.f.ReadAt(buf, start); n < len(buf) {
				return done, fixShort(n, len(buf), err, io.ErrUnexpectedEOF)
			}
		}
		k := copy(buf[pos-start:], p[done:])
		if n, err := d.f.WriteAt(buf, start); n < len(buf) {
			return done, fixShort(n, len(buf), err, io.ErrShortWrite)
		}
		done += k
	}
	return done, nil
}

// fixShort turns a short transfer without an error into short.
func fixShort(n, want int, err, short error) error {
	if n == want {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return short
	}
	return err
}

func (d *fileDevice) Sync() error {
	if err := unix.Fdatasync(int(d.f.Fd())); err != nil {
		return &os.PathError{Op: "fdatasync", Path: d.path, Err: err}
	}
	return nil
}

// preallocate allocates the image file's blocks under [off, off+n), which
// the store has just allocated to a file (fallocate; a block device, or an
// image on tmpfs, where it would only take memory early, does nothing).
// Writing into blocks of a sparse image makes its file system allocate
// them as the data comes, and that allocation contends with the writeback
// of what came before: 128 KiB pwrites into a sparse image measured 90-98
// us each while a sync and writeback ran, 17-20 us into an allocated one
// (1 GiB on ext4 here). A host file system that is full fails it with
// ENOSPC, before any data is written.
//
// It allocates the range first, then, as a best effort, the whole
// preallocChunks around it (within the image's size), and skips chunks it
// has allocated before. The range comes first because a fallocate that
// fails with ENOSPC keeps what it allocated before it ran out: a chunk
// tried first on a nearly full host could take the room the range needed.
// For the same reason chunks are allocated only while the host has
// widenMargin free beyond them, and after a failure only ranges are
// (noWiden).
func (d *fileDevice) preallocate(off, n int64) error {
	if !d.prealloc.Load() || n <= 0 {
		return nil
	}
	c0, c1 := off/preallocChunk, (off+n+preallocChunk-1)/preallocChunk
	for c0 < c1 && d.chunkAllocated(c0) {
		c0++
	}
	for c1 > c0 && d.chunkAllocated(c1-1) {
		c1--
	}
	if c0 == c1 {
		return nil
	}
	from, end := c0*preallocChunk, min(c1*preallocChunk, d.size)
	lo, hi := max(off, from), min(off+n, end) // the range, less allocated chunks
	if err := d.fallocate(lo, hi-lo); err != nil || !d.prealloc.Load() {
		return err
	}
	if lo != from || hi != end {
		if d.noWiden.Load() || !d.hostHasRoom(end-from) {
			return nil
		}
		if err := d.fallocate(from, end-from); err != nil {
			d.noWiden.Store(true) // most likely ENOSPC; the range is allocated
			return nil
		}
	}
	for c := c0; c < c1; c++ {
		d.allocated[c/64].Or(1 << (c % 64))
	}
	return nil
}

// widenMargin is the free space a host file system must keep beyond a
// chunk for preallocate to allocate the chunk (a variable for tests).
var widenMargin int64 = 64 << 20

// hostHasRoom reports whether the image's file system has n bytes free and
// widenMargin more.
func (d *fileDevice) hostHasRoom(n int64) bool {
	var st unix.Statfs_t
	if unix.Fstatfs(int(d.f.Fd()), &st) != nil {
		return false
	}
	return int64(st.Bavail)*st.Bsize >= n+widenMargin
}

// fallocate allocates [off, off+n) of the image. A file system that cannot
// turns preallocation off (and is no error).
func (d *fileDevice) fallocate(off, n int64) error {
	for {
		d.fallocs.Add(1)
		err := unix.Fallocate(int(d.f.Fd()), 0, off, n)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
			d.prealloc.Store(false) // the file system cannot: blocks come with the writes
			return nil
		}
		return &os.PathError{Op: "fallocate", Path: d.path, Err: err}
	}
}

// chunkAllocated reports whether chunk c of the image was preallocated.
func (d *fileDevice) chunkAllocated(c int64) bool {
	return c >= 0 && c/64 < int64(len(d.allocated)) && d.allocated[c/64].Load()&(1<<(c%64)) != 0
}

// preallocator is a device whose blocks are allocated on demand and can be
// allocated ahead of the writes (preallocate).
type preallocator interface {
	preallocate(off, n int64) error
}

// puncher is a device that can give the space of a range back to what
// holds it (Store.GiveBack).
type puncher interface {
	// punch deallocates [off, off+n): it reads as zeros afterwards. It
	// reports false, and no error, where the device cannot.
	punch(off, n int64) (bool, error)
	// hostBytes is the space the device takes where it is held.
	hostBytes() (int64, bool)
}

// punch punches a hole in an image file (FALLOC_FL_PUNCH_HOLE): the file
// system it is on gets the space back. Every range is punched, holes too:
// lseek SEEK_DATA would skip space that preallocate reserved and nothing
// wrote (ext4 and XFS report unwritten extents as holes, yet they take
// blocks), and a review saw ten 5 MiB files keep 81 MiB of the host that
// way; punching a hole again costs little. Not on a block device (a
// discard may read back as anything, and may cost more than it gives) or
// an image opened read-only. Chunks of the range count as not
// preallocated again.
func (d *fileDevice) punch(off, n int64) (bool, error) {
	if d.block || d.ro || n <= 0 {
		return false, nil
	}
	fd := int(d.f.Fd())
	for {
		err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOSYS):
			return false, nil
		case err != nil:
			return false, &os.PathError{Op: "fallocate (punch hole)", Path: d.path, Err: err}
		}
		for c := off / preallocChunk; c*preallocChunk < off+n && c/64 < int64(len(d.allocated)); c++ {
			d.allocated[c/64].And(^(1 << (c % 64)))
		}
		return true, nil
	}
}

// hostBytes is the space the image file takes on its file system
// (st_blocks); false for a block device.
func (d *fileDevice) hostBytes() (int64, bool) {
	var st unix.Stat_t
	if d.block || unix.Fstat(int(d.f.Fd()), &st) != nil {
		return 0, false
	}
	return st.Blocks * 512, true
}

// startWriteback starts writing the file's dirty pages to the disk and
// does not wait (sync_file_range SYNC_FILE_RANGE_WRITE; a hint: errors are
// ignored, the next Sync reports them).
func (d *fileDevice) startWriteback() {
	if !d.direct {
		_ = unix.SyncFileRange(int(d.f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
	}
}

func (d *fileDevice) Close() error {
	if d.dr != nil {
		d.dr.Close()
	}
	return d.f.Close()
}

// String names the device for messages.
func (d *fileDevice) String() string {
	if d.direct {
		return d.path + " (O_DIRECT)"
	}
	return d.path
}
