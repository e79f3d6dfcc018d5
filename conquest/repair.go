package conquest

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"conquest/alloc"
	"conquest/dirhash"
	"conquest/diskstore"
	"conquest/pram"
)

// Repair (`conquest fsck --repair`) fixes what the consistency walk can
// fix, each fix in its own transaction so that a crash during repair leaves
// a file system at least as consistent as before:
//
//   - first the allocator's own records: page-map entries with stray fields,
//     a damaged page count or kind, non-zero reserved header words, then (once
//     the map is sound) its lists, links and counters, rebuilt from the map
//     (alloc.Heap.RebuildLists, outside the journal); until these are right
//     the walk judges every allocation by wrong sizes;
//  0. a directory whose table is damaged is rebuilt from the entries that
//     can still be read and trusted (dirhash.Salvage); what it loses, the
//     later groups name in /lost+found;
//  1. directory entries naming something that is not a live inode (a bad
//     offset, a freed record, a wrong magic), entries with an invalid name
//     and second names of a directory are removed; entries of the wrong
//     type get the inode's type;
//  2. inodes no directory names and not on the orphan list are given the
//     name "#<ino>" in /lost+found (created, mode 0700, if missing) rather
//     than deleted; a removed directory left unfreed is freed;
//     then, on a trustworthy walk that reached every file's blocks, the
//     disk store's free map, quarantine and list of files with unsynced
//     blocks, if damaged, are rebuilt from the files
//     (diskstore.Checker.RebuildLists), before anything frees disk blocks;
//  3. link counts are set to the counted names (files) or 2 + the
//     subdirectories (directories), ".." pointers to the directory that
//     names the directory, stray orphan flags are cleared;
//     a large file's damaged list of unsynced records is emptied, and its
//     damaged list of segments or checksum pages too with ZeroBadBlocks;
//  4. arena allocations nothing reaches (leaks) are freed (a leaked segment
//     list with its disk blocks) — only when the walk found no damage that
//     could hide a reference to them;
//  5. then, on the same condition and once no arena allocation is leaked,
//     disk blocks neither free nor used by a file are returned to the free
//     map, a range per transaction (after the disk's count of large files,
//     if it counts more than the walk reached, is corrected);
//  6. the inode count and generation counter are set to what the walk
//     counted, and so is the disk's count of large files on the condition
//     of 5.
//
// Each pass runs the metadata walk and applies the first group above that
// has something to fix, then walks again, until nothing fixable is left.
// Data blocks whose checksum fails cannot be repaired: they are reported
// with the file's path and offset, or, with ZeroBadBlocks, replaced by a
// hole (they read as zeros). What is left (segment records out of range,
// a page map with overlapping blocks, ...) is reported in
// RepairReport.Remaining.
//
// Repair learns what to fix from the walk's typed errors (alloc.LeakError,
// diskstore.DataChecksumError, diskstore.ListDamageError, ...), never from
// their text. A fix that fails ends its pass, and the errors it addressed
// count as unhandled from then on: the walk stays untrustworthy.

// RepairOptions tunes Repair.
type RepairOptions struct {
	// VerifyData reads every written disk block in the first walk (as
	// Check does) to find the blocks whose checksum fails.
	VerifyData bool
	// ZeroBadBlocks punches a hole over every disk block whose checksum
	// fails: the file reads zeros there instead of failing with EIO.
	ZeroBadBlocks bool
	// Progress, as CheckOptions.Progress, for the first walk.
	Progress func(done, total uint64)
}

// RepairReport says what Repair found and did.
type RepairReport struct {
	Found     []error // what the first walk found (Check's errors)
	Fixes     []Fix   // the repairs made, in order
	Remaining []error // what is still wrong afterwards; empty: consistent
}

// Fix is one repair, in human terms.
type Fix struct {
	Path    string // the object's path ("/a/b"), or "inode N" when it has none
	Problem string // what was wrong
	Action  string // what was done
}

func (f Fix) String() string { return f.Path + ": " + f.Problem + ": " + f.Action }

// Repair phases, applied in this order, one per pass.
const (
	// The allocator's own records first: until they are right, the walk
	// judges allocations (a file's blocks, a directory's pages) by wrong
	// sizes, and would drop what is sound.
	phaseAlloc = iota
	phaseDirs  // rebuild damaged directory tables (dirfix.go)
	phaseEntries
	phaseAttach
	// The disk store's own lists (free map, quarantine, unsynced files),
	// rebuilt from the files before anything frees disk blocks into them.
	phaseDiskLists
	phaseLinks
	phaseSegLeaks
	phaseLeaks
	phaseDiskLeaks
	phaseCounters
	numPhases
)

// maxRepairPasses bounds the walk-and-fix loop. Every pass fixes something
// new (a fix is tried once), so this only guards against a bug.
const maxRepairPasses = 64

// finding is one fixable problem the walk found. apply runs in its own Tx,
// re-validates what it changes and returns the action taken. A fix too
// large for one Tx has run instead, which makes its own transactions
// (each leaving a consistent state) with fs.mu held exclusively.
type finding struct {
	key     string // identifies the fix: each is tried at most once
	where   string // what is fixed when it is no inode ("arena heap")
	ino     Ino    // the object, for its path
	name    string // for entries: the name in directory ino
	problem string
	n       int // errors of the walk it addresses
	apply   func(tx *pram.Tx) (action string, err error)
	run     func() (action string, err error)
}

// badBlock is a disk block whose checksum failed.
type badBlock struct {
	ino  Ino
	off  int64
	disk diskstore.Block
	err  error

	fixed bool // a hole replaced it (ZeroBadBlocks), or its record was rewritten and it verifies
}

// findings is what one walk found that Repair can act on.
type findings struct {
	fixes     [numPhases][]finding
	ac        *alloc.Checker // the walk's: the live objects it found in pages of unknown kind
	keys      map[string]bool
	bad       []badBlock
	handled   int             // errors a finding not yet tried addresses
	tried     map[string]bool // Repair's: findings already applied or failed
	aborted   bool            // the walk panicked: reachability is unknown
	seen      map[Ino]*checkInfo
	leakCount int
	zeroBad   bool // RepairOptions.ZeroBadBlocks
	dk        *diskstore.Checker
}

// add records f. The errors it addresses count as handled unless it was
// tried in an earlier pass: a fix that failed leaves its damage, which
// keeps the walk untrustworthy.
func (fd *findings) add(phase int, f finding) {
	if fd.keys == nil {
		fd.keys = make(map[string]bool)
	}
	if !fd.tried[f.key] {
		fd.handled += f.n
	}
	if fd.keys[f.key] {
		return
	}
	fd.keys[f.key] = true
	fd.fixes[phase] = append(fd.fixes[phase], f)
}

// path names ino by the names the walk found, or "inode N".
func (fd *findings) path(ino Ino) string {
	if ino == RootIno {
		return "/"
	}
	var parts []string
	for n := 0; ino != RootIno; n++ {
		info := fd.seen[ino]
		if info == nil || info.name == "" || n > 4096 {
			return fmt.Sprintf("inode %d", ino)
		}
		parts = append(parts, info.name)
		ino = info.parent
	}
	slices.Reverse(parts)
	return "/" + strings.Join(parts, "/")
}

func (fd *findings) entryPath(dir Ino, name string) string {
	p := fd.path(dir)
	if p == "/" {
		return "/" + name
	}
	if strings.HasPrefix(p, "inode ") {
		return fmt.Sprintf("%q in directory %d", name, dir)
	}
	return p + "/" + name
}

// The checker's hooks: no-ops unless repairing.

func (ck *checker) fdHandled() {
	if ck.fd != nil {
		ck.fd.handled++
	}
}

// badEntry: the entry name in directory d is to be removed.
func (ck *checker) badEntry(d Ino, name string, ino uint64, why string) {
	if ck.fd == nil {
		return
	}
	fs := ck.fs
	ck.fd.add(phaseEntries, finding{n: 1,
		key: fmt.Sprintf("entry %d/%q", d, name), ino: d, name: name, problem: "entry " + why,
		apply: func(tx *pram.Tx) (string, error) {
			dir, err := fs.dirInode(d)
			if err != nil {
				return "", err
			}
			got, _, err := fs.dir(dir).Delete(tx, []byte(name))
			if err != nil {
				return "", err
			}
			if got != ino {
				return "", fmt.Errorf("entry changed to inode %d", got)
			}
			dir.touchMC(tx, fs.now())
			return "removed the entry", nil
		},
	})
}

// wrongType: the entry has type have, the inode is of type want.
func (ck *checker) wrongType(d Ino, name string, ino Ino, have, want uint8) {
	if ck.fd == nil {
		return
	}
	fs := ck.fs
	ck.fd.add(phaseEntries, finding{n: 1,
		key: fmt.Sprintf("type %d/%q", d, name), ino: d, name: name,
		problem: fmt.Sprintf("entry has type %d, the inode is of type %d", have, want),
		apply: func(tx *pram.Tx) (string, error) {
			dir, err := fs.dirInode(d)
			if err != nil {
				return "", err
			}
			got, _, ok := fs.dir(dir).Lookup([]byte(name))
			if !ok || Ino(got) != ino {
				return "", fmt.Errorf("entry changed")
			}
			if _, _, err := fs.dir(dir).Replace(tx, []byte(name), uint64(ino), want); err != nil {
				return "", err
			}
			return fmt.Sprintf("set the entry's type to %d", want), nil
		},
	})
}

