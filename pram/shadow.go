package pram

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	mmap "github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"
)

// Shadowed arenas: power-loss safety for an image file on a disk, or an
// arena on a block device.
//
// A shared mapping of a file on a disk is written back by the kernel on its
// own schedule, a page at a time and in any order, so after a power loss
// the image holds some pages of the last transactions and not others: the
// undo journal, itself a few of those pages, cannot repair that. So an
// image file that lives on a disk is not mapped itself. Open copies it into
// a file on tmpfs (the RAM copy, in /dev/shm by default), maps that, and
// from then on the image changes only through checkpoints (checkpoint.go),
// each of which moves it from one consistent state to the next through a
// checkpoint slot (slot.go): a power loss leaves the state of the last
// checkpoint that was synced, never a mix.
//
// The RAM copy survives the process: after kill -9 (or a panic), the next
// Open finds it, newer than the image, and uses it as the arena, so every
// operation that returned survives a crash of the daemon, as with an arena
// mapped in place; the undo journal then rolls back the transaction the
// crash interrupted, in the RAM copy, and the pages where the copy differs
// from the image are marked for the next checkpoint. After a power loss
// (or a reboot after such a crash) there is no RAM copy: Open applies the
// checkpoint the loss may have interrupted and loads the image again.
// Close makes a last checkpoint and removes the RAM copy.
//
// Checkpoints happen at Sync and Persist (fsync, sync, unmount), every
// OpenOptions.Interval (1 s by default) when something changed, and
// in the background whenever the changed pages reach a quarter of the
// backpressure limit (limitPages: 1/8 of the arena, 32 to 256 MiB), so a
// power loss loses at most the last few seconds, and nothing that was
// fsync'd.
//
// A block device is mapped through the page cache like a file, with the
// same risk, so it is shadowed too; it cannot grow, so mkfs leaves room
// for the slots after the arena (DeviceArenaSize), and its slots, which
// hold 1/8 of the arena or more, set a lower limit (slot.go).
//
// Not shadowed (mapped in place, as before): an image on tmpfs or ramfs
// (lost at a power loss anyway, and a second RAM copy would double the
// memory), device-DAX (persistent memory), a block device formatted
// without room for the slots (an older mkfs), OpenOptions.InPlace, and an
// image whose RAM copy cannot be made (no shadow directory, or a tmpfs with
// less room than the arena: shadowRoom); Arena.Shadow says why.

// ShadowDirEnv names the environment variable that sets the directory of
// RAM copies (tests give each run its own).
const ShadowDirEnv = "CONQUEST_SHADOW_DIR"

// DefaultShadowDir is the directory of RAM copies for the user uid when
// neither OpenOptions.ShadowDir nor $CONQUEST_SHADOW_DIR is set.
func DefaultShadowDir(uid int) string { return fmt.Sprintf("/dev/shm/conquest-%d", uid) }

func shadowDir(dir string) string {
	if dir != "" {
		return dir
	}
	if d := os.Getenv(ShadowDirEnv); d != "" {
		return d
	}
	return DefaultShadowDir(os.Geteuid())
}

// ensureShadowDir creates dir (mode 0700) if needed and checks that it is a
// directory of this user that nobody else can write to: the RAM copies hold
// the whole file system.
func ensureShadowDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to uid %d", dir, st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by others (mode %#o)", dir, st.Mode&0o777)
	}
	return nil
}

// imageKey is the "dev-ino" of the image file (for a block device, "b" and
// its device number): with the UUID it names the RAM copy, so that a copy
// of an image (same UUID) never takes another's.
func imageKey(f *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		// The device itself, whichever node names it.
		return fmt.Sprintf("b%x", st.Rdev), nil
	}
	return fmt.Sprintf("%x-%x", st.Dev, st.Ino), nil
}

func shadowName(dir string, uuid [16]byte, key string) string {
	return filepath.Join(dir, fmt.Sprintf("%x-%s.arena", uuid, key))
}

