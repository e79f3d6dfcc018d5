package pram

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// RAM copies of an image whose file system came back with another device
// number.
//
// A RAM copy is named after the image file's device and inode numbers
// (imageKey), so that a copy of an image, which has the same UUID, never
// takes the other's RAM copy. But a file system's device number is not
// fixed: a loop-mounted file system mounted again may come up on another
// loop device, and a FUSE file system (another Conquest, say) gets a new
// number at each mount. After a crash of the daemon, the image's file
// system unmounted and mounted again, the next Open would not find the RAM
// copy under the new name, and would start from the image's last
// checkpoint: what the copy held that the image lacked (every change made
// since that checkpoint, all returned to their callers) would be lost, and
// the orphaned copy would hold its memory until the next boot. An outside
// review saw exactly that, with the image on an ext4 mounted again on
// another loop device, and on a Conquest mounted again.
//
// So each RAM copy has a record beside it (its name and imageSuffix),
// written when the copy is made or reused and again after every
// checkpoint: the image's path as /proc/self/fd shows it (absolute,
// symbolic links resolved), its identity (inode number and birth time),
// and what its superblock then said of its history (last checkpoint, mount
// count). An Open that finds no copy under its name looks for copies of
// the same UUID under other names whose record names this very image file:
// that file's device number changed, and its copy is taken (renamed to the
// new name), then judged as any copy is (reuseShadow). A copy of the image
// elsewhere never matches, since the path leads to the original, or to
// nothing, and its identity is another.
// Nor is a copy taken whose name carries this file system's own device
// number (it was made for another file here, whose path was since given
// to this one: an image renamed, a copy put in its place), nor one that a
// live process has as its arena (openShadow locks its copy, and the lock
// goes with the process). A record's path that leads nowhere now (the
// image renamed) still names the image when the identity it kept has a
// birth time and is the image's; and a copy whose record says its image
// had a later checkpoint, or another mount count, is not taken: the image
// is a block-level copy (a backup, a snapshot) of the one it was made for.
// What is not found so: an image renamed on a file system that keeps no
// birth time, or with another file put at its old path, and a block
// device that came back under another device number (a loop device
// attached anew: its copy is left as before).

// imageSuffix names the record of the image's path beside a RAM copy.
const imageSuffix = ".image"

// removeShadowFiles removes the RAM copy at name and its record.
func removeShadowFiles(name string) error {
	os.Remove(name + imageSuffix)
	return os.Remove(name)
}

// imagePath is the path of the open image f as the kernel names it, or ""
// if it has none (deleted).
func imagePath(f *os.File) string {
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil || !filepath.IsAbs(p) || strings.HasSuffix(p, " (deleted)") {
		return ""
	}
	return p
}

// recordImage writes (or rewrites) the record beside the RAM copy at name
// of the image f: its path, its identity (fileID), and the state the image
// is known to hold (written at Open, then after each checkpoint): st.seq,
// the sequence number of its last checkpoint, and st.mounts, its mount
// counter, which every writable open that starts from the image (not from
// this copy) moves on. A copy without a record is found only under its own
// name, as before records existed, so an error is logged, not returned.
func recordImage(name string, f *os.File, st imageState, logf func(string, ...any)) {
	p := imagePath(f)
	if p == "" {
		os.Remove(name + imageSuffix)
		return
	}
	rec := name + imageSuffix
	text := p + "\n"
	if id := fileID(f); id != "" {
		text += "id " + id + "\n"
	}
	text += "seq " + strconv.FormatUint(st.seq, 10) + "\n"
	text += "mounts " + strconv.FormatUint(st.mounts, 10) + "\n"
	// Through a temporary file and a rename: a kill in the middle must
	// not leave a torn path that some other file may answer to.
	tmp := rec + ".tmp"
	err := writeNew(tmp, []byte(text))
	if err == nil {
		err = os.Rename(tmp, rec)
		if st, lerr := os.Lstat(rec); err != nil && lerr == nil && st.IsDir() && os.Remove(rec) == nil {
			// An empty directory at the record's name, which a rename
			// cannot replace (every checkpoint logged that): no record.
			err = os.Rename(tmp, rec)
		}
	}
	if err != nil {
		os.Remove(tmp)
		logf("pram: cannot record the image of the RAM copy %s: %v", name, err)
	}
}

// fileID is what identifies the open file f across a remount of its file
// system, beside its path: its inode number and, where the file system
// keeps one, its birth time. A copy of the image put at the same path (on
// another file system mounted there while the image's is away) has others.
func fileID(f *os.File) string {
	var sx unix.Statx_t
	if unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_INO|unix.STATX_BTIME, &sx) != nil {
		return ""
	}
	id := strconv.FormatUint(sx.Ino, 10)
	if sx.Mask&unix.STATX_BTIME != 0 {
		id += fmt.Sprintf(" %d.%09d", sx.Btime.Sec, sx.Btime.Nsec)
	}
	return id
}