// wrongParent: directory ino records parent have; the walk found it in want.
func (ck *checker) wrongParent(ino, have, want Ino) {
	if ck.fd == nil {
		return
	}
	fs := ck.fs
	ck.fd.add(phaseLinks, finding{n: 1,
		key: fmt.Sprintf("parent %d %d", ino, want), ino: ino,
		problem: fmt.Sprintf("\"..\" points at inode %d", have),
		apply: func(tx *pram.Tx) (string, error) {
			in, err := fs.dirInode(ino)
			if err != nil {
				return "", err
			}
			in.set64(tx, iParent, uint64(want))
			return fmt.Sprintf("set \"..\" to its parent, inode %d", want), nil
		},
	})
}

// inodeFix adds a link-phase finding about inode ino that addresses
// errors of the walk's errors: fix runs on the inode as it is when the
// fix is applied and says what it did.
func (ck *checker) inodeFix(ino Ino, key, problem string, errors int, fix func(tx *pram.Tx, in inode) (string, error)) {
	if ck.fd == nil {
		return
	}
	fs := ck.fs
	ck.fd.add(phaseLinks, finding{n: errors,
		key: key, ino: ino, problem: problem,
		apply: func(tx *pram.Tx) (string, error) {
			in, err := fs.inode(ino)
			if err != nil {
				return "", err
			}
			return fix(tx, in)
		},
	})
}

// wrongNlink: inode ino has link count have, the walk counted want.
func (ck *checker) wrongNlink(ino Ino, have, want uint32) {
	ck.inodeFix(ino, fmt.Sprintf("nlink %d %d", ino, want), fmt.Sprintf("link count %d", have), 1,
		func(tx *pram.Tx, in inode) (string, error) {
			in.set32(tx, iNlink, want)
			return fmt.Sprintf("set the link count to %d", want), nil
		})
}

// strayDiskFields: ino is an arena file, yet its record names a segment
// list or a disk shrink cursor (a damaged record). Both are cleared. A
// segment list that really was allocated then belongs to no file, and a
// later pass frees it as a leak.
func (ck *checker) strayDiskFields(ino Ino, seg pram.Off, cur uint64) {
	ck.inodeFix(ino, fmt.Sprintf("disk fields %d", ino),
		fmt.Sprintf("file kept in the arena names a segment list at %d and a shrink cursor %d", seg, cur), 1,
		func(tx *pram.Tx, in inode) (string, error) {
			if in.onDisk() {
				return "", fmt.Errorf("%w: inode %d is on disk now", ErrIO, ino)
			}
			in.set64(tx, iSeg, 0)
			in.set64(tx, iDiskCur, 0)
			return "cleared both", nil
		})
}

// diskLeftovers: a large file not on the orphan list still has what only
// an unfinished job may leave (orphan.go): arena storage from its move to
// disk, or disk data past its end from a truncate (iDiskCur, cur here).
// The arena storage is dropped (the inode stops pointing at it, and the
// leak pass frees what it held: the data is on disk); the truncate is
// finished, within one transaction's journal room, the next pass going on
// if more is left (the key names the cursor). memDamaged counts the arena
// storage's own problems, which dropping it addresses too.
func (ck *checker) diskLeftovers(ino Ino, cur uint64, memDamaged int) {
	fs := ck.fs
	ck.inodeFix(ino, fmt.Sprintf("disk leftovers %d %d", ino, cur), "large file with leftovers of an unfinished move or truncate", 1+memDamaged,
		func(tx *pram.Tx, in inode) (string, error) {
			if !in.onDisk() || in.flags()&flagOrphan != 0 {
				return "", fmt.Errorf("%w: inode %d is not a large file off the orphan list", ErrIO, ino)
			}
			var did []string
			if in.data() != 0 || in.idxLen() != 0 || in.allocd() != 0 || in.small() {
				in.set64(tx, iData, 0)
				in.set64(tx, iIdxLen, 0)
				in.set64(tx, iAllocd, 0)
				in.set32(tx, iFlags, in.flags()&^flagSmall)
				did = append(did, "dropped its leftover arena storage (its data is on disk)")
			}
			if cur := in.u64(iDiskCur); cur != 0 {
				end, err := fs.ds.MappedEnd(in.seg())
				if err != nil {
					return "", err
				}
				// A damaged cursor may lie far beyond the data.
				in.set64(tx, iDiskCur, max(min(cur, uint64(end)), fs.roundUp(in.size())))
				for more := true; more && in.u64(iDiskCur) != 0; {
					if more, err = fs.diskShrinkStep(tx, in); err != nil {
						return "", err
					}
					if more && fs.journalLow(tx) {
						did = append(did, "released part of its disk data past the end (the next pass goes on)")
						return strings.Join(did, "; "), nil
					}
				}
				did = append(did, "released its disk data past the end")
			}
			return strings.Join(did, "; "), nil
		})
}

// badMode: ino's mode has no valid file type; the directory entry that
// names it records dt. The inode takes that type, keeping its permission
// bits (a directory's table, a file's data, ... are then checked as usual
// by the next pass). An entry of unknown type leaves it reported.
func (ck *checker) badMode(ino Ino, dt uint8) {
	types := map[uint8]uint32{DT_REG: S_IFREG, DT_DIR: S_IFDIR, DT_LNK: S_IFLNK, DT_FIFO: S_IFIFO,
		DT_SOCK: S_IFSOCK, DT_CHR: S_IFCHR, DT_BLK: S_IFBLK}
	typ, ok := types[dt]
	if !ok {
		return
	}
	if ck.fd == nil {
		return
	}
	fs := ck.fs
	// In the first phase: until the type is right, the walk sees the tree
	// wrong (a directory's subtree as leaked, link counts off by one).
	ck.fd.add(phaseDirs, finding{n: 1, key: fmt.Sprintf("mode %d", ino), ino: ino,
		problem: "mode of no valid file type",
		apply: func(tx *pram.Tx) (string, error) {
			in, err := fs.inode(ino)
			if err != nil {
				return "", err
			}
			if in.dtype() != DT_UNKNOWN {
				return "", fmt.Errorf("%w: inode %d has a valid type now", ErrIO, ino)
			}
			mode := typ | in.mode()&0o7777
			in.set32(tx, iMode, mode)
			return fmt.Sprintf("set it to %#o, the type its directory entry records", mode), nil
		}})
}

// specialData: a device, FIFO or socket points at data, which it never
// has. The pointer is cleared (an allocation there is freed as a leak by a
// later pass).
func (ck *checker) specialData(ino Ino) {
	ck.inodeFix(ino, fmt.Sprintf("special data %d", ino), "special file pointing at data", 1,
		func(tx *pram.Tx, in inode) (string, error) {
			switch in.typ() {
			case S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK:
			default:
				return "", fmt.Errorf("%w: inode %d is not a special file", ErrIO, ino)
			}
			in.set64(tx, iData, 0)
			return "cleared the pointer", nil
		})
}

// strayDiskFlag: ino is flagged as a large file but names no segment list
// or shrink cursor, and holds arena storage (or is empty): the flag is
// cleared, and the file reads its data from the arena again; damage to that
// storage (memDamaged problems) is repaired by the next pass, as for any
// arena file. (Giving it an empty segment list instead would make its data
// read as zeros, and the leftover fix then drop it.)
func (ck *checker) strayDiskFlag(ino Ino, memDamaged int) {
	ck.inodeFix(ino, fmt.Sprintf("disk flag %d", ino), "file kept in the arena is flagged as a large file", 1+memDamaged,
		func(tx *pram.Tx, in inode) (string, error) {
			if !in.onDisk() || in.seg() != 0 || in.u64(iDiskCur) != 0 {
				return "", fmt.Errorf("%w: inode %d is no longer a large file without a segment list", ErrIO, ino)
			}
			in.set32(tx, iFlags, in.flags()&^flagDisk)
			return "cleared the flag: its data is read from the arena again", nil
		})
}

// badFlags: ino's flags hold bits no version sets, or the small-file, disk
// or reserved flag on an inode that is not a regular file. The bits that do not
// belong are cleared.
func (ck *checker) badFlags(ino Ino) {
	ck.inodeFix(ino, fmt.Sprintf("flags %d", ino), "flags that do not belong to the inode", 1,
		func(tx *pram.Tx, in inode) (string, error) {
			keep := regFlags
			if in.typ() != S_IFREG {
				keep = flagOrphan
			}
			drop := in.flags() &^ keep
			in.set32(tx, iFlags, in.flags()&keep)
			return fmt.Sprintf("cleared flags %#x", drop), nil
		})
}

// badXattrs: ino's extended attributes cannot be read back or hold an
// impossible entry. They are dropped: the inode no longer points at the
// blob, and a blob that was allocated is freed as a leak by a later pass.
func (ck *checker) badXattrs(ino Ino) {
	ck.inodeFix(ino, fmt.Sprintf("xattrs %d", ino), "damaged extended attributes", 1,
		func(tx *pram.Tx, in inode) (string, error) {
			in.set64(tx, iXattr, 0)
			return "dropped them", nil
		})
}

// LostSymlinkTarget is the target Repair gives a symlink whose own target
// could not be read back: the link keeps its name, and following it fails
// with ENOENT.
const LostSymlinkTarget = "#target-lost-by-fsck"

// badSymlink: ino's target cannot be read back (no pointer, an impossible
// length, or a pointer that is not an allocation large enough). The inode
// stops pointing at it (an allocation there is freed as a leak by a later
// pass); a symlink that still has names gets LostSymlinkTarget, and an
// unlinked one is then freed by the stuck-orphan fix of the same pass.
func (ck *checker) badSymlink(ino Ino) {
	fs := ck.fs
	ck.inodeFix(ino, fmt.Sprintf("symlink %d", ino), "unreadable symlink target", 1,
		func(tx *pram.Tx, in inode) (string, error) {
			if in.typ() != S_IFLNK {
				return "", fmt.Errorf("%w: inode %d is not a symlink", ErrIO, ino)
			}
			if in.nlink() == 0 {
				in.set64(tx, iData, 0)
				in.set64(tx, iSize, 0)
				return "dropped the target of the unlinked symlink", nil
			}
			off, err := fs.h.Alloc(tx, uint64(len(LostSymlinkTarget)))
			if err != nil {
				return "", err
			}
			copy(fs.a.Bytes(off, uint64(len(LostSymlinkTarget))), LostSymlinkTarget) // fresh: unlogged
			in.set64(tx, iData, uint64(off))
			in.set64(tx, iSize, uint64(len(LostSymlinkTarget)))
			return fmt.Sprintf("set its target to %q", LostSymlinkTarget), nil
		})
}