// onRAM reports whether f lives on tmpfs or ramfs.
func onRAM(f *os.File) bool {
	var st unix.Statfs_t
	if unix.Fstatfs(int(f.Fd()), &st) != nil {
		return false
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}

// openShadow sets the arena up as a shadowed one: it finishes the
// checkpoint a power loss interrupted, then maps the RAM copy, reusing the
// one a crashed process left or loading the image into a new one. It
// returns a reason, not an error, when the arena should be mapped in place
// instead. On return with neither, a.m and a.sh are set.
// Preconditions: a.f is open and locked, a.geo validated from img.
func (a *Arena) openShadow(img ImageFile, slots slotArea, o OpenOptions) (inPlace string, err error) {
	g := a.geo
	page := make([]byte, PageSize)
	if _, err := img.ReadAt(page, 0); err != nil {
		return "", err
	}
	maxSeq, applied, err := recoverSlots(img, g, slots, binary.LittleEndian.Uint64(page[offCkptSeq:]))
	if err != nil {
		return "", err
	}
	if applied {
		// The superblock may be the checkpoint's too.
		if _, err := img.ReadAt(page, 0); err != nil {
			return "", err
		}
		if a.geo, err = Validate(page, 0); err != nil {
			return "", err
		}
		a.recoveredCkpt = true
	}
	dir := shadowDir(o.ShadowDir)
	if err := ensureShadowDir(dir); err != nil {
		return fmt.Sprintf("no directory for the RAM copy: %v", err), nil
	}
	key, err := imageKey(a.f)
	if err != nil {
		return "", err
	}
	name := shadowName(dir, g.UUID, key)
	removeOtherShadows(dir, key, name, a.f)
	sh := &shadow{path: name, img: img, slots: slots, logf: o.Logf, onCommit: o.OnCheckpoint,
		limit: limitPages(g.Size), interval: o.Interval}
	if slots.fixed {
		// A device's slots hold less than the arena: checkpoints stay
		// well within one (see commitParts).
		sh.limit = min(sh.limit, max(int64(slots.pages/8), 1))
	}
	if sh.logf == nil {
		sh.logf = func(string, ...any) {}
	}
	if sh.interval == 0 {
		sh.interval = DefaultCheckpointInterval
	}
	sh.kickAt = max(sh.limit/4, 1)
	pages := g.Size / PageSize
	sh.cur.Store(newDirtySet(pages))
	sh.spare = newDirtySet(pages)

	imageSeq := binary.LittleEndian.Uint64(page[offCkptSeq:])
	imageSt := imageState{seq: imageSeq, mounts: binary.LittleEndian.Uint64(page[offMounts:])}
	if did, err := adoptMovedShadow(dir, g.UUID, name, a.f, imageSt); err != nil {
		return "", err
	} else if did != "" {
		sh.logf("pram: %s: %s", a.path, did)
	}
	f, reuse, why := reuseShadow(name, g, imageSeq)
	if why != "" {
		sh.logf("pram: %s: not using the RAM copy %s: %s", a.path, name, why)
	}
	if !reuse {
		removeShadowFiles(name)
		if why := shadowRoom(dir, g.Size); why != "" {
			return why, nil
		}
		// A new copy is loaded under another name and takes its own only
		// when the whole image is in it: a copy cut short by a kill during
		// the load must never be reused as the arena's newest state.
		sh.path = name + loadingSuffix
		os.Remove(sh.path)
		f, err = os.OpenFile(sh.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Sprintf("cannot create the RAM copy %s: %v", sh.path, err), nil
		}
		if err := f.Truncate(int64(g.Size)); err != nil {
			f.Close()
			os.Remove(sh.path)
			return fmt.Sprintf("cannot size the RAM copy %s: %v", sh.path, err), nil
		}
	}
	// The copy is this process's arena from here on: other opens (of a
	// copy of this image, whose record may lead to this path) leave it
	// alone (copyInUse). The lock goes with the process.
	if err := lockCopy(f); err != nil {
		f.Close()
		if reuse {
			return "", fmt.Errorf("the RAM copy %s is in use by another process: %w", name, err)
		}
		os.Remove(sh.path)
		return fmt.Sprintf("cannot lock the RAM copy %s: %v", sh.path, err), nil
	}
	m, err := mmap.MapRegion(f, int(g.Size), mmap.RDWR, 0, 0)
	if err != nil {
		f.Close()
		if reuse {
			// The copy holds committed changes the image lacks: mapping
			// the image in place would lose them, and a later Open would
			// reuse the copy over whatever that session committed.
			return "", fmt.Errorf("cannot map the RAM copy %s, which holds changes the image lacks: %w", sh.path, err)
		}
		os.Remove(sh.path)
		return fmt.Sprintf("cannot map the RAM copy %s: %v", sh.path, err), nil
	}
	sh.f = f
	a.m, a.sh = m, sh
	if reuse {
		sh.reused = true
		if err := a.markDifferences(); err != nil {
			a.dropShadow(false)
			return "", err
		}
		recordImage(name, a.f, imageSt, sh.logf)
	} else {
		sh.loaded = true
		if why, err := a.loadImage(loadEndOf(page, g.UUID)); err != nil || why != "" {
			a.dropShadow(true)
			return why, err
		}
		recordImage(name, a.f, imageSt, sh.logf)
		if err := os.Rename(sh.path, name); err != nil {
			a.dropShadow(true)
			os.Remove(name + imageSuffix)
			return "", fmt.Errorf("naming the RAM copy %s: %w", name, err)
		}
		sh.path = name
	}
	sh.seq = max(maxSeq, a.U64(offCkptSeq))
	if err := a.ensureTail(); err != nil {
		a.dropShadow(!reuse)
		return "", err
	}
	return "", nil
}

// shadowRoom says why the file system of dir cannot take a new RAM copy of
// an arena of size bytes, or "" if it can. The copy is sparse and grows as
// the arena fills; on a tmpfs smaller than the arena (a container's 64 MiB
// /dev/shm) the arena would fail with ENOSPC long before it is full, while
// df shows it mostly free. Such an arena is mapped in place instead, as
// before RAM copies existed, and says why. (Other RAM copies on the same
// tmpfs may still take the room later: Reserve makes that ENOSPC.)
func shadowRoom(dir string, size uint64) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "" // the create reports its own error
	}
	if free := st.Bavail * uint64(st.Bsize); free < size {
		return fmt.Sprintf("%s has %d MiB free, less than the arena's %d MiB: give it room, or set %s to a tmpfs that has it",
			dir, free>>20, size>>20, ShadowDirEnv)
	}
	return ""
}