// imageState is what an image's superblock says of its history: the
// sequence number of its last checkpoint and its mount counter.
type imageState struct{ seq, mounts uint64 }

// record is a RAM copy's record of its image (recordImage). Records
// written before identities or states were kept lack them.
type record struct {
	path      string
	id        string // fileID, or ""
	seq       uint64 // the image's last known checkpoint, if hasSeq
	mounts    uint64 // the image's mount counter then, if hasMounts
	hasSeq    bool
	hasMounts bool
}

// parseRecord reads a record: the path on its first line, then "id ..."
// and "seq N" lines.
func parseRecord(b []byte) record {
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	r := record{path: lines[0]}
	for _, l := range lines[1:] {
		if v, ok := strings.CutPrefix(l, "id "); ok {
			r.id = v
		} else if v, ok := strings.CutPrefix(l, "seq "); ok {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				r.seq, r.hasSeq = n, true
			}
		} else if v, ok := strings.CutPrefix(l, "mounts "); ok {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				r.mounts, r.hasMounts = n, true
			}
		}
	}
	return r
}

// names reports whether the record names the file open as f: its path
// leads to f, and the identity it kept (if any) is f's. A path that leads
// nowhere now (the image renamed while it was open, and the daemon killed
// before a checkpoint rewrote the record) is let go when the identity is
// a strong one, with a birth time: another file, even a copy of the
// image, has another.
func (r record) names(f *os.File) bool {
	id := fileID(f)
	if r.id != "" && r.id != id {
		return false
	}
	if sameFile(r.path, f) {
		return true
	}
	var st unix.Stat_t
	return r.id != "" && strings.Contains(r.id, " ") && errors.Is(unix.Stat(r.path, &st), unix.ENOENT)
}

// otherState says why an image whose superblock says st is not the one
// the record's copy was last checkpointed to ("" if it may be), whatever
// its path and identity say: a block-level copy of it (a backup, a
// snapshot) brought back in its place. Such a copy is older than the
// copy's last checkpoint; once it has been mounted itself, its mount
// counter has moved on. Taking the RAM copy would put the newer arena
// over the copy's older disk.
//
// Unless the copy at path itself says the image's state (the same last
// checkpoint and mount count in its superblock): then it holds nothing
// the image lacks but what came after that checkpoint. That is the case
// of a kill in the moment between a checkpoint that reached the image and
// the record's rewrite after it (the first checkpoint of a mount moves
// the mount count on), which an outside review saw once in 78 kills: the
// copy, set aside for good, held its tmpfs pages until the next boot.
func (r record) otherState(st imageState, path string) string {
	if cs, ok := copyState(path); ok && cs == st {
		return ""
	}
	switch {
	case r.hasSeq && st.seq < r.seq:
		return fmt.Sprintf("its image held checkpoint %d, newer than this image's %d (a copy or a restored backup of it?)", r.seq, st.seq)
	case r.hasMounts && st.mounts != r.mounts:
		return fmt.Sprintf("its image had been mounted %d times, this one %d (a copy or a restored backup of it, mounted since?)", r.mounts, st.mounts)
	}
	return ""
}

// lockCopy takes the lock that marks the RAM copy open as f as a live
// process's arena. A daemon that just died may hold it a moment longer
// than the image's lock (the kernel closes a dead process's files one by
// one), so a refusal is tried again for a while before it counts.
//
// The caller holds the image's lock, so waiting is safe; a dead daemon's
// large mapping may take a while to be torn down. A file system without
// flock (ENOLCK) locks nothing, as before copies were locked.
func lockCopy(f *os.File) error {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

// copyInUse reports whether a live process has the RAM copy at path as its
// arena (the lock openShadow takes on it).
func copyInUse(path string) bool {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return false
	}
	defer f.Close() // drops the lock taken here
	return errors.Is(unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK)
}

// shadowDev is the device number in the name of the RAM copy at path
// ("<uuid>-<dev>-<ino>[-aside...].arena"), if it has one.
func shadowDev(path string) (uint64, bool) {
	b := filepath.Base(path)
	if len(b) < 33 || b[32] != '-' {
		return 0, false
	}
	d, _, ok := strings.Cut(b[33:], "-")
	if !ok {
		return 0, false
	}
	dev, err := strconv.ParseUint(d, 16, 64)
	return dev, err == nil
}

// sameFile reports whether path names the file open as f.
func sameFile(path string, f *os.File) bool {
	var st, ours unix.Stat_t
	if unix.Stat(path, &st) != nil || unix.Fstat(int(f.Fd()), &ours) != nil {
		return false
	}
	return st.Dev == ours.Dev && st.Ino == ours.Ino && st.Mode&unix.S_IFMT == ours.Mode&unix.S_IFMT
}