// stuckOrphan: ino has no links and no user, yet is still on the orphan
// list: freeing it failed (Open logged why, damaged storage that an earlier
// fix of this pass may have dropped). One step of the free is tried here. An
// inode too large for one step is left for the next Open, which frees the
// rest.
func (ck *checker) stuckOrphan(ino Ino) {
	ck.inodeFix(ino, fmt.Sprintf("stuck orphan %d", ino), "unlinked file that was never freed", 1,
		func(tx *pram.Tx, in inode) (string, error) {
			if in.nlink() != 0 || in.flags()&flagOrphan == 0 {
				return "", fmt.Errorf("%w: inode %d is not an unlinked orphan", ErrIO, ino)
			}
			done, err := ck.fs.freeStep(tx, in)
			switch {
			case err != nil:
				return "", err
			case !done:
				return "freed part of it; the next mount frees the rest", nil
			}
			return "freed it", nil
		})
}

// memDamage: the arena storage fields of ino (a file kept in the arena)
// are inconsistent (errors reports of it); memRepair fixes them.
func (ck *checker) memDamage(ino Ino, errors int) {
	ck.inodeFix(ino, fmt.Sprintf("arena data %d", ino), "damaged storage fields", errors,
		func(tx *pram.Tx, in inode) (string, error) {
			if !in.isReg() || in.onDisk() {
				return "", fmt.Errorf("%w: inode %d is not a file kept in the arena", ErrIO, ino)
			}
			return ck.fs.memRepair(tx, in), nil
		})
}

// badTime: a timestamp of ino has a nanosecond field of a second or more;
// it is set to the start of that second.
func (ck *checker) badTime(ino Ino, field pram.Off) {
	ck.inodeFix(ino, fmt.Sprintf("time %d %d", ino, field), fmt.Sprintf("timestamp at %d out of range", field), 1,
		func(tx *pram.Tx, in inode) (string, error) {
			ts := in.time(field)
			in.setTime(tx, field, Timespec{Sec: ts.Sec})
			return fmt.Sprintf("set it to second %d", ts.Sec), nil
		})
}

// strayOrphanFlag: ino is flagged orphan but not on the list.
func (ck *checker) strayOrphanFlag(ino Ino) {
	ck.inodeFix(ino, fmt.Sprintf("orphan flag %d", ino), "flagged as an orphan but not on the orphan list", 1,
		func(tx *pram.Tx, in inode) (string, error) {
			in.set32(tx, iFlags, in.flags()&^flagOrphan)
			in.set64(tx, iOrphNext, 0)
			in.set64(tx, iOrphPrev, 0)
			return "cleared the flag", nil
		})
}

// badCounter: root slot holds have, the walk counted want.
func (ck *checker) badCounter(slot int, what string, have, want uint64) {
	if ck.fd == nil {
		return
	}
	ck.fd.add(phaseCounters, finding{
		key: fmt.Sprintf("slot %d %d", slot, want), where: "file system", problem: fmt.Sprintf("%s is %d", what, have),
		apply: func(tx *pram.Tx) (string, error) {
			tx.Set64(pram.RootOff(slot), want)
			return fmt.Sprintf("set it to %d", want), nil
		},
	})
}

// cutOrphans: the orphan list breaks after the orphan at prev (0: at its
// head); it is cut there. The orphans past the cut are then reached from
// nowhere, and the repair frees them as it frees any unreachable inode
// (what they are for: unlinked files, freed at the next Open anyway).
func (ck *checker) cutOrphans(prev pram.Off, why string) {
	if ck.fd == nil {
		return
	}
	where := "the orphan list's head"
	if prev != 0 {
		where = fmt.Sprintf("the orphan list after inode %d", Ino(prev>>inodeShift))
	}
	ck.fd.add(phaseEntries, finding{ // before the orphans it loses are put back (phaseAttach)
		key: "orphan cut", where: "file system", problem: where + " " + why,
		apply: func(tx *pram.Tx) (string, error) {
			if prev == 0 {
				tx.Set64(pram.RootOff(slotOrphans), 0)
			} else {
				tx.Set64(prev+iOrphNext, 0)
			}
			return "ended the list there", nil
		},
	})
}

// badFallocRecord: the record of an unfinished fallocate is damaged; it is
// cleared (what the fallocate reserved then stays with its file, as
// KEEP_SIZE's does).
func (ck *checker) badFallocRecord() {
	if ck.fd == nil {
		return
	}
	ck.fd.add(phaseCounters, finding{
		key: "falloc record", where: "file system", problem: "a damaged record of an unfinished fallocate",
		apply: func(tx *pram.Tx) (string, error) {
			clearFalloc(tx)
			return "cleared it", nil
		},
	})
}

// badBlocks collects the checksum failures among a large file's errors.
// One without the block's place (none today) is still a failure: it is
// reported, never zeroed.
func (ck *checker) badBlocks(ino Ino, errs []error) {
	if ck.fd == nil {
		return
	}
	for _, err := range errs {
		if !errors.Is(err, diskstore.ErrDataChecksum) {
			continue
		}
		b := badBlock{ino: ino, off: -1, err: err}
		if ce, ok := errors.AsType[*diskstore.DataChecksumError](err); ok {
			b.off, b.disk = ce.Offset, ce.Disk
		}
		ck.fd.bad = append(ck.fd.bad, b)
	}
}

// sharedBlocks: blocks (indexes into its block index) of arena file ino
// are allocations another file reached first (a damaged pointer in one of
// the two). Each gets a copy of its own, so that a write to one file no
// longer changes the other; one of the two may still hold the other's
// bytes there, which the fix says.
func (ck *checker) sharedBlocks(ino Ino, blocks []uint64) {
	fs := ck.fs
	ck.inodeFix(ino, fmt.Sprintf("shared blocks %d", ino),
		fmt.Sprintf("%d blocks shared with another file", len(blocks)), len(blocks),
		func(tx *pram.Tx, in inode) (string, error) {
			if in.onDisk() || in.small() || in.data() == 0 {
				return "", fmt.Errorf("%w: inode %d has no block index now", ErrIO, ino)
			}
			for _, b := range blocks {
				if b >= in.idxLen() {
					return "", fmt.Errorf("%w: block %d is past inode %d's index", ErrIO, b, ino)
				}
				slot := in.data() + pram.Off(8*b)
				old := pram.Off(fs.a.U64(slot))
				if n, err := fs.h.SizeOf(old); err != nil || n != BlockSize {
					return "", fmt.Errorf("%w: block %d of inode %d: %d bytes, %v", ErrIO, b, ino, n, err)
				}
				blk, err := fs.h.Alloc(tx, BlockSize)
				if err != nil {
					return "", err
				}
				tx.SetBytes(blk, fs.a.View(old, BlockSize))
				tx.Set64(slot, uint64(blk))
			}
			return fmt.Sprintf("gave each its own copy (block indexes %v; the data there may be the other file's)", blocks), nil
		})
}

// segMagic: the segment list of large file ino has a damaged magic (errs
// are the walk's errors for the file). The magic is rewritten if the list
// still names ino; the next walk checks the rest of the list.
func (ck *checker) segMagic(ino Ino, seg pram.Off, errs []error) {
	for _, err := range errs {
		if _, ok := errors.AsType[*diskstore.SegMagicError](err); ok {
			ck.inodeFix(ino, fmt.Sprintf("seg magic %d", ino), "segment list with a damaged magic", 0,
				func(tx *pram.Tx, in inode) (string, error) {
					if in.seg() != seg {
						return "", fmt.Errorf("%w: inode %d's segment list moved", ErrIO, ino)
					}
					if err := ck.fs.ds.RestoreMagic(tx, seg, uint64(ino)); err != nil {
						return "", err
					}
					return "rewrote the magic (the list names this file)", nil
				})
		}
	}
}

// segFix registers a fix of ino's segment list seg, which must still be
// the file's when it runs; fix returns the action and its error.
func (ck *checker) segFix(ino Ino, seg pram.Off, key, problem string, fix func(tx *pram.Tx) (string, error)) {
	ck.inodeFix(ino, key, problem, 1, func(tx *pram.Tx, in inode) (string, error) {
		if in.seg() != seg {
			return "", fmt.Errorf("%w: inode %d's segment list moved", ErrIO, ino)
		}
		action, err := fix(tx)
		if err != nil {
			return "", err
		}
		return action, nil
	})
}

// straySums: checksums recorded for blocks of ino's file that map no disk
// block are zeroed (nothing could read them).
func (ck *checker) straySums(ino Ino, seg pram.Off, errs []error) {
	// A segment whose count lost blocks maps them again (segBlocks): their
	// checksums are the evidence, not strays.
	regained := func(fb uint64) bool {
		for _, err := range errs {
			if sc, ok := errors.AsType[*diskstore.SegCountError](err); ok && fb >= sc.FileBlock+sc.Count && fb < sc.FileBlock+sc.Want {
				return true
			}
		}
		return false
	}
	for _, err := range errs {
		ss, ok := errors.AsType[*diskstore.StraySumError](err)
		if !ok || regained(ss.Block) {
			continue
		}
		fb := ss.Block
		ck.segFix(ino, seg, fmt.Sprintf("stray sum %d %d", ino, fb), fmt.Sprintf("checksum recorded for file block %d, which has no disk block", fb),
			func(tx *pram.Tx) (string, error) { return "cleared it", ck.fs.ds.ClearStraySum(tx, seg, fb) })
	}
}

