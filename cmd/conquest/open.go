package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"conquest/alloc"
	"conquest/conquest"
	"conquest/diskstore"
	"conquest/pram"
)

// openImages opens im's file system. When an image cannot be opened for
// writing (a read-only file, device or file system, an immutable file) and
// readOnlyOK is set (fsck without --repair, df, stat, mount --read-only),
// it opens the file system read-only instead (conquest.Options.ReadOnly:
// nothing is written to either image) and calls note with why.
func openImages(im images, o conquest.Options, readOnlyOK bool, note func(string)) (*conquest.FS, error) {
	fsys, err := coreOpen(im, o)
	if err == nil || !readOnlyOK || !cannotWrite(err) {
		return fsys, err
	}
	o.ReadOnly = true
	fsys, rerr := coreOpen(im, o)
	if rerr != nil {
		return nil, rerr
	}
	note(fmt.Sprintf("%v: opened read-only (nothing is written to the images)", err))
	return fsys, nil
}

// checkWritable reports why path (or, if it does not exist, its directory)
// cannot be written, or nil. A block device set read-only counts as not
// writable (Linux opens it for writing all the same).
func checkWritable(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		dir := filepath.Dir(path)
		if err := unix.Access(dir, unix.W_OK); err != nil {
			return &os.PathError{Op: "create in", Path: dir, Err: err}
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0 && pram.ReadOnlyDevice(f) {
		return &os.PathError{Op: "open", Path: path, Err: syscall.EROFS}
	}
	return nil
}

// cannotWrite reports whether err is an image's refusal to be opened for
// writing.
func cannotWrite(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission)
}

