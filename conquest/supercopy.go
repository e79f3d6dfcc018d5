package conquest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"

	farm "github.com/dgryski/go-farm"
	"golang.org/x/sys/unix"

	"conquest/diskstore"
	"conquest/pram"
)

// A copy of the arena superblock's static part in the heap.
//
// Page 0 keeps the superblock's static part (magic, geometry, UUID,
// parameters) and a copy of it, so one damaged page, a zeroed or
// overwritten page 0, lost both and with them every file, although
// everything the static part says follows from elsewhere or was never
// changed since mkfs. So the heap keeps a third copy: a record of
// superCopySize bytes (a magic, the static part, a farm hash of both) that
// root slot 11 points at, written by mkfs and by the first writable Open of
// an arena made before it existed. The walk checks it (reachable, equal to
// page 0's static part; none at all is an older arena, not damage), and
// the repair writes it again.
//
// When page 0 is lost, root slot 11 is lost with it, so FindSuperCopy
// scans the image for the record's magic. A candidate counts when its hash
// and the static part's own checksum pass and the static part fits the
// image; copies that disagree (another arena's superblock kept in a file,
// an older format of the same device) are told apart by the disk's UUID
// when there is a disk, else nothing is chosen. RestoreSuperFromCopy then
// writes the static part back (pram.WriteStatic); the root slots the page
// lost are mended by the repairs that already mend each of them (the heap's
// from the geometry, the root directory's and the disk's records found by
// their magic, the counters from the walk).

const (
	slotSuperCopy = 11 // the copy of the superblock's static part (0: none yet)

	superCopyMagic = "CONQSCP1"
	superCopySize  = 8 + pram.StaticLen + 8
)

// superCopyRecord is the record that keeps static.
func superCopyRecord(static []byte) []byte {
	b := make([]byte, superCopySize)
	copy(b, superCopyMagic)
	copy(b[8:], static)
	binary.LittleEndian.PutUint64(b[8+pram.StaticLen:], farm.Hash64(b[:8+pram.StaticLen]))
	return b
}

// superCopyState says whether root slot 11 holds no copy (off 0: an arena
// made before it existed), a sound one, or a damaged one (with why); held
// says that off is an allocation of the record's size, so a damaged copy
// can be written again in place.
func (fs *FS) superCopyState() (off pram.Off, sound, held bool, why string) {
	off = pram.Off(fs.a.Root(slotSuperCopy))
	if off == 0 {
		return 0, false, false, ""
	}
	if !fs.a.InHeap(off, superCopySize) || off%8 != 0 {
		return off, false, false, fmt.Sprintf("root slot %d points outside the heap (%#x)", slotSuperCopy, off)
	}
	if sz, err := fs.h.SizeOf(off); err != nil || sz != fs.h.ClassSize(superCopySize) {
		return off, false, false, fmt.Sprintf("root slot %d points at %#x, which is no allocation of %d bytes", slotSuperCopy, off, superCopySize)
	}
	if !bytes.Equal(fs.a.Bytes(off, superCopySize), superCopyRecord(fs.a.StaticPart())) {
		return off, false, true, fmt.Sprintf("the copy of the superblock at %#x differs from the superblock", off)
	}
	return off, true, true, ""
}

// writeSuperCopy allocates the copy's record through tx, fills it from the
// superblock and points root slot 11 at it.
func (fs *FS) writeSuperCopy(tx *pram.Tx) error {
	off, err := fs.h.AllocZero(tx, superCopySize)
	if err != nil {
		return err
	}
	tx.SetBytes(off, superCopyRecord(fs.a.StaticPart()))
	tx.Set64(pram.RootOff(slotSuperCopy), uint64(off))
	return nil
}

// superCopy is the walk's check of root slot 11: it marks the record, and
// reports (for the repair to write it again) a copy that is damaged. It
// runs after everything else is marked: an allocation that something else
// reaches is that thing's, not the copy's, whatever slot 11 says. (An
// outside review: a build older than the copy took it for a leak, its
// fsck --repair freed it, and a small file got the 160 bytes; this repair
// then wrote the copy again in place, over the file's data. Now slot 11 is
// pointed at a new copy, and the file keeps its bytes.)
func (ck *checker) superCopy() {
	fs := ck.fs
	off, sound, held, why := fs.superCopyState()
	if held && ck.c.Marked(off) {
		sound, held = false, false
		why = fmt.Sprintf("root slot %d points at %#x, which something else holds", slotSuperCopy, off)
	}
	if held {
		ck.c.Mark(off, "copy of the superblock")
	}
	if off != 0 && !sound {
		ck.errorf("%s", why)
		ck.badSuperCopy(off, held, why)
	}
}