// sumBases: a checksum page record whose base is damaged (its check word
// passes under the one base a byte away that keeps the list's order) gets
// that base back, before its entries are taken for strays.
func (ck *checker) sumBases(ino Ino, seg pram.Off, errs []error) {
	for _, err := range errs {
		sb, ok := errors.AsType[*diskstore.SumBaseError](err)
		if !ok {
			continue
		}
		ck.segFix(ino, seg, fmt.Sprintf("sum base %d %d", ino, sb.Base),
			fmt.Sprintf("checksum page record for file blocks from %d fails its check word", sb.Base),
			func(tx *pram.Tx) (string, error) {
				return fmt.Sprintf("its check word proves the base damaged: set it to %d", sb.Want), ck.fs.ds.SetSumBase(tx, seg, sb.Base, sb.Want)
			})
	}
}

// badSumPages: a damaged record of a checksum page of ino's file is mended
// when one byte of it is what is damaged and the data verifies the
// checksums the mended record points at (diskstore.Store.MendSumPage).
// Else it is dropped, with ZeroBadBlocks only: the blocks it covers then
// read as zeros (see diskstore.Store.DropSumPage); without it they fail
// with EIO.
func (ck *checker) badSumPages(ino Ino, seg pram.Off, errs []error) {
	if ck.fd == nil {
		return
	}
	for _, err := range errs {
		bp, ok := errors.AsType[*diskstore.BadSumPageError](err)
		if !ok {
			continue
		}
		base := bp.Base
		zeroBad := ck.fd.zeroBad
		ck.segFix(ino, seg, fmt.Sprintf("sum page %d %d", ino, base), fmt.Sprintf("damaged checksum page record for file blocks from %d", base),
			func(tx *pram.Tx) (string, error) {
				what, err := ck.fs.ds.MendSumPage(tx, seg, base)
				if err == nil {
					return "mended it from the data the checksums verify (" + what + "): no data lost", nil
				}
				if !zeroBad {
					return "", err
				}
				return "dropped it: the blocks it covered read as zeros (their data is lost)", ck.fs.ds.DropSumPage(tx, seg, base)
			})
	}
}

// fileLists: a damaged structure of one of the lists of ino's segment
// list. It is first mended from its own other fields (diskstore:
// xlist.mend), which loses nothing. Failing that, a damaged list of
// unsynced records is emptied (they only guide
// recovery). A damaged list of checksum pages or of segments is emptied
// with ZeroBadBlocks only: the file keeps its size and reads as zeros, its
// data lost; without it the damage is reported, and the file's blocks,
// which the walk could not account for, are left alone.
func (ck *checker) fileLists(ino Ino, seg pram.Off, errs []error) {
	if ck.fd == nil {
		return
	}
	n := make(map[string]int)
	for _, err := range errs {
		if fl, ok := errors.AsType[*diskstore.FileListError](err); ok {
			n[fl.List]++
		}
	}
	ds := ck.fs.ds
	// First mend each damaged list from what its other fields tell (no
	// record lost); only if that fails, the fixes below.
	mending := false
	for _, list := range []string{diskstore.FileSegments, diskstore.FileSums, diskstore.FileUnsynced} {
		key := fmt.Sprintf("mend %d %s", ino, list)
		if n[list] == 0 || ck.fd.tried[key] {
			continue
		}
		mending = true
		ck.fd.add(phaseLinks, finding{n: n[list], key: key, ino: ino, problem: "damaged list of " + list,
			apply: func(tx *pram.Tx) (string, error) {
				in, err := ck.fs.inode(ino)
				if err != nil {
					return "", err
				}
				if in.seg() != seg {
					return "", fmt.Errorf("%w: inode %d's segment list moved", ErrIO, ino)
				}
				did, err := ds.MendFileList(tx, seg, list)
				return "mended it from its other fields (" + did + "): no record lost", err
			}})
	}
	if mending {
		return
	}
	if n[diskstore.FileUnsynced] > 0 && (n[diskstore.FileSegments] == 0 || !ck.fd.zeroBad) {
		ck.inodeFix(ino, fmt.Sprintf("file unsynced %d", ino), "damaged list of unsynced blocks", n[diskstore.FileUnsynced],
			func(tx *pram.Tx, in inode) (string, error) {
				if in.seg() != seg {
					return "", fmt.Errorf("%w: inode %d's segment list moved", ErrIO, ino)
				}
				return "emptied it (it only guides recovery after a power failure)", ds.ResetUnsynced(tx, seg)
			})
	}
	if !ck.fd.zeroBad {
		return
	}
	switch {
	case n[diskstore.FileSegments] > 0:
		ck.inodeFix(ino, fmt.Sprintf("file segments %d", ino), "damaged list of segments (where the data is on disk)",
			n[diskstore.FileSegments]+n[diskstore.FileSums]+n[diskstore.FileUnsynced],
			func(tx *pram.Tx, in inode) (string, error) {
				if in.seg() != seg {
					return "", fmt.Errorf("%w: inode %d's segment list moved", ErrIO, ino)
				}
				return "emptied the file's lists: it reads as zeros (its data is lost)", ds.ResetSegments(tx, seg)
			})
	case n[diskstore.FileSums] > 0:
		ck.inodeFix(ino, fmt.Sprintf("file sums %d", ino), "damaged list of checksum pages", n[diskstore.FileSums],
			func(tx *pram.Tx, in inode) (string, error) {
				if in.seg() != seg {
					return "", fmt.Errorf("%w: inode %d's segment list moved", ErrIO, ino)
				}
				return "emptied it: the file reads as zeros (its data is lost)", ds.ResetSums(tx, seg)
			})
	}
}

// segBlocks: the count of blocks of ino's segment list disagrees with its
// segments; it is set to what they map (the data's accounting, nothing of
// the data changes).
func (ck *checker) segBlocks(ino Ino, seg pram.Off, errs []error) {
	for _, err := range errs {
		if _, ok := errors.AsType[*diskstore.SegBlocksError](err); ok {
			ck.segFix(ino, seg, fmt.Sprintf("seg blocks %d", ino), "segment list's count of blocks is wrong",
				func(tx *pram.Tx) (string, error) {
					n, err := ck.fs.ds.SetSegBlocks(tx, seg)
					return fmt.Sprintf("set it to the %d blocks its segments map", n), err
				})
		}
		if sc, ok := errors.AsType[*diskstore.SegCountError](err); ok {
			bs := uint64(ck.fs.ds.BlockSize())
			ck.segFix(ino, seg, fmt.Sprintf("seg count %d %d", ino, sc.FileBlock),
				fmt.Sprintf("the segment at offset %d counts %d blocks, its list's count and its blocks' checksums show %d", sc.FileBlock*bs, sc.Count, sc.Want),
				func(tx *pram.Tx) (string, error) {
					err := ck.fs.ds.SetSegCount(tx, seg, sc.FileBlock, sc.Count, sc.Want)
					return fmt.Sprintf("set it to %d", sc.Want), err
				})
		}
	}
}

// sizeBelowData: ino's file holds written data past its size (and no
// truncate is pending: that case is diskLeftovers'). As e2fsck does, the
// size is taken to be what is damaged: it is raised to the end of the last
// block holding data (the bytes after the old end in it read as zeros).
//
// A size past diskstore.MaxFileSize (which the walk reports on its own) is
// replaced the same way.
func (ck *checker) sizeBelowData(ino Ino, seg pram.Off, size uint64, errs []error) {
	var end int64
	n := 0
	if size > diskstore.MaxFileSize {
		n++ // the walk's "size" error
	}
	for _, err := range errs {
		if be, ok := errors.AsType[*diskstore.BeyondEndError](err); ok {
			end = max(end, int64(be.Block+1)*int64(ck.fs.ds.BlockSize()))
			n++
		}
	}
	if n == 0 {
		return
	}
	fs := ck.fs
	ck.inodeFix(ino, fmt.Sprintf("size %d %d", ino, end), "data past the end of the file", n,
		func(tx *pram.Tx, in inode) (string, error) {
			if !in.onDisk() || in.seg() != seg || in.u64(iDiskCur) != 0 {
				return "", fmt.Errorf("%w: inode %d is not the large file it was", ErrIO, ino)
			}
			if in.size() <= diskstore.MaxFileSize && uint64(end) <= in.size() {
				return "", fmt.Errorf("%w: inode %d is %d bytes now", ErrIO, ino, in.size())
			}
			old := in.size()
			in.set64(tx, iSize, uint64(end))
			fs.setLsize(ino, 0)
			return fmt.Sprintf("set its size from %d to %d, the end of the data it holds", old, end), nil
		})
}

// inodeRecordsIn is the offsets of the inode records in data page pg of
// the heap: 256-byte places that hold the inode magic and their own inode
// number (Ino is the record's offset >> 8; the root's is 1, at root slot 1).
// Freed records have the magic zeroed.
func (fs *FS) inodeRecordsIn(pg uint64) []pram.Off {
	start, end := fs.h.DataRange()
	page := start + pram.Off(pg*pram.PageSize)
	if page < start || page+pram.PageSize > end {
		return nil
	}
	var offs []pram.Off
	for off := page; off < page+pram.PageSize; off += inodeSize {
		ino := fs.a.U64(off + iIno)
		if fs.a.U64(off+iMagic) == inodeMagic && (ino == uint64(off>>inodeShift) || ino == uint64(RootIno) && off == pram.Off(fs.a.Root(slotRoot))) {
			offs = append(offs, off)
		}
	}
	return offs
}

