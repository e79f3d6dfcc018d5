package conquest

import (
	"fmt"

	"conquest/alloc"
	"conquest/dirhash"
	"conquest/diskstore"
	"conquest/pram"
)

// Check is the full consistency walk (`conquest fsck`): starting at the
// root it visits every directory (dirhash's own check included), every
// inode reachable from one and every inode on the orphan list, and verifies
// link counts, ".." pointers, entry types, file storage and its recorded
// size, symlink targets, xattr blobs, the inode count and generation
// counter, and that orphans are exactly the unlinked inodes still in use.
// Every allocation reached is marked in an alloc.Checker, whose Finish
// reports anything allocated but unreachable (a leak) or reached twice.
// With a disk it also walks every large file's segment list, verifies the
// checksum of every written disk block, and accounts for every disk block
// (used by exactly one file, or free). An empty result means the file
// system is consistent. Check holds the shared lock: it sees the state
// between operations.
func (fs *FS) Check() []error { return fs.CheckWith(CheckOptions{VerifyData: true}) }

// CheckWith is Check with options: VerifyData off walks only the metadata
// (the disk's data blocks are not read); Progress reports the disk blocks
// accounted for.
func (fs *FS) CheckWith(o CheckOptions) (errs []error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	if fs.closed {
		return []error{fmt.Errorf("%w: file system is closed", ErrIO)}
	}
	return fs.checkLocked(o, nil)
}

// checkLocked is CheckWith; fd, if not nil, also receives what Repair can
// fix (repair.go).
// Preconditions: fs.mu held, shared or exclusively.
func (fs *FS) checkLocked(o CheckOptions, fd *findings) (errs []error) {
	ck := &checker{fs: fs, c: fs.h.NewChecker(), seen: make(map[Ino]*checkInfo), fd: fd, crashed: o.crashed}
	if fd != nil {
		fd.seen = ck.seen
		fd.ac = ck.c
	}
	defer func() {
		if r := recover(); r != nil {
			errs = append(ck.errs, fmt.Errorf("check aborted by a damaged structure: %v", r))
			if fd != nil {
				fd.aborted = true
			}
		}
	}()
	if fs.ds != nil {
		ck.dk = fs.ds.NewChecker(ck.c, diskstore.CheckOptions{VerifyData: o.VerifyData, Progress: o.Progress})
	}
	ck.walk()
	ck.orphans()
	ck.counters()
	ck.fallocRecord()
	if ck.dk != nil {
		ck.errs = append(ck.errs, ck.dk.Finish()...)
		if fd != nil {
			fd.dk = ck.dk
		}
		if o.VerifiedBlocks != nil {
			*o.VerifiedBlocks = ck.dk.VerifiedBlocks()
		}
	}
	ck.superCopy() // last: it must know whatever else reaches its record (supercopy.go)
	ck.errs = append(ck.errs, ck.c.Finish()...)
	return ck.errs
}

type checkInfo struct {
	parent  Ino    // with findings: the directory of the first name found
	name    string // and that name
	dtype   uint8  // and the type that entry records
	refs    uint32 // directory entries naming it
	subdirs uint32 // for directories: entries that are directories
	dir     bool
	orphan  bool // reached through the orphan list
	nlink   uint32
	gen     uint64
}

type checker struct {
	fs      *FS
	crashed bool // CheckOptions.crashed
	c       *alloc.Checker
	dk      *diskstore.Checker // nil without a disk
	seen    map[Ino]*checkInfo
	errs    []error
	fd      *findings // nil unless repairing
}

func (ck *checker) errorf(format string, args ...any) {
	ck.errs = append(ck.errs, fmt.Errorf(format, args...))
}