// reuseShadow opens the RAM copy at name if it is the newest state of the
// arena g: left by a process of this boot that crashed, for this image,
// at least as new as the image's last checkpoint. Otherwise it says why
// not ("" when there is none).
func reuseShadow(name string, g Geometry, imageSeq uint64) (*os.File, bool, string) {
	f, err := openRegular(name, os.O_RDWR)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, ""
		}
		return nil, false, err.Error()
	}
	page := make([]byte, PageSize)
	st, err := f.Stat()
	if err == nil {
		_, err = f.ReadAt(page, 0)
	}
	var why string
	cg, verr := validateStatic(page, KindFile, 0)
	boot := bootID()
	switch {
	case err != nil:
		why = err.Error()
	case uint64(st.Size()) != g.Size:
		why = fmt.Sprintf("it has %d bytes, the arena %d", st.Size(), g.Size)
	case verr != nil:
		why = verr.Error()
	case cg.UUID != g.UUID:
		why = "it is another arena's"
	case boot != ([16]byte{}) && !bytes.Equal(page[offBoot:offBoot+16], make([]byte, 16)) &&
		!bytes.Equal(page[offBoot:offBoot+16], boot[:]):
		// Only a shadow directory on a disk outlives a boot, and after a
		// system crash its copy may be torn as an image mapped in place
		// would be: what survived is the image's last checkpoint.
		why = "it was made before the last boot"
	case binary.LittleEndian.Uint64(page[offCkptSeq:]) < imageSeq:
		why = "the image is newer"
	}
	if why != "" {
		f.Close()
		return nil, false, why
	}
	return f, true, ""
}

// loadingSuffix names a RAM copy whose load has not finished.
const loadingSuffix = ".loading"

// removeOtherShadows removes RAM copies of the same image file made for an
// arena formatted there before (another UUID), and copies whose load a
// kill cut short: they can never be used. A copy under the same name whose
// record (shadow_moved.go) names another image, or a path that leads
// nowhere now, is kept: device numbers are reused, so it may be another
// image's, whose file system is away or came back under another number.
func removeOtherShadows(dir, key, keep string, f *os.File) {
	ms, _ := filepath.Glob(filepath.Join(dir, "*-"+key+".arena"))
	for _, m := range ms {
		if m == keep {
			continue
		}
		if b, err := readRecord(m + imageSuffix); err == nil && !parseRecord(b).names(f) {
			continue
		}
		if copyInUse(m) {
			continue
		}
		removeShadowFiles(m)
	}
	os.Remove(keep + loadingSuffix)
}