// memSizeBelowData: ino's file, kept in the arena, stores data past its
// size (memDataPastSize). As for a large file (sizeBelowData), the size is
// taken to be what is damaged: it is raised to the end of the last
// non-zero byte stored (exact unless the file ended in zero bytes).
func (ck *checker) memSizeBelowData(ino Ino, end uint64) {
	ck.inodeFix(ino, fmt.Sprintf("mem size %d %d", ino, end), "data past the end of the file", 1,
		func(tx *pram.Tx, in inode) (string, error) {
			got, past := ck.fs.memDataPastSize(in)
			if !past || got != end {
				return "", fmt.Errorf("%w: inode %d changed", ErrIO, ino)
			}
			old := in.size()
			in.set64(tx, iSize, end)
			return fmt.Sprintf("set its size from %d to %d, the end of the data it stores", old, end), nil
		})
}

// memSizePastStorage: ino's file, kept in the arena, has a size past what
// arena storage can hold (maxMemFileSize), which no operation sets: the
// size is damaged. It is set to the end of the data the file stores, end
// (memDataEnd: exact unless the file ended in zero bytes). Found by an
// outside review: such a size was clean to fsck, refused by reads (EIO,
// sizeSane), and the move to the disk that an open queues allocated a
// buffer of that size, killing the daemon.
func (ck *checker) memSizePastStorage(ino Ino, end uint64) {
	ck.inodeFix(ino, fmt.Sprintf("mem size past storage %d %d", ino, end), "size past what the arena can hold", 1,
		func(tx *pram.Tx, in inode) (string, error) {
			if in.onDisk() || in.size() <= maxMemFileSize || ck.fs.memDataEnd(in) != end {
				return "", fmt.Errorf("%w: inode %d changed", ErrIO, ino)
			}
			old := in.size()
			in.set64(tx, iSize, end)
			return fmt.Sprintf("set its size from %d to %d, the end of the data it stores", old, end), nil
		})
}

// badUnsynced: unsynced records of ino's file that are damaged or name an
// unmapped block are dropped (they only guide recovery after a power
// failure; see diskstore.Store.DropUnsynced).
func (ck *checker) badUnsynced(ino Ino, seg pram.Off, errs []error) {
	for _, err := range errs {
		bu, ok := errors.AsType[*diskstore.BadUnsyncedError](err)
		if !ok {
			continue
		}
		fb := bu.Block
		ck.segFix(ino, seg, fmt.Sprintf("unsynced %d %d", ino, fb), fmt.Sprintf("damaged unsynced-block record for file block %d", fb),
			func(tx *pram.Tx) (string, error) {
				return "dropped it (it only guides recovery after a power failure)", ck.fs.ds.DropUnsynced(tx, seg, fb)
			})
	}
}

// leakOffsets returns the offsets of the allocations errs reports as leaked.
func leakOffsets(errs []error) []pram.Off {
	var offs []pram.Off
	for _, err := range errs {
		if le, ok := errors.AsType[*alloc.LeakError](err); ok {
			offs = append(offs, le.Off)
		}
	}
	return offs
}

// diskLeaks returns the disk block ranges errs reports as leaked, and the
// disk's wrong count of large files, if any.
func diskLeaks(errs []error) (ranges []diskstore.BlockRange, count *diskstore.FileCountError) {
	for _, err := range errs {
		if le, ok := errors.AsType[*diskstore.LeakedBlocksError](err); ok {
			ranges = append(ranges, le.Ranges...)
		}
		if fc, ok := errors.AsType[*diskstore.FileCountError](err); ok {
			count = fc
		}
	}
	return ranges, count
}

// harmless reports errors that do not make the walk's reachability
// uncertain: leaks, data checksums, and the disk's account of its blocks.
func harmless(err error) bool {
	if errors.Is(err, alloc.ErrLeak) || errors.Is(err, diskstore.ErrDataChecksum) {
		return true
	}
	if _, ok := errors.AsType[*diskstore.SumDamageError](err); ok {
		return true // the record of one block's checksum: fixed at the end
	}
	if _, ok := errors.AsType[*diskstore.LeakedBlocksError](err); ok {
		return true
	}
	_, ok := errors.AsType[*diskstore.FileCountError](err)
	return ok
}

// Repair checks the file system and repairs what it can (see the list
// above), then checks it again; the report lists the problems found, each
// fix, and what is left. It is meant for `conquest fsck` on a file system
// no one else has open (the arena lock guarantees no daemon has it). It
// returns an error only if it could not run.
func (fs *FS) Repair(o RepairOptions) (RepairReport, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var rep RepairReport
	if fs.closed {
		return rep, fmt.Errorf("%w: file system is closed", ErrIO)
	}
	if fs.readOnly {
		return rep, fmt.Errorf("%w: opened read-only: a repair writes the images", ErrReadOnly)
	}
	tried := make(map[string]bool)
	var bad []badBlock
	var failed []error
	var dataFound []error // the data walk's errors: checksum records, seeds, bad blocks
	var verified uint64   // large files the data walk verified
	for pass := 0; pass < maxRepairPasses; pass++ {
		fd := &findings{zeroBad: o.ZeroBadBlocks, tried: tried}
		co := CheckOptions{}
		if pass == 0 {
			co = CheckOptions{VerifyData: o.VerifyData, Progress: o.Progress}
		}
		errs := fs.checkLocked(co, fd)
		if pass == 0 {
			rep.Found, bad, dataFound = errs, fd.bad, errs
			if fd.dk != nil {
				verified = fd.dk.VerifiedFiles()
			}
		}
		fs.allocFindings(fd, errs)
		fs.leakFindings(fd, errs)
		applied, failedNow := false, false
		for phase := range numPhases {
			for _, f := range fd.fixes[phase] {
				if tried[f.key] {
					continue
				}
				tried[f.key] = true
				what := f.where
				switch {
				case f.name != "":
					what = fd.entryPath(f.ino, f.name)
				case what == "":
					what = fd.path(f.ino)
				}
				var action string
				var ferr error // the cause, before update maps it to a sentinel
				var err error
				if f.run != nil {
					action, err = f.run()
				} else {
					err = fs.update(func(tx *pram.Tx) error {
						action, ferr = f.apply(tx)
						return ferr
					})
				}
				if ferr != nil {
					err = ferr
				}
				if err != nil {
					failed = append(failed, fmt.Errorf("%s: %s: not repaired: %v", what, f.problem, err))
					failedNow = true
					continue
				}
				applied = true
				rep.Fixes = append(rep.Fixes, Fix{Path: what, Problem: f.problem, Action: action})
			}
			if applied || failedNow {
				// The next pass sees the effect of this phase; the
				// later phases' findings assumed its fixes would work.
				break
			}
		}
		if !applied && !failedNow {
			break
		}
	}
	if o.VerifyData && fs.ds != nil && len(rep.Fixes) > 0 && verified < fs.ds.Stats().Files {
		// The first walk could not verify every large file's blocks (its
		// lists were damaged, or damage elsewhere hid it); now that the
		// repairs are made, verify the data again so that damaged checksum
		// records and bad blocks are found too.
		fd := &findings{zeroBad: o.ZeroBadBlocks}
		dataFound = fs.checkLocked(CheckOptions{VerifyData: true, Progress: o.Progress}, fd)
		bad = fd.bad
		seen := make(map[string]bool)
		for _, err := range rep.Found {
			seen[err.Error()] = true
		}
		for _, err := range dataFound {
			if (errors.Is(err, diskstore.ErrDataChecksum) || isSumFinding(err)) && !seen[err.Error()] {
				rep.Found = append(rep.Found, err)
			}
		}
	}
	sums, sumsLeft := fs.sumFixes(dataFound, o.ZeroBadBlocks)
	rep.Fixes = append(rep.Fixes, sums...)
	if len(sums) > 0 {
		fs.verifiedNow(bad)
	}
	rep.Fixes = append(rep.Fixes, fs.badBlockFixes(o, bad, &failed)...)
	// The final walk reads no data: the bad blocks found by the first are
	// still bad unless a hole replaced them.
	fd := &findings{}
	rep.Remaining = fs.checkLocked(CheckOptions{}, fd)
	for i, err := range rep.Remaining {
		if _, ok := errors.AsType[*diskstore.BadSumPageError](err); ok {
			rep.Remaining[i] = fmt.Errorf("%w: left alone: dropping it makes the blocks it covers read as zeros (allowed with ZeroBadBlocks)", err)
		}
	}
	for _, b := range bad {
		if !b.fixed {
			rep.Remaining = append(rep.Remaining, fmt.Errorf("%s: data at offset %d (disk block %d) fails its checksum: cannot be repaired (zeroing the block would lose it for good): %w",
				fd.path(b.ino), b.off, b.disk, b.err))
		}
	}
	// The final walk reads no data: a checksum record not rewritten is
	// still damaged.
	rep.Remaining = append(rep.Remaining, sumsLeft...)
	if len(rep.Remaining) > 0 {
		// A fix that failed on damage a later fix removed is moot once the
		// walk is clean; otherwise it says why something is left.
		rep.Remaining = append(rep.Remaining, failed...)
	}
	return rep, nil
}

// isSumFinding reports whether err is a damaged checksum record or seed
// (what sumFixes repairs).
func isSumFinding(err error) bool {
	_, sum := errors.AsType[*diskstore.SumDamageError](err)
	_, seed := errors.AsType[*diskstore.SeedDamageError](err)
	_, check := errors.AsType[*diskstore.SumCheckError](err)
	return sum || seed || check
}