// adoptMovedShadow looks, when no RAM copy is at name, for copies of the
// arena uuid in dir made for the image file f under an earlier device
// number, and renames the newest (by checkpoint sequence) to name; older
// ones are removed (a later state of the same image supersedes them). It
// reports what it did ("" when nothing).
//
// A copy at name whose record names another file that holds this arena
// (a copy of this image, same UUID, whose file system had this device
// number before) is that image's: it is moved aside under another name,
// where its own image finds it by its record, instead of being taken for
// this image's newest state.
func adoptMovedShadow(dir string, uuid [16]byte, name string, f *os.File, st imageState) (string, error) {
	var ours unix.Stat_t
	if unix.Fstat(int(f.Fd()), &ours) != nil || ours.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", nil
	}
	var did string
	if _, err := os.Lstat(name); err == nil {
		b, err := readRecord(name + imageSuffix)
		if err != nil {
			return "", nil
		}
		r := parseRecord(b)
		rec := r.path
		var rst unix.Stat_t
		other := r.otherState(st, name)
		if other != "" {
			// Not this copy's image, whatever else agrees: set aside.
		} else if sameFile(rec, f) || !holdsArena(rec, uuid) || unix.Stat(rec, &rst) != nil || rst.Dev == ours.Dev {
			// Ours; or its image was renamed, and something else (or
			// nothing) took its old path: it is taken as before. A file
			// on this very file system that holds the arena (a copy put
			// where the renamed image was) never had this image's
			// device and inode numbers: the copy is this image's.
			return "", nil
		}
		if copyInUse(name) {
			return "", nil // reuseShadow's lock refuses it
		}
		aside := strings.TrimSuffix(name, ".arena") + fmt.Sprintf("-aside%x.arena", time.Now().UnixNano())
		if err := os.Rename(name, aside); err != nil {
			return "", fmt.Errorf("moving aside the RAM copy %s, made for %s: %w", name, rec, err)
		}
		if err := os.Rename(name+imageSuffix, aside+imageSuffix); err != nil {
			did = fmt.Sprintf("could not move its record (%v), so its image will not find it; ", err)
		}
		why := "under this image's device and inode numbers"
		if other != "" {
			why = "but " + other
		}
		did = fmt.Sprintf("moved aside the RAM copy %s, made for %s %s, as %s; ", name, rec, why, aside) + did
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	ms, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("%x-*.arena", uuid)))
	var best string
	var bestSeq uint64
	var older []string
	for _, m := range ms {
		b, err := readRecord(m + imageSuffix)
		if err != nil || m == name {
			continue
		}
		r := parseRecord(b)
		if !r.names(f) {
			continue
		}
		if other := r.otherState(st, m); other != "" {
			did += fmt.Sprintf("left alone the RAM copy %s, made for this image's path and identity, but %s; ", m, other)
			continue
		}
		// A copy named with this file system's own device number was
		// made for another file on it (the record's path was since
		// given to this one), not for this one under an earlier number
		// (a copy moved aside keeps the number of whoever set it aside:
		// its record alone decides); and a copy a live process maps is
		// that process's arena.
		aside := strings.Contains(filepath.Base(m), "-aside")
		if dev, ok := shadowDev(m); !ok || dev == ours.Dev && !aside || copyInUse(m) {
			continue
		}
		cs, ok := copyState(m)
		seq := cs.seq
		switch {
		case !ok:
			older = append(older, m)
		case best == "" || seq > bestSeq:
			if best != "" {
				older = append(older, best)
			}
			best, bestSeq = m, seq
		default:
			older = append(older, m)
		}
	}
	for _, m := range older {
		removeShadowFiles(m)
	}
	if best == "" {
		return strings.TrimSuffix(did, "; "), nil
	}
	if err := os.Rename(best, name); err != nil {
		return "", fmt.Errorf("taking the RAM copy %s, made before the image's file system changed its device number: %w", best, err)
	}
	os.Rename(best+imageSuffix, name+imageSuffix)
	return did + fmt.Sprintf("took the RAM copy %s, made when the image's file system had another device number (mounted again since), as %s", best, name), nil
}

// copyState reads what the superblock of the RAM copy at path says of its
// history.
func copyState(path string) (imageState, bool) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return imageState{}, false
	}
	defer f.Close()
	b := make([]byte, offCkptSeq+8)
	if _, err := f.ReadAt(b, 0); err != nil {
		return imageState{}, false
	}
	return imageState{seq: binary.LittleEndian.Uint64(b[offCkptSeq:]), mounts: binary.LittleEndian.Uint64(b[offMounts:])}, true
}

// holdsArena reports whether the file at path holds an arena with this
// UUID (a superblock's UUID field; nothing more is checked).
func holdsArena(path string, uuid [16]byte) bool {
	// Only a regular file, opened without blocking: a record may name a
	// path that is now a FIFO (whose open would wait for a writer).
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	var u [16]byte
	if _, err := f.ReadAt(u[:], offUUID); err != nil {
		return false
	}
	return u == uuid
}