// walk visits the tree breadth first from the root.
func (ck *checker) walk() {
	fs := ck.fs
	root, err := fs.inode(RootIno)
	if err != nil {
		ck.errorf("root inode: %v", err)
		return
	}
	if !root.isDir() {
		ck.errorf("root inode is not a directory (mode %#o)", root.mode())
		return
	}
	if root.parent() != RootIno {
		ck.errorf("root's parent is %d, want itself", root.parent())
		ck.wrongParent(RootIno, root.parent(), RootIno)
	}
	ck.seen[RootIno] = &checkInfo{dir: true, nlink: root.nlink(), gen: root.gen()}
	ck.inodeContents(root)
	queue := []inode{root}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		di := ck.seen[d.ino]
		if d.data() == 0 {
			continue // reported by inodeContents
		}
		err := fs.dir(d).Scan(0, func(e dirhash.Entry, next uint64) bool {
			name := string(e.Name)
			if checkName(name) != nil || name == "." || name == ".." {
				ck.errorf("directory %d: bad entry name %q", d.ino, name)
				ck.badEntry(d.ino, name, e.Ino, "bad name")
			}
			in, err := fs.inode(Ino(e.Ino))
			if err != nil || Ino(e.Ino) == RootIno {
				ck.errorf("directory %d: entry %q names bad inode %d: %v", d.ino, name, e.Ino, err)
				ck.badEntry(d.ino, name, e.Ino, fmt.Sprintf("names inode %d, which is not a live inode", e.Ino))
				return true
			}
			// An inode of no valid type (bad mode) takes its type from the
			// entry (badMode), not the other way round.
			if e.Type != in.dtype() && in.dtype() != DT_UNKNOWN {
				ck.errorf("directory %d: entry %q has type %d, inode %d is type %d", d.ino, name, e.Type, in.ino, in.dtype())
				ck.wrongType(d.ino, name, in.ino, e.Type, in.dtype())
			}
			if in.isDir() {
				di.subdirs++
			}
			if info := ck.seen[in.ino]; info != nil {
				if info.dir {
					ck.errorf("directory %d is linked twice (again as %q in %d)", in.ino, name, d.ino)
					if in.parent() == d.ino && info.parent != d.ino && info.name != "" {
						// This is the name its ".." agrees with: the first is the extra one.
						ck.badEntry(info.parent, info.name, e.Ino, fmt.Sprintf("is a second name of directory %d", in.ino))
					} else {
						ck.badEntry(d.ino, name, e.Ino, fmt.Sprintf("is a second name of directory %d", in.ino))
					}
				}
				info.refs++
				return true
			}
			info := &checkInfo{refs: 1, dir: in.isDir(), nlink: in.nlink(), gen: in.gen()}
			if ck.fd != nil {
				info.parent, info.name, info.dtype = d.ino, name, e.Type
			}
			ck.seen[in.ino] = info
			ck.inodeContents(in)
			if in.isDir() {
				if in.parent() != d.ino {
					ck.errorf("directory %d (%q in %d) has parent %d", in.ino, name, d.ino, in.parent())
					ck.wrongParent(in.ino, in.parent(), d.ino)
				}
				queue = append(queue, in)
			}
			return true
		})
		if err != nil {
			ck.errorf("directory %d: scan: %v", d.ino, err)
		}
	}
	for ino, info := range ck.seen {
		switch {
		case info.dir && info.nlink != 2+info.subdirs:
			ck.errorf("directory %d: nlink %d, want 2 + %d subdirectories", ino, info.nlink, info.subdirs)
			ck.wrongNlink(ino, info.nlink, 2+info.subdirs)
		case !info.dir && info.nlink != info.refs:
			ck.errorf("inode %d: nlink %d, but %d directory entries", ino, info.nlink, info.refs)
			ck.wrongNlink(ino, info.nlink, info.refs)
		}
	}
}