// verifiedNow marks the bad blocks whose data verifies against their
// checksum records as rewritten by sumFixes (a page's check proved the
// record damaged, not the data): they are neither zeroed nor left.
// Preconditions: fs.mu held exclusively.
func (fs *FS) verifiedNow(bad []badBlock) {
	bs := int64(fs.ds.BlockSize())
	for i := range bad {
		b := &bad[i]
		if b.fixed || b.off < 0 {
			continue
		}
		in, err := fs.inode(b.ino)
		if err != nil || !in.onDisk() {
			continue
		}
		if ok, err := fs.ds.BlockVerifies(in.seg(), uint64(b.off/bs)); err == nil && ok {
			b.fixed = true
		}
	}
}

// sumFixes rewrites the damaged checksum records and checksum seeds the
// first (data verifying) walk found (diskstore.SumDamageError,
// diskstore.SeedDamageError: the data is sound). It returns the fixes and
// what it could not rewrite.
// Preconditions: fs.mu held exclusively.
func (fs *FS) sumFixes(found []error, zeroBad bool) (fixes []Fix, left []error) {
	var fd *findings
	// Seeds first: a record the walk judged under a found seed is
	// rewritten under it; page checks last: the records the data proves
	// damaged are rewritten first, and the check then judges what is left.
	rank := func(err error) int {
		if _, ok := errors.AsType[*diskstore.SeedDamageError](err); ok {
			return 0
		}
		if _, ok := errors.AsType[*diskstore.SumCheckError](err); ok {
			return 2
		}
		return 1
	}
	seedsFirst := slices.Clone(found)
	slices.SortStableFunc(seedsFirst, func(a, b error) int { return rank(a) - rank(b) })
	for _, err := range seedsFirst {
		var owner uint64
		var seg pram.Off
		var problem, action string
		var fix func(tx *pram.Tx) error
		if sd, ok := errors.AsType[*diskstore.SumDamageError](err); ok && fs.ds != nil {
			owner, seg = sd.Owner, sd.Seg
			problem = fmt.Sprintf("checksum record of the block at offset %d (disk block %d) differs from its data's in a byte or two", sd.Block*fs.ds.BlockSize(), sd.Disk)
			action = "the record is damaged, not the data: rewrote it from the data"
			fix = func(tx *pram.Tx) error { return fs.ds.RewriteSum(tx, sd.Seg, sd.Block, sd.Stored, sd.Data) }
		} else if sd, ok := errors.AsType[*diskstore.SeedDamageError](err); ok && fs.ds != nil {
			owner, seg = sd.Owner, sd.Seg
			problem = fmt.Sprintf("every written block fails its checksum, and %d verify under a seed one small change from the recorded one", sd.Blocks)
			action = "the seed is damaged, not the data: set it to the one the data verifies under"
			if len(sd.Rehash) > 0 {
				problem = fmt.Sprintf("%d written block(s) fail their checksum and verify under a seed one small change from the recorded one; %d, written since, verify under the recorded one", sd.Blocks, len(sd.Rehash))
				action = "the seed is damaged, not the data: set it to the one most of the data verifies under, and rehashed the blocks written since"
			}
			fix = func(tx *pram.Tx) error { return fs.ds.RewriteSeed(tx, sd.Seg, sd.Stored, sd.Seed, sd.Rehash) }
		} else if sc, ok := errors.AsType[*diskstore.SumCheckError](err); ok && fs.ds != nil {
			owner, seg = sc.Owner, sc.Seg
			lo, hi := sc.Blocks()
			problem = fmt.Sprintf("the checksums of the blocks at offsets [%d, %d) fail their page's check", lo*fs.ds.BlockSize(), hi*fs.ds.BlockSize())
			fix = func(tx *pram.Tx) error {
				var err error
				action, err = fs.ds.ReconcileSums(tx, sc.Seg, sc.Base, zeroBad)
				return err
			}
		} else {
			continue
		}
		if fd == nil {
			fd = &findings{}
			fs.checkLocked(CheckOptions{}, fd) // for the paths after the repairs
		}
		what := fd.path(Ino(owner))
		var ferr error // the cause, before update maps it to a sentinel
		err := fs.update(func(tx *pram.Tx) error {
			in, err := fs.inode(Ino(owner))
			if err != nil {
				return err
			}
			if !in.onDisk() || in.seg() != seg {
				return fmt.Errorf("%w: inode %d is no longer the large file it was", ErrInvalid, owner)
			}
			ferr = fix(tx)
			return ferr
		})
		if ferr != nil {
			err = ferr
		}
		if err != nil {
			left = append(left, fmt.Errorf("%s: %s: not repaired: %w", what, problem, err))
			continue
		}
		if action == "" {
			continue // consistent again after the fixes before it
		}
		fixes = append(fixes, Fix{Path: what, Problem: problem, Action: action})
	}
	return fixes, left
}

// badBlockFixes punches holes over the bad blocks (ZeroBadBlocks) or
// leaves them reported.
// Preconditions: fs.mu held exclusively.
func (fs *FS) badBlockFixes(o RepairOptions, bad []badBlock, failed *[]error) []Fix {
	if !o.ZeroBadBlocks || fs.ds == nil {
		return nil
	}
	var fixes []Fix
	fd := &findings{}
	fs.checkLocked(CheckOptions{}, fd) // for the paths after the repairs
	bs := int64(fs.ds.BlockSize())
	for i := range bad {
		b := &bad[i]
		if b.off < 0 || b.fixed {
			continue
		}
		what := fd.path(b.ino)
		err := fs.update(func(tx *pram.Tx) error {
			in, err := fs.inode(b.ino)
			if err != nil {
				return err
			}
			if !in.onDisk() || in.seg() == 0 {
				return fmt.Errorf("%w: inode %d is no longer a large file", ErrInvalid, b.ino)
			}
			return fs.ds.PunchHole(tx, in.seg(), b.off/bs*bs, bs)
		})
		if err != nil {
			*failed = append(*failed, fmt.Errorf("%s: zeroing the bad block at offset %d: %v", what, b.off, err))
			continue
		}
		fixes = append(fixes, Fix{Path: what,
			Problem: fmt.Sprintf("data at offset %d (disk block %d) fails its checksum", b.off, b.disk),
			Action:  fmt.Sprintf("replaced the %d-byte block by a hole (zeros): its data is lost", bs)})
		b.fixed = true
	}
	return fixes
}

// leakFindings turns the walk's leaks into findings: leaked inodes go to
// /lost+found, other allocations are freed when the walk is trustworthy,
// and leaked disk blocks too once no arena allocation is leaked.
// Preconditions: fs.mu held exclusively.
func (fs *FS) leakFindings(fd *findings, errs []error) {
	unsure := fd.aborted
	other, lists := 0, 0
	for _, err := range errs {
		if _, ok := errors.AsType[*diskstore.ListDamageError](err); ok {
			lists++ // rebuilt once the walk is trustworthy (listFindings)
			continue
		}
		if !harmless(err) {
			other++
		}
	}
	unsure = unsure || other > fd.handled
	offs := leakOffsets(errs)
	if len(offs) == 0 {
		switch {
		case unsure:
		case lists > 0:
			fs.listFindings(fd, lists, nil)
		default:
			fs.diskLeakFindings(fd, errs)
		}
		return
	}
	var inodes []inode
	var rest []pram.Off
	for _, off := range offs {
		if in, ok := fs.leakedInode(off); ok {
			inodes = append(inodes, in)
		} else {
			rest = append(rest, off)
		}
	}
	// Attach only the inodes no other leaked directory names: the rest are
	// reached through them in the next pass.
	named := make(map[Ino]bool)
	for _, in := range inodes {
		if !in.isDir() || in.data() == 0 || in.nlink() == 0 {
			continue
		}
		_ = fs.safely(func() error {
			return fs.dir(in).Scan(0, func(e dirhash.Entry, _ uint64) bool {
				if Ino(e.Ino) != in.ino {
					named[Ino(e.Ino)] = true
				}
				return true
			})
		})
	}
	var attach []inode
	for _, in := range inodes {
		if !named[in.ino] {
			attach = append(attach, in)
		}
	}
	if len(attach) == 0 && len(inodes) > 0 {
		attach = inodes[:1] // a cycle of directories: break it anywhere
	}
	for _, in := range attach {
		ino := in.ino
		if in.isDir() && in.nlink() == 0 {
			fd.add(phaseAttach, finding{key: fmt.Sprintf("free dir %d", ino), ino: ino,
				problem: "removed directory was never freed",
				apply: func(tx *pram.Tx) (string, error) {
					in, err := fs.inode(ino)
					if err != nil {
						return "", err
					}
					fs.orphanRemove(tx, in)
					done, err := fs.freeStep(tx, in)
					if err == nil && !done {
						err = fmt.Errorf("not freed in one step")
					}
					return "freed it", err
				}})
			continue
		}
		if !in.isDir() && in.nlink() == 0 && in.flags()&flagOrphan != 0 {
			// An unlinked file that a damaged orphan list lost (cut by
			// cutOrphans): it was to be freed, not found again in
			// /lost+found. Back on the list, the next pass frees it (or,
			// after a crash, the next Open).
			fd.add(phaseAttach, finding{key: fmt.Sprintf("reorphan %d", ino), ino: ino,
				problem: "unlinked file lost from the orphan list",
				apply: func(tx *pram.Tx) (string, error) {
					in, err := fs.inode(ino)
					if err != nil {
						return "", err
					}
					in.set32(tx, iFlags, in.flags()&^flagOrphan)
					fs.orphanAdd(tx, in)
					return "put it back on the list, to be freed", nil
				}})
			continue
		}
		fd.add(phaseAttach, finding{key: fmt.Sprintf("attach %d", ino), ino: ino,
			problem: fmt.Sprintf("%s with %d links is in no directory", typeName(in.typ()), in.nlink()),
			apply:   func(tx *pram.Tx) (string, error) { return fs.attachLocked(tx, ino) }})
	}
	if len(inodes) > 0 {
		return // leaks are freed once every inode found has a name
	}
	if lists > 0 && !unsure {
		// Before anything frees disk blocks into the lists; the
		// leaked segment lists keep their blocks until they are
		// destroyed or given back.
		var segs []pram.Off
		if fs.ds != nil {
			for _, off := range rest {
				if _, err := fs.ds.Owner(off); err == nil {
					segs = append(segs, off)
				}
			}
		}
		fs.listFindings(fd, lists, segs)
	}
	for _, off := range rest {
		off := off
		if fs.ds != nil {
			if owner, err := fs.ds.Owner(off); err == nil {
				if fs.lostSegOf(Ino(owner)) {
					// Its file lost the pointer (damaged or zero): give
					// the list, with all its data, back to it.
					fd.add(phaseLinks, finding{key: fmt.Sprintf("seg back %#x", off), ino: Ino(owner),
						problem: fmt.Sprintf("large file lost its segment list (found at %#x)", off),
						apply: func(tx *pram.Tx) (string, error) {
							in, err := fs.inode(Ino(owner))
							if err != nil || !fs.lostSegOf(in.ino) {
								return "", fmt.Errorf("%w: inode %d changed", ErrIO, owner)
							}
							in.set64(tx, iSeg, uint64(off))
							return "gave it back", nil
						}})
					continue
				}
				fd.add(phaseSegLeaks, finding{key: fmt.Sprintf("seg %#x", off), where: "disk",
					problem: fmt.Sprintf("large-file segment list at %#x belongs to no file", off),
					apply: func(tx *pram.Tx) (string, error) {
						if err := fs.ds.Walkable(off); err != nil {
							// Damaged too (an outside review: its Destroy
							// failed at every repair, its blocks stayed
							// leaked and the pair was refused for good).
							return fmt.Sprintf("it cannot be walked (%v): freed its header; the rest of it, and its disk blocks, are freed as leaks", err), fs.ds.Abandon(tx, off)
						}
						return "freed it and its disk blocks", fs.ds.Destroy(tx, off)
					}})
				continue
			}
		}
		if unsure {
			continue // reported as remaining
		}
		fd.add(phaseLeaks, finding{key: fmt.Sprintf("leak %#x", off), where: "arena heap",
			problem: fmt.Sprintf("allocation at %#x is reachable from nothing", off),
			apply: func(tx *pram.Tx) (string, error) {
				n, err := fs.h.SizeOf(off)
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("freed its %d bytes", n), fs.h.Free(tx, off)
			}})
	}
}