// explainOpen turns an error from opening im into a message that says what
// to do. The core's errors already name the path.
func explainOpen(im images, err error) error {
	var crash *conquest.CrashDamageError
	switch {
	case errors.Is(err, pram.ErrLocked):
		if mi, ok := mountOf(im.pram); ok {
			return fmt.Errorf("%s: arena is in use: it is mounted on %s (unmount it with `conquest umount %s`)", im.pram, mi.Dir, mi.Dir)
		}
		// No mount names it: a copy of the mount in another namespace
		// (elsewhere.go), another command (fsck, df), or a daemon whose
		// mount was detached (umount -l) and still serves the files open
		// on it.
		if held := arenaMountedElsewhere(im.pram, 1); len(held) > 0 {
			return fmt.Errorf("%s: arena is in use: mounted in another mount namespace, where %s (unmount it there: `nsenter -t %d -m umount %s`)", im.pram, held[0], held[0].pid, held[0].dir)
		}
		return fmt.Errorf("%s: arena is in use by another process, though no mount shows it: a conquest command running on it, or a daemon whose mount was detached (umount -l) that exits when the last file open on it closes", im.pram)
	case errors.Is(err, pram.ErrNeedsRecovery):
		return fmt.Errorf("%w: make the images writable and mount the file system (or run `conquest fsck`) once to recover it", err)
	case cannotWrite(err):
		if open, lerr := pram.LeftOpen(im.pram); lerr == nil && open {
			return fmt.Errorf("%w: the image cannot be opened for writing, and the file system was not unmounted cleanly: make the images writable and mount it (or run `conquest fsck`) once to recover it", err)
		}
		return fmt.Errorf("%w: the image cannot be opened for writing; `conquest mount --read-only` (`-o ro` in fstab), `conquest fsck` without --repair, `df` and `stat` open it read-only", err)
	case errors.Is(err, fs.ErrNotExist):
		if what, perr := probe(im.pram); perr == nil && strings.HasPrefix(what, "a Conquest arena") {
			// Only the disk is missing: formatting the pair would lose
			// every file of the arena (mkfs --force was the advice).
			return fmt.Errorf("%w: the arena %s holds a file system whose large files are on a disk image; give --disk the disk it was formatted with (formatting the pair anew would lose every file)", err, im.pram)
		}
		if !exists(im.pram) && diskKept(im) {
			return arenaLost(im, err)
		}
		return fmt.Errorf("%w (format it with `conquest mkfs --pram %s --disk %s`)", err, im.pram, im.disk)
	case errors.Is(err, pram.ErrSuperBackup), errors.Is(err, diskstore.ErrSuperBackup):
		return fmt.Errorf("%w; the image is damaged: refusing to use it until then (`conquest fsck --repair --pram %s --disk %s`)", err, im.pram, im.disk)
	case errors.Is(err, pram.ErrJournal):
		return fmt.Errorf("%w: refusing to use the image until `conquest fsck --repair --pram %s --disk %s` empties the journal (rolling nothing back)", err, im.pram, im.disk)
	case (errors.Is(err, pram.ErrNotConquest) || errors.Is(err, pram.ErrChecksum)) && superCopyFound(im):
		return fmt.Errorf("%w: the superblock and its copy in the same page are damaged, and the heap keeps another copy: `conquest fsck --repair --pram %s --disk %s` writes it back (`conquest mkfs` would format the images anew, losing every file)", err, im.pram, im.disk)
	case errors.Is(err, pram.ErrNotConquest):
		// mkfs is the way out only for an image that holds nothing of
		// value: a disk given as the arena, or another file system, would
		// be lost to it.
		what := holdsOther(im.pram, "a Conquest arena")
		switch {
		case strings.HasPrefix(what, "a Conquest disk") && strings.HasPrefix(holdsOther(im.disk, "a Conquest disk"), "a Conquest arena"):
			return fmt.Errorf("%w: it holds a Conquest disk, and %s the arena: --pram and --disk are swapped (give --pram %s --disk %s)", err, im.disk, im.disk, im.pram)
		case strings.HasPrefix(what, "a Conquest disk"):
			return fmt.Errorf("%w: it holds a Conquest disk, not an arena: were --pram and --disk swapped? (--pram names the arena, --disk the large-file disk)", err)
		case what != "":
			return fmt.Errorf("%w: it holds %s; refusing to use it (is --pram the right path?)", err, what)
		case diskKept(im):
			return arenaLost(im, err)
		}
		return fmt.Errorf("%w (format it with `conquest mkfs`)", err)
	case errors.Is(err, diskstore.ErrUUIDMismatch):
		return fmt.Errorf("%w: %s and %s were not formatted together; refusing to mount a mismatched pair", err, im.pram, im.disk)
	case errors.Is(err, diskstore.ErrNotConquestDisk) && holdsOther(im.disk, "a Conquest disk") != "":
		// An arena, or another file system: no damage fsck could repair.
		return fmt.Errorf("%w: it holds %s; refusing to use it (is --disk the right path?)", err, holdsOther(im.disk, "a Conquest disk"))
	case errors.Is(err, diskstore.ErrNotConquestDisk):
		// Not "format the pair": a wrong --disk, or a disk whose first
		// block was overwritten, would lose the arena's files to mkfs.
		return fmt.Errorf("%w: not the disk formatted with this arena, or both copies of its superblock (its first 4 KiB) are damaged; refusing to use it (if they were damaged, `conquest fsck --repair` rebuilds the superblock from the arena once the disk's data verifies against it; `conquest mkfs` would format both images anew, losing every file)", err)
	case errors.Is(err, alloc.ErrNoHeap):
		return fmt.Errorf("%w: mkfs did not finish formatting it (interrupted?), so it holds no files; `conquest mkfs --force --pram %s --disk %s` formats the pair again", err, im.pram, im.disk)
	case errors.As(err, &crash):
		return fmt.Errorf("%w; refusing to mount it: run `conquest fsck --repair --pram %s --disk %s`", err, im.pram, im.disk)
	case errors.As(err, new(*diskstore.ShortDeviceError)):
		return fmt.Errorf("%w: the disk is shorter than its superblock says (an image file cut short?); refusing to use it (`conquest fsck --repair --pram %s --disk %s` grows an image file back: the lost part reads as zeros, and data that was there fails its checksums)", err, im.pram, im.disk)
	case missingRecord(err) != nil:
		return fmt.Errorf("%w: the disk's %s is lost; refusing to use the pair until `conquest fsck --repair --pram %s --disk %s` lays a new one", err, missingRecord(err).What, im.pram, im.disk)
	case errors.Is(err, syscall.EFBIG) && fileSizeLimit() > 0 && fileSizeLimit() < imagesNeed(im):
		return fmt.Errorf("%w: this process may write files of at most %s (ulimit -f); refusing to use the images under that limit", err, formatSize(fileSizeLimit()))
	case errors.Is(err, syscall.ENOMEM) && addressSpaceShort(arenaSize(im.pram)):
		return fmt.Errorf("%w: this process may map at most %s of address space (ulimit -v), and the arena alone takes %s; raise the limit (ulimit -v unlimited)", err, formatSize(addressSpaceLimit()), formatSize(arenaSize(im.pram)))
	case errors.Is(err, pram.ErrSizeMismatch) && isRegular(im.pram):
		return fmt.Errorf("%w: the image file was cut short or grown; refusing to use it (`conquest fsck --repair --pram %s --disk %s` gives it its length back)", err, im.pram, im.disk)
	case isDamage(err):
		return fmt.Errorf("%w: the image is damaged; refusing to use it", err)
	case errors.Is(err, pram.ErrVersion), errors.Is(err, pram.ErrSizeMismatch), errors.Is(err, pram.ErrTooSmall):
		return fmt.Errorf("%w: refusing to use it", err)
	}
	return err
}