// inodeContents marks the inode record and everything it owns.
func (ck *checker) inodeContents(in inode) {
	fs := ck.fs
	ck.c.Mark(in.off, fmt.Sprintf("inode %d", in.ino))
	report := func(format string, args ...any) {
		ck.errorf("inode %d: "+format, append([]any{in.ino}, args...)...)
	}
	if f := in.flags() &^ regFlags; f != 0 {
		report("unknown flags %#x", f)
		ck.badFlags(in.ino)
	}
	for _, f := range []pram.Off{iAtime, iMtime, iCtime, iCrtime} {
		if in.time(f).Nsec >= 1e9 {
			report("timestamp at %d has %d ns", f, in.time(f).Nsec)
			ck.badTime(in.ino, f)
		}
	}
	if in.typ() != S_IFREG && in.flags()&(regFlags&^flagOrphan) != 0 {
		report("small-file, disk or reserved flag on a non-regular inode")
		ck.badFlags(in.ino)
	}
	switch in.typ() {
	case S_IFREG:
		damaged := 0
		var shared []uint64
		fs.memCheck(ck.c, in, func(format string, args ...any) {
			damaged++
			report(format, args...)
		}, func(b uint64) { shared = append(shared, b) })
		if damaged > 0 && !in.onDisk() {
			ck.memDamage(in.ino, damaged)
		} else if len(shared) > 0 && !in.onDisk() {
			ck.sharedBlocks(in.ino, shared)
		} else if !in.onDisk() && in.size() > maxMemFileSize {
			report("size %d is past the %d bytes a file kept in the arena can hold", in.size(), uint64(maxMemFileSize))
			ck.memSizePastStorage(in.ino, fs.memDataEnd(in))
		} else if end, past := fs.memDataPastSize(in); past && in.flags()&flagOrphan == 0 {
			report("size %d is below the data it stores (to %d)", in.size(), end)
			ck.memSizeBelowData(in.ino, end)
		}
		ck.diskFile(in, report, damaged)
	case S_IFDIR:
		if in.nlink() == 0 {
			if in.data() != 0 {
				report("removed directory still has a table")
			}
			break
		}
		if in.data() == 0 {
			report("directory without a table")
			ck.badDirTable(in.ino, 1)
			break
		}
		derrs := fs.dir(in).Check(ck.c)
		ck.errs = append(ck.errs, derrs...)
		if len(derrs) > 0 {
			ck.badDirTable(in.ino, len(derrs))
		}
	case S_IFLNK:
		n, d := in.size(), in.data()
		if n == 0 || n > MaxSymlink || d == 0 {
			report("symlink of %d bytes at %d", n, d)
			ck.badSymlink(in.ino)
			break
		}
		ck.c.Mark(d, fmt.Sprintf("symlink target of inode %d", in.ino))
		if sz, err := fs.h.SizeOf(d); err != nil || sz < n {
			report("symlink target allocation of %d bytes for %d: %v", sz, n, err)
			ck.badSymlink(in.ino)
		}
	case S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK:
		if in.data() != 0 {
			report("special file has data at %d", in.data())
			ck.specialData(in.ino)
		}
	default:
		report("bad mode %#o", in.mode())
		if info := ck.seen[in.ino]; info != nil {
			ck.badMode(in.ino, info.dtype)
		}
	}
	if x := in.xattr(); x != 0 {
		ck.c.Mark(x, fmt.Sprintf("xattrs of inode %d", in.ino))
		es, err := fs.xattrs(in)
		bad := err != nil || len(es) == 0
		if err != nil {
			report("%v", err)
		}
		for _, e := range es {
			if checkXattrName(e.name) != nil || len(e.value) > MaxXattrValue {
				report("bad xattr %q (%d bytes)", e.name, len(e.value))
				bad = true
			}
		}
		if len(es) == 0 && err == nil {
			report("empty xattr blob")
		}
		if bad {
			ck.badXattrs(in.ino)
		}
	}
}

// diskFile checks the large-file state of a regular inode.
// memDamaged is how many problems memCheck reported in the arena storage
// a large file should not have.
func (ck *checker) diskFile(in inode, report func(string, ...any), memDamaged int) {
	switch {
	case !in.onDisk():
		if in.seg() != 0 || in.u64(iDiskCur) != 0 {
			report("arena file with a segment list at %d (shrink cursor %d)", in.seg(), in.u64(iDiskCur))
			ck.strayDiskFields(in.ino, in.seg(), in.u64(iDiskCur))
		}
	case in.seg() == 0 && in.u64(iDiskCur) == 0 && (in.data() != 0 || in.size() == 0):
		// Arena storage and nothing of the disk: an arena file whose disk
		// flag was set by damage (its storage's own problems, if any, are
		// repaired once it is an arena file again).
		report("large file without a segment list, with arena storage")
		ck.strayDiskFlag(in.ino, memDamaged)
	case ck.dk == nil:
		report("large file on a file system without a disk")
	case in.seg() == 0:
		report("large file without a segment list")
		ck.noSegList(in.ino)
	default:
		// memDamaged without arena data: its length fields damaged
		// (found by random damage), which the same drop zeroes.
		if (in.data() != 0 || in.u64(iDiskCur) != 0 || memDamaged > 0) && in.flags()&flagOrphan == 0 {
			report("large file keeps arena storage or disk data past its end and is not on the orphan list")
			ck.diskLeftovers(in.ino, in.u64(iDiskCur), memDamaged)
		}
		size := max(in.size(), in.u64(iDiskCur))
		errs := ck.dk.File(in.seg(), int64(size)) // its errors come back from Finish
		ck.badBlocks(in.ino, errs)
		ck.segMagic(in.ino, in.seg(), errs)
		ck.sumBases(in.ino, in.seg(), errs)
		ck.straySums(in.ino, in.seg(), errs)
		ck.badUnsynced(in.ino, in.seg(), errs)
		ck.badSumPages(in.ino, in.seg(), errs)
		ck.fileLists(in.ino, in.seg(), errs)
		ck.segBlocks(in.ino, in.seg(), errs)
		if in.u64(iDiskCur) == 0 {
			ck.sizeBelowData(in.ino, in.seg(), in.size(), errs)
		}
		if !ck.fs.ds.SegAllocation(in.seg()) {
			ck.noSegList(in.ino) // a pointer that leads nowhere
		}
	}
}