// diskLeakFindings turns the disk's wrong count of large files and the
// disk blocks the walk found neither free nor used into findings, one range
// per transaction. The caller has made sure the walk is trustworthy and no
// arena allocation is leaked: a leaked segment list owns blocks that look
// leaked (it is destroyed first), and every segment list was reached, so a
// wrong count is the counter's fault. While the disk counts more files than
// the walk reached, the blocks are left alone all the same: the count is
// corrected first (phaseCounters) and the next pass frees them.
// Preconditions: fs.mu held exclusively.
func (fs *FS) diskLeakFindings(fd *findings, errs []error) {
	ranges, count := diskLeaks(errs)
	if fs.ds == nil {
		return
	}
	if count != nil {
		n := count.Reached
		fd.add(phaseCounters, finding{key: fmt.Sprintf("disk files %d", n), where: "disk",
			problem: fmt.Sprintf("count of large files is %d", count.Counted),
			apply: func(tx *pram.Tx) (string, error) {
				fs.ds.SetFileCount(tx, n)
				return fmt.Sprintf("set it to %d", n), nil
			}})
		if count.Counted > count.Reached {
			return
		}
	}
	for _, r := range ranges {
		fd.add(phaseDiskLeaks, finding{key: fmt.Sprintf("disk leak %d %d", r.Begin, r.End), where: "disk",
			problem: fmt.Sprintf("blocks [%d, %d) are neither free nor used by a file", r.Begin, r.End),
			apply: func(tx *pram.Tx) (string, error) {
				return "returned them to the free map", fs.ds.ReclaimLeaked(tx, r)
			}})
	}
}

// listFindings adds the rebuild of the disk store's damaged lists (n
// errors) from the walk in fd: the caller has made sure the walk is
// trustworthy and every inode it found is reached; segs are the leaked
// segment lists, whose blocks stay used.
// Preconditions: fs.mu held exclusively.
func (fs *FS) listFindings(fd *findings, n int, segs []pram.Off) {
	dk := fd.dk
	if dk == nil || dk.Partial() {
		return // a file's lists are repaired first
	}
	fd.add(phaseDiskLists, finding{n: n, key: "disk lists", where: "disk",
		problem: fmt.Sprintf("%d problem(s) in the free map, quarantine or list of files with unsynced blocks", n),
		run: func() (string, error) {
			rep, err := dk.RebuildLists(segs)
			if err != nil {
				return "", err
			}
			var got []string
			if rep.FreeExtents > 0 || rep.FreeBlocks > 0 || slices.Contains(rep.Lists, "free map") {
				got = append(got, fmt.Sprintf("%d free blocks in %d extents, %d quarantined", rep.FreeBlocks, rep.FreeExtents, rep.Quarantined))
			}
			if slices.Contains(rep.Lists, diskstore.UnsyncedListName) {
				got = append(got, fmt.Sprintf("%d files with unsynced blocks", rep.UnsyncedFiles))
			}
			return fmt.Sprintf("rebuilt the %s from the files (%s; %d transaction(s))", strings.Join(rep.Lists, ", "), strings.Join(got, "; "), rep.Transactions), nil
		}})
}

// leakedInode reports whether the leaked allocation at off is an inode.
func (fs *FS) leakedInode(off pram.Off) (in inode, ok bool) {
	if off&(inodeSize-1) != 0 {
		return inode{}, false
	}
	err := fs.safely(func() error {
		var err error
		in, err = fs.inodeAt(off)
		if err == nil && modeToDT(in.mode()) == DT_UNKNOWN {
			err = ErrStale
		}
		return err
	})
	return in, err == nil && in.ino != RootIno
}

// allocFindings turns the allocator's repairable complaints (a page-map
// entry with stray fields, a damaged page count, order or kind, a non-zero
// reserved header word, damaged lists or counters) into fixes of the first
// phase: the rest
// of the walk judges allocations by the allocator's records, and leaks can
// be freed only once they are right.
func (fs *FS) allocFindings(fd *findings, errs []error) {
	derived, mapFixes := 0, 0
	for _, err := range errs {
		if _, ok := errors.AsType[*alloc.DerivedStateError](err); ok {
			derived++
		}
		_, bs := errors.AsType[*alloc.BadSizeError](err)
		_, sf := errors.AsType[*alloc.StrayFieldsError](err)
		_, uk := errors.AsType[*alloc.UnknownKindError](err)
		_, bo := errors.AsType[*alloc.BadOrderError](err)
		if bs || sf || uk || bo {
			mapFixes++
		}
	}
	// The lists follow from the page map: rebuild them once the map's own
	// fixes are made (a later pass), or the rebuild refuses the map.
	if derived > 0 && mapFixes == 0 {
		fd.add(phaseAlloc, finding{n: derived,
			key: "alloc rebuild", where: "arena heap",
			problem: fmt.Sprintf("%d problem(s) in the allocator's lists or counters", derived),
			run: func() (string, error) {
				rep, err := fs.h.RebuildLists()
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("rebuilt them from its page map (%d word(s) rewritten)", rep.Words), nil
			},
		})
	}
	for _, err := range errs {
		if _, ok := errors.AsType[*diskstore.StoreHeaderError](err); ok && fs.ds != nil {
			fd.add(phaseAlloc, finding{n: 1, key: "store headers", where: "disk",
				problem: err.Error(),
				apply: func(tx *pram.Tx) (string, error) {
					fs.ds.RewriteHeaders(tx)
					return "wrote the magics and the free map's copy of the disk's geometry again (from the disk superblock)", nil
				}})
		}
	}
	for _, err := range errs {
		if rw, ok := errors.AsType[*alloc.ReservedWordError](err); ok {
			off := rw.Off
			fd.add(phaseAlloc, finding{n: 1,
				key: fmt.Sprintf("alloc reserved %d", off), where: "arena heap", problem: rw.Error(),
				apply: func(tx *pram.Tx) (string, error) {
					if err := fs.h.ClearReserved(tx, off); err != nil {
						return "", err
					}
					return "zeroed it", nil
				},
			})
			continue
		}
		if bo, ok := errors.AsType[*alloc.BadOrderError](err); ok {
			pg := bo.Page
			fd.add(phaseAlloc, finding{n: 1,
				key: fmt.Sprintf("alloc order %d", pg), where: "arena heap", problem: bo.Error(),
				apply: func(tx *pram.Tx) (string, error) {
					j, err := fs.h.RepairOrder(tx, pg)
					if err != nil {
						return "", err
					}
					return fmt.Sprintf("set it to %d, the block it sits in", j), nil
				},
			})
			continue
		}
		if uk, ok := errors.AsType[*alloc.UnknownKindError](err); ok {
			pg := uk.Page
			fd.add(phaseAlloc, finding{n: 1,
				key: fmt.Sprintf("alloc kind %d", pg), where: "arena heap", problem: uk.Error(),
				apply: func(tx *pram.Tx) (string, error) {
					what, err := fs.h.RepairKind(tx, pg)
					if err == nil {
						return "its other fields prove it " + what + ": set its kind", nil
					}
					if fd.ac == nil {
						return "", err
					}
					// The entry's other fields are damaged too: the
					// objects the walk found in the page, and its slot
					// bitmap, may still tell.
					offs := fd.ac.MarkedInUnknown(pg)
					if len(offs) == 0 {
						// Inodes are validated before they are marked,
						// so a page of them shows none: its records do.
						offs = fs.inodeRecordsIn(pg)
					}
					what, ferr := fs.h.RepairKindFrom(tx, pg, offs)
					if ferr != nil {
						return "", fmt.Errorf("%w; %w", err, ferr)
					}
					return "it is " + what + ": set its entry", nil
				},
			})
			continue
		}
		if bs, ok := errors.AsType[*alloc.BadSizeError](err); ok {
			pg := bs.Page
			fd.add(phaseAlloc, finding{n: 1,
				key: fmt.Sprintf("alloc size %d", pg), where: "arena heap", problem: bs.Error(),
				apply: func(tx *pram.Tx) (string, error) {
					np, err := fs.h.RepairSize(tx, pg)
					if err != nil {
						return "", err
					}
					return fmt.Sprintf("set its page count to %d", np), nil
				},
			})
			continue
		}
		sf, ok := errors.AsType[*alloc.StrayFieldsError](err)
		if !ok {
			continue
		}
		pg, inside, head := sf.Page, sf.Inside, sf.Head
		fd.add(phaseAlloc, finding{n: 1,
			key: fmt.Sprintf("alloc entry %d", pg), where: "arena heap", problem: sf.Error(),
			apply: func(tx *pram.Tx) (string, error) {
				if err := fs.h.ClearStrayFields(tx, pg, inside, head); err != nil {
					return "", err
				}
				if inside {
					return fmt.Sprintf("zeroed page %d's entry", pg), nil
				}
				return fmt.Sprintf("cleared the unused fields of page %d's entry", pg), nil
			},
		})
	}
}