// dataRanges returns the ranges of fd below end that hold data
// (SEEK_DATA/SEEK_HOLE), or [0, end) where the file system cannot tell.
func dataRanges(fd int, end int64) [][2]int64 {
	var rs [][2]int64
	for off := int64(0); off < end; {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			if errors.Is(err, unix.ENXIO) {
				break // no data past off
			}
			return [][2]int64{{0, end}}
		}
		if d >= end {
			break
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil {
			return [][2]int64{{0, end}}
		}
		h = min(h, end)
		rs = append(rs, [2]int64{d &^ (PageSize - 1), h})
		off = h
	}
	return rs
}

// loadCheck is the word that vouches for a load end: a store that damaged
// the superblock's dynamic part (which no checksum covers) must not make a
// load skip most of the arena.
func loadCheck(end uint64, uuid [16]byte) uint64 {
	return ^end ^ binary.LittleEndian.Uint64(uuid[:]) ^ 0x4c4f4144454e4431 // "LOADEND1"
}

// loadEndOf is the load end recorded in the superblock page, or 0 (all of
// the arena) when none is, or its check word does not match.
func loadEndOf(page []byte, uuid [16]byte) uint64 {
	end := binary.LittleEndian.Uint64(page[offLoadEnd:])
	if end == 0 || binary.LittleEndian.Uint64(page[offLoadCheck:]) != loadCheck(end, uuid) {
		return 0
	}
	return end
}

// loadImage copies the arena part of the image into the new RAM copy.
// A file's holes are skipped (SEEK_DATA). A block device has none, so it
// reads [0, loadEnd) only, the image superblock's offLoadEnd, when that is
// known: past it the device holds zeros (shadow.hw).
func (a *Arena) loadImage(loadEnd uint64) (inPlace string, err error) {
	size := int64(a.geo.Size)
	rs := dataRanges(int(a.f.Fd()), size)
	if a.sh.slots.fixed && loadEnd != 0 && loadEnd < uint64(size) && loadEnd%PageSize == 0 {
		rs = [][2]int64{{0, int64(loadEnd)}}
	}
	var end int64
	if len(rs) > 0 {
		end = rs[len(rs)-1][1]
	}
	if err := a.Reserve(uint64(end)); err != nil {
		if errors.Is(err, ErrNoSpace) {
			return fmt.Sprintf("no room for the RAM copy %s: %v", a.sh.path, err), nil
		}
		return "", err
	}
	// Through a buffer, copying only pages that are not zeros: the RAM
	// copy's pages are zeros already, and most of an arena often is.
	const chunk = 1 << 20
	buf := make([]byte, chunk)
	for _, r := range rs {
		for off := r[0]; off < r[1]; off += chunk {
			n := min(chunk, r[1]-off)
			b := buf[:n]
			if _, err := a.sh.img.ReadAt(b, off); err != nil {
				return "", fmt.Errorf("%s: reading the image: %w", a.path, err)
			}
			for p := int64(0); p < n; p += PageSize {
				q := min(p+PageSize, n)
				if !isZero(b[p:q]) {
					copy(a.m[off+p:off+q], b[p:q])
					a.sh.raiseHW(uint64(off+q+PageSize-1) / PageSize)
				}
			}
		}
	}
	a.sh.img.Drop(0, size)
	return "", nil
}

var zeroPage [PageSize]byte

func isZero(b []byte) bool { return bytes.Equal(b, zeroPage[:len(b)]) }

// markDifferences marks the pages where a reused RAM copy differs from the
// image: what the crashed process changed after its last checkpoint.
func (a *Arena) markDifferences() error {
	size := int64(a.geo.Size)
	const chunk = 1 << 20
	buf := make([]byte, chunk)
	d := a.sh.cur.Load()
	for _, r := range dataRanges(int(a.sh.f.Fd()), size) {
		for off := r[0]; off < r[1]; off += chunk {
			n := min(chunk, r[1]-off)
			b := buf[:n]
			if _, err := a.sh.img.ReadAt(b, off); err != nil {
				return fmt.Errorf("%s: reading the image: %w", a.path, err)
			}
			for p := int64(0); p < n; p += PageSize {
				q := min(p+PageSize, n)
				if !bytes.Equal(b[p:q], a.m[off+p:off+q]) {
					d.mark(uint64(off+p)/PageSize, uint64(off+p)/PageSize)
				}
			}
		}
	}
	// Reserve what the copy holds (and the image the same).
	if rs := dataRanges(int(a.sh.f.Fd()), size); len(rs) > 0 {
		a.sh.raiseHW(uint64(rs[len(rs)-1][1]+PageSize-1) / PageSize)
		if err := a.Reserve(uint64(rs[len(rs)-1][1])); err != nil {
			return err
		}
	}
	a.sh.img.Drop(0, size)
	return nil
}