// badSuperCopy: the copy of the superblock is damaged. It is written again
// in place when off is its allocation, else a new one is made (the old
// record, if it is one, is then reached from nowhere and freed by the next
// pass).
func (ck *checker) badSuperCopy(off pram.Off, held bool, why string) {
	if ck.fd == nil {
		return
	}
	fs := ck.fs
	ck.fd.add(phaseCounters, finding{
		key: "super copy", where: "file system", problem: why,
		apply: func(tx *pram.Tx) (string, error) {
			if held {
				tx.SetBytes(off, superCopyRecord(fs.a.StaticPart()))
				return "wrote the copy of the superblock again", nil
			}
			if err := fs.writeSuperCopy(tx); err != nil {
				return "", err
			}
			return "wrote a new copy of the superblock", nil
		},
	})
}

// FindSuperCopy scans the arena image at pramPath for the copy of its
// superblock's static part that the heap keeps, for `conquest fsck
// --repair` when both copies in page 0 are damaged. diskPath, if not "",
// is the arena's disk: its superblock's UUID picks the copy when copies
// disagree. It returns the static part, or an error wrapping ErrCorrupt
// when no sound copy, or more than one, is found.
func FindSuperCopy(pramPath, diskPath string) ([]byte, error) {
	return FindSuperCopyWithin(pramPath, diskPath, 0)
}

// ErrNoSuperCopy: FindSuperCopy found no sound copy of the superblock (an
// arena made before the copy existed, or not a Conquest arena at all).
var ErrNoSuperCopy = fmt.Errorf("%w: no copy of the superblock found in the image", ErrCorrupt)

// FindSuperCopyWithin is FindSuperCopy over the image's first limit bytes
// (0: all of it), for a refusal that only names the way out: mkfs puts the
// copy near the start of the heap.
func FindSuperCopyWithin(pramPath, diskPath string, limit int64) ([]byte, error) {
	var uuid *[16]byte
	if diskPath != "" {
		if dev, err := diskstore.OpenDevice(diskPath, diskstore.DeviceOptions{ReadOnly: true}); err == nil {
			if sup, err := diskstore.ReadSuper(dev); err == nil {
				uuid = &sup.UUID
			}
			dev.Close()
		}
	}
	f, err := os.OpenFile(pramPath, os.O_RDONLY|unix.O_NONBLOCK, 0) // a FIFO's open would wait
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Mode()&(os.ModeNamedPipe|os.ModeSocket|os.ModeDir) != 0 {
		return nil, fmt.Errorf("%s: not a regular file, device-DAX or block device", pramPath)
	}
	var found [][]byte
	seen := func(static []byte) bool {
		for _, s := range found {
			if bytes.Equal(s, static) {
				return true
			}
		}
		return false
	}
	const chunk = 4 << 20
	buf := make([]byte, chunk+superCopySize)
	for pos := int64(pram.PageSize); limit == 0 || pos < limit; pos += chunk {
		n, err := f.ReadAt(buf, pos)
		if n < superCopySize {
			break // the end, or an image that cannot be read so (device-DAX): judged on what was read
		}
		for i := 0; i+superCopySize <= n && i < chunk; i += 8 {
			if string(buf[i:i+8]) != superCopyMagic {
				continue
			}
			rec := buf[i : i+superCopySize]
			if binary.LittleEndian.Uint64(rec[8+pram.StaticLen:]) != farm.Hash64(rec[:8+pram.StaticLen]) {
				continue
			}
			static := bytes.Clone(rec[8 : 8+pram.StaticLen])
			g, err := pram.CheckStatic(pramPath, static)
			if err != nil || uint64(pos)+uint64(i) < uint64(g.HeapOff) || (uuid != nil && g.UUID != *uuid) {
				continue
			}
			if !seen(static) {
				found = append(found, static)
			}
		}
		if err != nil {
			break
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%s: %w", pramPath, ErrNoSuperCopy)
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("%s: %w: %d copies of a superblock that disagree found in the image (give its --disk to choose)", pramPath, ErrCorrupt, len(found))
}

// RestoreSuperFromCopy writes the copy FindSuperCopy finds over the arena
// superblock's static part and its copy in page 0 (pram.WriteStatic), and
// returns the UUID it restored.
func RestoreSuperFromCopy(pramPath, diskPath string) (string, error) {
	static, err := FindSuperCopy(pramPath, diskPath)
	if err != nil {
		return "", err
	}
	g, err := pram.CheckStatic(pramPath, static)
	if err != nil {
		return "", err
	}
	wrote, err := pram.WriteStatic(pramPath, static)
	if err != nil {
		return "", err
	}
	if !wrote {
		return "", fmt.Errorf("%s: the superblock is sound: nothing to restore", pramPath)
	}
	return g.UUIDString(), nil
}