// lostSegOf reports whether ino is a live large file whose segment list
// pointer leads to no segment list.
// Preconditions: fs.mu held; fs.ds != nil.
func (fs *FS) lostSegOf(ino Ino) bool {
	in, err := fs.inode(ino)
	if err != nil || !in.isReg() || !in.onDisk() {
		return false
	}
	_, err = fs.ds.Owner(in.seg())
	return err != nil
}

// noSegList: large file ino has no usable segment list and no lost one
// names it (that one would be given back first, in the link phase). It
// gets an empty list: its size stays and its data reads as zeros, as what
// cannot be found cannot be read anyway.
func (ck *checker) noSegList(ino Ino) {
	if ck.fd == nil {
		return
	}
	fs := ck.fs
	ck.fd.add(phaseSegLeaks, finding{n: 1, key: fmt.Sprintf("new seg %d", ino), ino: ino,
		problem: "large file without a usable segment list",
		apply: func(tx *pram.Tx) (string, error) {
			if !fs.lostSegOf(ino) {
				return "", fmt.Errorf("%w: inode %d has a segment list now", ErrIO, ino)
			}
			seg, err := fs.ds.NewFile(tx, uint64(ino))
			if err != nil {
				return "", err
			}
			in, err := fs.inode(ino)
			if err != nil {
				return "", err
			}
			in.set64(tx, iSeg, uint64(seg))
			return "gave it an empty one: its data reads as zeros", nil
		}})
}

// safely runs a read of possibly damaged structures, a panic becoming an
// error.
func (fs *FS) safely(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrIO, r)
		}
	}()
	return fn()
}

// lostFound is the name of the directory that receives unnamed inodes.
const lostFound = "lost+found"

// attachLocked names inode ino "#<ino>" in /lost+found (made if missing).
// Preconditions: fs.mu held exclusively.
func (fs *FS) attachLocked(tx *pram.Tx, ino Ino) (string, error) {
	in, err := fs.inode(ino)
	if err != nil {
		return "", err
	}
	lf, made, err := fs.lostFoundLocked(tx)
	if err != nil {
		return "", err
	}
	d := fs.dir(lf)
	name := fmt.Sprintf("#%d", ino)
	for i := 1; ; i++ {
		if _, _, ok := d.Lookup([]byte(name)); !ok {
			break
		}
		name = fmt.Sprintf("#%d.%d", ino, i)
	}
	if err := d.Insert(tx, []byte(name), uint64(ino), in.dtype()); err != nil {
		return "", err
	}
	now := fs.now()
	lf.touchMC(tx, now)
	switch {
	case in.isDir():
		in.set64(tx, iParent, uint64(lf.ino))
		lf.set32(tx, iNlink, lf.nlink()+1)
	case in.nlink() == 0:
		in.set32(tx, iNlink, 1)
	}
	if in.flags()&flagOrphan != 0 { // flagged but not on the list
		in.set32(tx, iFlags, in.flags()&^flagOrphan)
		in.set64(tx, iOrphNext, 0)
		in.set64(tx, iOrphPrev, 0)
	}
	in.setTime(tx, iCtime, now)
	action := "moved it to /" + lostFound + "/" + name
	if made {
		action = "created /" + lostFound + " (mode 0700) and " + action
	}
	return action, nil
}

// lostFoundLocked finds /lost+found or makes it in tx.
// Preconditions: fs.mu held exclusively.
func (fs *FS) lostFoundLocked(tx *pram.Tx) (lf inode, made bool, err error) {
	root, err := fs.dirInode(RootIno)
	if err != nil {
		return inode{}, false, err
	}
	if ino, _, ok := fs.dir(root).Lookup([]byte(lostFound)); ok {
		lf, err := fs.dirInode(Ino(ino))
		if err != nil || lf.data() == 0 {
			return inode{}, false, fmt.Errorf("/%s is not a usable directory (%v): rename it and repair again", lostFound, err)
		}
		return lf, false, nil
	}
	// Its inode may come from mapReserve (spill.go): reserve set.
	lf, err = fs.createLocked(tx, root, lostFound, S_IFDIR|0o700, 0, Cred{}, fs.now(), func(in inode) error {
		d, err := dirhash.Create(tx, fs.h)
		if err != nil {
			return err
		}
		putU64(fs.a.Bytes(in.off+iData, 8), uint64(d)) // fresh record: unlogged
		return nil
	}, true)
	return lf, true, err
}

func typeName(t uint32) string {
	switch t {
	case S_IFREG:
		return "file"
	case S_IFDIR:
		return "directory"
	case S_IFLNK:
		return "symlink"
	}
	return "special file"
}

// NewDiskFreeMap lays a new, empty free map for the disk at diskPath in
// the arena at pramPath (diskstore.NewFreeMap), for `conquest fsck
// --repair` when Open refuses the pair because the free map is missing (a
// *diskstore.MissingRecordError for root slot 5); the repair's walk then
// frees the blocks no file uses. from and to are the root slot before and
// after; equal, nothing was written (the free map is there).
func NewDiskFreeMap(pramPath, diskPath string) (from, to pram.Off, err error) {
	return withArenaAndDisk(pramPath, diskPath, diskstore.NewFreeMap)
}

// NewDiskStats lays a new stats record for the disk at diskPath in the
// arena at pramPath (diskstore.NewStats), for `conquest fsck --repair` when
// Open refuses the pair because the stats record is missing (a
// *diskstore.MissingRecordError for root slot 6); the repair's walk then
// sets its count of large files. from and to are the root slot before and
// after; equal, nothing was written (the record is there).
func NewDiskStats(pramPath, diskPath string) (from, to pram.Off, err error) {
	return withArenaAndDisk(pramPath, diskPath, diskstore.NewStats)
}

// withArenaAndDisk opens the arena at pramPath, its allocator and the disk
// at diskPath, runs f, and closes them.
func withArenaAndDisk(pramPath, diskPath string, f func(*alloc.Heap, diskstore.Device) (pram.Off, pram.Off, error)) (from, to pram.Off, err error) {
	dev, err := diskstore.OpenDevice(diskPath, diskstore.DeviceOptions{})
	if err != nil {
		return 0, 0, err
	}
	defer dev.Close()
	a, err := pram.Open(pramPath)
	if err != nil {
		return 0, 0, err
	}
	h, err := alloc.Open(a)
	if err == nil {
		from, to, err = f(h, dev)
	}
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return from, to, fmt.Errorf("%s: %w", pramPath, err)
	}
	return from, to, nil
}

// RewriteHeapHeader writes the allocator's root slot and the static part
// of its header in the arena at pramPath as mkfs wrote them for this
// arena's geometry (alloc.RewriteStatic), for `conquest fsck --repair` when
// Open refuses the arena because they are damaged (an
// *alloc.StaticHeaderError). It returns how many bytes differed. Nothing
// else is read or changed.
func RewriteHeapHeader(pramPath string) (int, error) {
	a, err := pram.Open(pramPath)
	if err != nil {
		return 0, err
	}
	n, err := alloc.RewriteStatic(a)
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("%s: %w", pramPath, err)
	}
	return n, nil
}

// RebuildAllocator recomputes the allocator's lists and counters in the
// arena at pramPath from its page map (alloc.Heap.RebuildLists), for
// `conquest fsck --repair` when Open refuses the arena because they are
// damaged (an *alloc.DerivedStateError). Nothing else is read or changed.
func RebuildAllocator(pramPath string) (alloc.RebuildReport, error) {
	a, err := pram.Open(pramPath)
	if err != nil {
		return alloc.RebuildReport{}, err
	}
	h, err := alloc.OpenForRepair(a)
	var rep alloc.RebuildReport
	if err == nil {
		rep, err = h.RebuildLists()
	}
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return rep, fmt.Errorf("%s: %w", pramPath, err)
	}
	return rep, nil
}