// orphans walks the orphan list.
func (ck *checker) orphans() {
	fs := ck.fs
	prev := pram.Off(0)
	n := 0
	for off := pram.Off(fs.a.Root(slotOrphans)); off != 0; {
		if n++; n > 1<<26 {
			ck.errorf("orphan list does not end")
			return
		}
		in, err := fs.inodeAt(off)
		if err != nil {
			ck.errorf("orphan list: %v", err)
			ck.cutOrphans(prev, fmt.Sprintf("leads to %d, not an inode", off))
			return
		}
		report := func(format string, args ...any) {
			ck.errorf("orphan %d: "+format, append([]any{in.ino}, args...)...)
		}
		if in.flags()&flagOrphan == 0 {
			report("on the list but not flagged")
			ck.cutOrphans(prev, fmt.Sprintf("leads to inode %d, which is not an orphan", in.ino))
			return
		}
		if in.orphPrev() != prev {
			report("back link %d, want %d", in.orphPrev(), prev)
		}
		info := ck.seen[in.ino]
		switch {
		case info != nil && info.orphan:
			report("on the orphan list twice")
			ck.cutOrphans(prev, fmt.Sprintf("comes back to inode %d", in.ino))
			return
		case in.nlink() != 0:
			if _, left := fs.cutsLeft[in.ino]; !ck.crashed && !left { // else a truncate the crash, or an error (finishCutAfter), interrupted
				report("has %d links (an unfinished truncate?)", in.nlink())
			}
		case info != nil:
			report("has no links but is in a directory")
		case !fs.vol.inUse(in.ino) && !ck.crashed: // else open at the crash
			report("unlinked, not open and not referenced, yet not freed")
			defer ck.stuckOrphan(in.ino) // after the fixes of its contents
		}
		if info == nil {
			info = &checkInfo{nlink: in.nlink(), gen: in.gen()}
			ck.seen[in.ino] = info
			ck.inodeContents(in)
		}
		info.orphan = true
		prev, off = off, in.orphNext()
	}
	for ino, info := range ck.seen {
		if info.orphan {
			continue
		}
		in, err := fs.inode(ino)
		if err == nil && in.flags()&flagOrphan != 0 {
			ck.errorf("inode %d is flagged orphan but not on the list", ino)
			ck.strayOrphanFlag(ino)
		}
	}
}

// fallocRecord checks root slots 7-10, the record of an unfinished
// fallocate (falloc_pending.go): empty, or naming a regular file in use
// (Open, or the next fallocate, gives its reservation back).
func (ck *checker) fallocRecord() {
	fs := ck.fs
	ino := Ino(fs.a.Root(slotFalloc))
	if ino == 0 {
		if fs.a.Root(slotFallocFrom)|fs.a.Root(slotFallocEnd)|fs.a.Root(slotFallocKeep) != 0 {
			ck.errorf("the record of an unfinished fallocate names no file but holds a range")
			ck.badFallocRecord()
		}
		return
	}
	if _, reached := ck.seen[ino]; !reached {
		ck.errorf("the record of an unfinished fallocate names inode %d, which is not in use", ino)
		ck.badFallocRecord()
	} else if _, err := fs.regInode(ino); err != nil {
		ck.errorf("the record of an unfinished fallocate names inode %d, which is not a regular file", ino)
		ck.badFallocRecord()
	}
}

// counters checks root slots 2 (generation) and 4 (inodes in use).
func (ck *checker) counters() {
	fs := ck.fs
	if got := fs.a.Root(slotInodes); got != uint64(len(ck.seen)) {
		ck.errorf("inode count is %d, %d inodes reached", got, len(ck.seen))
		ck.badCounter(slotInodes, "inode count", got, uint64(len(ck.seen)))
		ck.fdHandled()
	}
	gen, top := fs.a.Root(slotGen), uint64(0)
	for ino, info := range ck.seen {
		if info.gen > gen {
			ck.errorf("inode %d: generation %d above the counter %d", ino, info.gen, gen)
			ck.fdHandled()
		}
		top = max(top, info.gen)
	}
	if top > gen {
		ck.badCounter(slotGen, "generation counter", gen, top)
	}
}