// ensureTail makes room for the checkpoint slots after the arena in the
// image file (images made without them get them now), and gives the slots
// blocks for the usual checkpoint, so that a checkpoint seldom needs space
// the file system may not have.
func (a *Arena) ensureTail() error {
	sh := a.sh
	if sh.slots.fixed {
		return nil // a device's slots are there already
	}
	size := a.geo.Size
	want := int64(size + TailLen(size))
	cur, err := sh.img.Size()
	if err != nil {
		return err
	}
	if cur < want {
		if err := sh.img.Truncate(want); err != nil {
			return fmt.Errorf("adding checkpoint slots: %w", err) // err names the path
		}
	}
	usual := int64(min(PageSize+slotIndexLen(uint64(sh.limit))+2*uint64(sh.limit)*PageSize, slotCap(size)))
	for i := uint64(0); i < 2; i++ {
		if err := sh.img.Allocate(sh.slots.off(i), usual); err != nil &&
			!errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			// A fallocate that fails for lack of space keeps what it
			// allocated: the image's file system was left full, and the
			// disk image (sparse, on it too) had no room for large files.
			// What this slot holds is not needed (recoverSlots applied
			// it), so its blocks go back: checkpoints then take space as
			// they write, and a full file system fails them instead.
			if r, ok := sh.img.(releaser); ok {
				if rerr := r.Release(sh.slots.off(i), usual); rerr != nil {
					err = fmt.Errorf("%w; giving the blocks back: %v", err, rerr)
				}
			}
			sh.logf("pram: %s: reserving room for checkpoints: %v (a checkpoint takes the room it needs when it writes)", a.path, err)
			break
		}
	}
	return nil
}

// dropSlots cuts the checkpoint slots off a closed image once its last
// checkpoint is durable in place (Close): an image at rest is just the
// arena. On a device, whose slots stay, it clears their headers instead.
// A crash before the cut leaves slots no newer than the image, which the
// next Open applies again to the same effect.
func (sh *shadow) dropSlots(size uint64) error {
	if err := sh.img.Sync(); err != nil {
		return fmt.Errorf("syncing the image: %w", err)
	}
	if sh.slots.fixed {
		for i := uint64(0); i < 2; i++ {
			if _, err := sh.img.WriteAt(zeroPage[:], sh.slots.off(i)); err != nil {
				return fmt.Errorf("clearing checkpoint slot %d: %w", i, err)
			}
		}
		if err := sh.img.Sync(); err != nil {
			return fmt.Errorf("clearing the checkpoint slots: %w", err)
		}
		return nil
	}
	if err := sh.img.Truncate(int64(size)); err != nil {
		return fmt.Errorf("removing the checkpoint slots: %w", err)
	}
	return nil
}

// dropShadow undoes openShadow's mapping (remove: also the RAM copy).
func (a *Arena) dropShadow(remove bool) {
	if a.m != nil {
		a.m.Unmap()
		a.m = nil
	}
	if sh := a.sh; sh != nil {
		sh.f.Close()
		if remove {
			removeShadowFiles(sh.path)
		}
	}
	a.sh = nil
	a.res = reservation{}
}

// RemoveShadow removes the RAM copy of the arena in the image at path, if
// there is one: what a power loss would do to it. dir is the shadow
// directory ("" for the default). Tests use it to simulate a power loss
// after killing the process that had the arena open.
func RemoveShadow(path, dir string) error {
	name, err := ShadowPath(path, dir)
	if err != nil {
		return err
	}
	if err := removeShadowFiles(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// ShadowPath is the path of the RAM copy of the arena in the image at path
// (which need not exist), for `conquest stat` and tests.
func ShadowPath(path, dir string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0) // a FIFO's open would wait
	if err != nil {
		return "", err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Mode()&(os.ModeNamedPipe|os.ModeSocket|os.ModeDir) != 0 {
		return "", fmt.Errorf("%s: not a regular file, device-DAX or block device", path)
	}
	var uuid [16]byte
	if _, err := f.ReadAt(uuid[:], offUUID); err != nil {
		return "", fmt.Errorf("%s: reading the superblock: %w", path, err)
	}
	key, err := imageKey(f)
	if err != nil {
		return "", err
	}
	return shadowName(shadowDir(dir), uuid, key), nil
}