// missingRecord is err's *diskstore.MissingRecordError, if it has one: the
// disk's free map or stats record is lost, and `conquest fsck --repair`
// lays a new one (conquest.NewDiskFreeMap, NewDiskStats).
func missingRecord(err error) *diskstore.MissingRecordError {
	me, _ := errors.AsType[*diskstore.MissingRecordError](err)
	return me
}

// superCopyFound reports whether the arena image keeps a copy of its
// superblock in its heap (conquest.FindSuperCopy) within the first 256 MiB,
// where mkfs puts it: its superblock is then damaged, not foreign.
func superCopyFound(im images) bool {
	_, err := conquest.FindSuperCopyWithin(im.pram, im.disk, 256<<20)
	return err == nil
}

// isRegular reports whether path is a regular file (not a device).
func isRegular(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// diskKept reports whether im's disk holds a Conquest disk (while its arena
// is missing or holds nothing Conquest can read).
func diskKept(im images) bool {
	return strings.HasPrefix(holdsOther(im.disk, "-"), "a Conquest disk")
}

// arenaLost explains err, the refusal of an arena that is missing or holds
// nothing recognisable, beside a disk that holds a Conquest disk: `mkfs`,
// the advice for a new pair, would lose the disk's files too. The arenas
// formatted with that disk that lie beside it (findArenasOf) are named;
// and an arena path that holds data is never named to mkfs --force, which
// would overwrite whatever file it is (an outside review).
func arenaLost(im images, err error) error {
	found, complete := findArenasOf(im)
	switch {
	case len(found) == 1:
		return fmt.Errorf("%w, though %s holds a Conquest disk, formatted with the arena %s: refusing to use it (is --pram the right path? give --pram %s --disk %s)", err, im.disk, found[0].path, found[0].path, im.disk)
	case len(found) > 1:
		var list []string
		for _, a := range found {
			list = append(list, fmt.Sprintf("%s (modified %s)", a.path, a.mtime.Format("2006-01-02 15:04:05")))
		}
		return fmt.Errorf("%w, though %s holds a Conquest disk: refusing to use it (is --pram the right path? %d arenas formatted with that disk lie beside it, copies of one another: %s; give --pram the one last used with this disk: an older copy lacks what changed since)", err, im.disk, len(found), strings.Join(list, ", "))
	}
	searched := "No arena formatted with that disk was found beside it."
	if !complete {
		searched = fmt.Sprintf("No arena formatted with that disk was found among the first %d files beside it.", arenaSearchMax)
	}
	if what, perr := probe(im.pram); perr == nil && what != "" {
		return fmt.Errorf("%w, though %s holds a Conquest disk: refusing to use it (is --pram the right path? %s If its arena is lost, so are its files, whose metadata lived only there: restore the arena image from a backup; formatting a new pair with `conquest mkfs` would lose the disk's data)", err, im.disk, searched)
	}
	return fmt.Errorf("%w, though %s holds a Conquest disk: refusing to use it (is --pram the right path? If that disk's arena is lost, so are its files, whose metadata lived only there: restore the arena image from a backup; `conquest mkfs --force --pram %s --disk %s` would format both anew, losing the disk's data)", err, im.disk, im.pram, im.disk)
}

// foundArena is an arena findArenasOf found.
type foundArena struct {
	path  string
	mtime time.Time
}

// findArenasOf looks for the arenas formatted with im's disk (the same
// UUID in both superblocks: the arena, and any copies of it) among the
// regular files in the disk's directory, the arena path's and the data
// directory, and returns them, the last modified first. It reads only
// superblocks, of at most arenaSearchMax files of an arena's least size or
// more in all; complete is false if it stopped there.
func findArenasOf(im images) (found []foundArena, complete bool) {
	uuid, ok := diskUUID(im.disk)
	if !ok {
		return nil, true
	}
	seen := map[string]bool{}
	dirs := []string{filepath.Dir(im.disk), filepath.Dir(im.pram)}
	if d, err := dataDir(); err == nil {
		dirs = append(dirs, d)
	}
	read := 0
	for _, dir := range dirs {
		dir, err := filepath.Abs(dir)
		if err != nil || seen[dir] {
			continue
		}
		seen[dir] = true
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			info, err := e.Info()
			if err != nil || info.Size() < pram.MinSize {
				continue
			}
			path := filepath.Join(dir, e.Name())
			if sameImage(path, im.pram) || sameImage(path, im.disk) {
				continue
			}
			if read == arenaSearchMax {
				return sortArenas(found), false
			}
			read++
			if g, err := pram.ReadGeometry(path); err == nil && g.UUID == uuid {
				found = append(found, foundArena{path, info.ModTime()})
			}
		}
	}
	return sortArenas(found), true
}

// sortArenas puts the last modified first.
func sortArenas(as []foundArena) []foundArena {
	slices.SortStableFunc(as, func(a, b foundArena) int { return b.mtime.Compare(a.mtime) })
	return as
}

// arenaSearchMax bounds the superblocks findArenasOf reads.
const arenaSearchMax = 1000

// diskUUID is the UUID in the superblock of the Conquest disk at path.
func diskUUID(path string) ([16]byte, bool) {
	dev, err := diskstore.OpenDevice(path, diskstore.DeviceOptions{ReadOnly: true})
	if err != nil {
		return [16]byte{}, false
	}
	defer dev.Close()
	sup, err := diskstore.ReadSuper(dev)
	if err != nil {
		return [16]byte{}, false
	}
	return sup.UUID, true
}

// imagesNeed is the longest file the images may grow to: the arena image
// with its checkpoint slots, or the disk image (0 if neither can be read).
func imagesNeed(im images) uint64 {
	var need uint64
	if g, err := pram.ReadGeometry(im.pram); err == nil {
		need = g.Size + pram.TailLen(g.Size)
	}
	if st, err := os.Stat(im.disk); err == nil && st.Mode().IsRegular() {
		need = max(need, uint64(st.Size()))
	}
	return need
}
