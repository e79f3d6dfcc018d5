package conquest

import (
	"encoding/binary"
	"fmt"

	"conquest/pram"
)

// Inode record: one 256-byte allocation, naturally aligned by alloc, so that
// its offset >> 8 is the inode number. All multi-byte fields are little
// endian. Fields are read through the inode accessors and changed only
// through a Tx (or written unlogged while the record is fresh in this Tx).
const (
	inodeSize  = 256
	inodeShift = 8
	inodeMagic = 0x45444f4e49514e43 // "CNQINODE" little endian

	iMagic    = 0   // u64 inodeMagic; zeroed when the inode is freed
	iIno      = 8   // u64 the inode's own number (RootIno for the root)
	iMode     = 16  // u32 S_IFMT | 07777
	iNlink    = 20  // u32
	iUid      = 24  // u32
	iGid      = 28  // u32
	iRdev     = 32  // u32 devices only
	iFlags    = 36  // u32 flag* bits
	iGen      = 40  // u64 generation
	iSize     = 48  // u64 bytes (regular, symlink); dirs report BlockSize
	iAtime    = 56  // Timespec: i64 sec, u32 nsec, u32 pad
	iMtime    = 72  //
	iCtime    = 88  //
	iCrtime   = 104 //
	iData     = 120 // u64 regular: small block or block index; dir: dirhash root; symlink: target
	iIdxLen   = 128 // u64 regular, index mode: capacity of the index in entries
	iAllocd   = 136 // u64 regular: bytes of data storage held (for st_blocks)
	iParent   = 144 // u64 dir: parent's inode number ("..")
	iXattr    = 152 // u64 xattr blob (0 = none)
	iOrphNext = 160 // u64 orphan list: next inode offset
	iOrphPrev = 168 // u64 orphan list: previous inode offset (0 = head)
	iSeg      = 176 // u64 regular, flagDisk: diskstore segment list offset
	iDiskCur  = 184 // u64 flagDisk: a shrink in progress frees disk data above this offset (0: none)
	iKeepEnd  = 192 // u64 flagDisk: fallocate(KEEP_SIZE) reserved disk blocks up to here (bytes); the trim at close keeps them
	iDiskRes  = 200 // [40]byte reserved for the large-file path
	iEnd      = 240 // [16]byte spare
)

// Inode flags.
const (
	flagSmall  uint32 = 1 << 0 // regular file: iData is one small block holding bytes [0, cap)
	flagOrphan uint32 = 1 << 1 // on the orphan list (root slot 3)
	flagDisk   uint32 = 1 << 2 // regular file: data on disk, segment list in iSeg (file_disk.go)
	// flagReserved: a regular file in the arena whose storage fallocate
	// reserved (or that came back from the disk with reserved blocks):
	// its move to the disk reserves disk blocks under every arena block
	// it holds, zeros or not (reserveOnMove).
	flagReserved uint32 = 1 << 3

	// regFlags are the flags a regular file may carry; other types only
	// flagOrphan.
	regFlags = flagSmall | flagOrphan | flagDisk | flagReserved
)

// Root slots owned by the core (see docs/DESIGN.md).
const (
	slotRoot    = 1 // root directory inode offset
	slotGen     = 2 // inode generation counter
	slotOrphans = 3 // orphan list head
	slotInodes  = 4 // inodes in use
)

// inode is a view of one inode record in the arena. It is a cheap value.
type inode struct {
	fs  *FS
	a   *pram.Arena
	off pram.Off
	ino Ino
}

func (in inode) u32(f pram.Off) uint32 { return in.a.U32(in.off + f) }
func (in inode) u64(f pram.Off) uint64 { return in.a.U64(in.off + f) }

func (in inode) mode() uint32       { return in.u32(iMode) }
func (in inode) typ() uint32        { return in.u32(iMode) & S_IFMT }
func (in inode) isDir() bool        { return in.typ() == S_IFDIR }
func (in inode) isReg() bool        { return in.typ() == S_IFREG }
func (in inode) nlink() uint32      { return in.u32(iNlink) }
func (in inode) uid() uint32        { return in.u32(iUid) }
func (in inode) gid() uint32        { return in.u32(iGid) }
func (in inode) flags() uint32      { return in.u32(iFlags) }
func (in inode) gen() uint64        { return in.u64(iGen) }
func (in inode) size() uint64       { return in.u64(iSize) }
func (in inode) data() pram.Off     { return pram.Off(in.u64(iData)) }
func (in inode) idxLen() uint64     { return in.u64(iIdxLen) }
func (in inode) allocd() uint64     { return in.u64(iAllocd) }
func (in inode) parent() Ino        { return Ino(in.u64(iParent)) }
func (in inode) xattr() pram.Off    { return pram.Off(in.u64(iXattr)) }
func (in inode) orphNext() pram.Off { return pram.Off(in.u64(iOrphNext)) }
func (in inode) orphPrev() pram.Off { return pram.Off(in.u64(iOrphPrev)) }
func (in inode) seg() pram.Off      { return pram.Off(in.u64(iSeg)) }
func (in inode) onDisk() bool       { return in.flags()&flagDisk != 0 }

func (in inode) time(f pram.Off) Timespec {
	return Timespec{Sec: int64(in.u64(f)), Nsec: in.u32(f + 8)}
}

func (in inode) set32(tx *pram.Tx, f pram.Off, v uint32) {
	if in.u32(f) != v {
		tx.Set32(in.off+f, v)
	}
}

func (in inode) set64(tx *pram.Tx, f pram.Off, v uint64) {
	if in.u64(f) != v {
		tx.Set64(in.off+f, v)
	}
}

func (in inode) setTime(tx *pram.Tx, f pram.Off, t Timespec) {
	if in.time(f) == t {
		return
	}
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:], uint64(t.Sec))
	binary.LittleEndian.PutUint32(b[8:], t.Nsec)
	tx.SetBytes(in.off+f, b[:])
}

// touchMC sets mtime and ctime to t (a change of contents).
func (in inode) touchMC(tx *pram.Tx, t Timespec) {
	in.setTime(tx, iMtime, t)
	in.setTime(tx, iCtime, t)
}

// dtype is the dirent type of the inode.
func (in inode) dtype() uint8 { return modeToDT(in.mode()) }

func modeToDT(mode uint32) uint8 {
	switch mode & S_IFMT {
	case S_IFREG:
		return DT_REG
	case S_IFDIR:
		return DT_DIR
	case S_IFLNK:
		return DT_LNK
	case S_IFIFO:
		return DT_FIFO
	case S_IFSOCK:
		return DT_SOCK
	case S_IFCHR:
		return DT_CHR
	case S_IFBLK:
		return DT_BLK
	}
	return DT_UNKNOWN
}

// attr is the stat view of the inode.
func (in inode) attr() Attr {
	at := Attr{
		Ino: in.ino, Gen: in.gen(), Mode: in.mode(), Nlink: in.nlink(),
		Uid: in.uid(), Gid: in.gid(), Size: in.size(), Blksize: BlockSize,
		Atime: in.time(iAtime), Mtime: in.time(iMtime), Ctime: in.time(iCtime), Crtime: in.time(iCrtime),
	}
	if in.isDir() && at.Nlink > MaxLinks {
		at.Nlink = 1 // more subdirectories than ext4 counts (maxDirNlink)
	}
	switch in.typ() {
	case S_IFREG:
		at.Blocks = (in.allocd() + 511) / 512
		if fs := in.fs; fs != nil && fs.wantDisk(in, in.size()) {
			// Waiting in the arena to move (move.go): shown as the disk
			// will hold it, so that the count does not change under a
			// kernel that caches it when the file moves.
			bs := fs.ds.BlockSize()
			at.Blocks = (in.allocd() + bs - 1) / bs * bs / 512
		}
		if in.onDisk() && in.fs != nil {
			at.Size = in.fs.fileSize(in)
			at.Blocks += in.fs.diskBytes(in) / 512
		}
	case S_IFDIR:
		at.Size = BlockSize
		at.Blocks = BlockSize / 512
	case S_IFLNK:
		if in.size() >= 60 { // ext4 keeps targets up to 59 bytes (60 with the NUL) in the inode
			at.Blocks = BlockSize / 512
		}
	case S_IFCHR, S_IFBLK:
		at.Rdev = in.u32(iRdev)
	}
	return at
}

// inodeOff maps an inode number to its record offset, without validation.
func (fs *FS) inodeOff(ino Ino) pram.Off {
	if ino == RootIno {
		return pram.Off(fs.a.Root(slotRoot))
	}
	if ino > Ino(^uint64(0)>>inodeShift) {
		return 0
	}
	return pram.Off(ino) << inodeShift
}

// inode validates an inode number (from the kernel, or from a directory
// entry) and returns its record. Anything that is not a live inode record is
// ErrStale: outside the heap, not a 256-byte allocation, no magic, or another
// inode's number (the root's natural number is not a second name for it);
// a damaged root is ErrIO.
func (fs *FS) inode(ino Ino) (inode, error) {
	in, err := fs.inodeRecord(ino)
	if err != nil && ino == RootIno {
		// The root cannot be stale: its record is damaged (ESTALE for the
		// mount point itself said nothing of that; ext4 says EIO).
		return in, fmt.Errorf("%w: the root directory's inode is damaged (%v)", ErrIO, err)
	}
	return in, err
}

// inodeRecord is inode without the root's own error.
func (fs *FS) inodeRecord(ino Ino) (inode, error) {
	off := fs.inodeOff(ino)
	if off == 0 || off&(inodeSize-1) != 0 || !fs.a.InHeap(off, inodeSize) {
		return inode{}, fmt.Errorf("%w: %d", ErrStale, ino)
	}
	if ino != RootIno && uint64(off) == fs.a.Root(slotRoot) {
		return inode{}, fmt.Errorf("%w: %d", ErrStale, ino)
	}
	if sz, err := fs.h.SizeOf(off); err != nil || sz != inodeSize {
		return inode{}, fmt.Errorf("%w: %d", ErrStale, ino)
	}
	in := inode{fs: fs, a: fs.a, off: off, ino: ino}
	if in.u64(iMagic) != inodeMagic || Ino(in.u64(iIno)) != ino {
		return inode{}, fmt.Errorf("%w: %d", ErrStale, ino)
	}
	return in, nil
}

// dirInode is inode(ino) that must be a directory (ErrNotDir otherwise).
func (fs *FS) dirInode(ino Ino) (inode, error) {
	in, err := fs.inode(ino)
	if err != nil {
		return in, err
	}
	if !in.isDir() {
		return in, ErrNotDir
	}
	return in, nil
}

// inodeAt is the inode whose record is at off (orphan list links).
func (fs *FS) inodeAt(off pram.Off) (inode, error) {
	ino := Ino(off >> inodeShift)
	if uint64(off) == fs.a.Root(slotRoot) {
		ino = RootIno
	}
	if pram.Off(ino)<<inodeShift != off && ino != RootIno {
		return inode{}, fmt.Errorf("%w: inode offset %d", ErrStale, off)
	}
	return fs.inode(ino)
}

// newInode allocates and initialises an inode record in tx (parent is the
// zero inode only for the root, in Mkfs). The record is
// fresh, so it is written unlogged; rollback frees it. The new inode has the
// caller's uid and the gid of the caller or, in a setgid directory, of the
// directory (new subdirectories inherit S_ISGID), as ext4 does.
// A new inode may not take the arena's mapReserve (spill.go) unless
// reserve is set (only for /lost+found made by Repair); one that fits in
// the free slot of an inode record a removed file left takes no page, and
// so none of the reserve (as on an ext4 out of inodes, a remove makes
// room for a create).
// Preconditions: fs.mu held exclusively.
func (fs *FS) newInode(tx *pram.Tx, parent inode, mode, rdev uint32, c Cred, now Timespec, reserve bool) (inode, error) {
	if fs.ds != nil && !reserve && fs.h.FreeSlots(inodeSize, 1) == 0 {
		if st := fs.h.Stats(); st.AvailBytes < fs.mapReserve(st)+inodeSize {
			return inode{}, ErrNoSpace
		}
	}
	off, err := fs.h.AllocZero(tx, inodeSize)
	if err != nil {
		return inode{}, err
	}
	if off&(inodeSize-1) != 0 {
		return inode{}, fmt.Errorf("%w: allocator returned unaligned inode offset %d", ErrIO, off)
	}
	gid := c.Gid
	if parent.a != nil && parent.mode()&S_ISGID != 0 {
		gid = parent.gid()
		if mode&S_IFMT == S_IFDIR {
			mode |= S_ISGID
		} else if mode&(S_ISGID|0o010) == S_ISGID|0o010 && !c.inGroupOrCapable(gid) {
			mode &^= S_ISGID // as inode_init_owner: caller not in the file's group
		}
	}
	gen := fs.a.Root(slotGen) + 1
	tx.Set64(pram.RootOff(slotGen), gen)
	tx.Set64(pram.RootOff(slotInodes), fs.a.Root(slotInodes)+1)

	b := fs.a.Bytes(off, inodeSize)
	clear(b)
	le := binary.LittleEndian
	ino := Ino(off >> inodeShift)
	le.PutUint64(b[iMagic:], inodeMagic)
	le.PutUint64(b[iIno:], uint64(ino))
	le.PutUint32(b[iMode:], mode)
	nlink := uint32(1)
	if mode&S_IFMT == S_IFDIR {
		nlink = 2
		le.PutUint64(b[iParent:], uint64(parent.ino))
	}
	le.PutUint32(b[iNlink:], nlink)
	le.PutUint32(b[iUid:], c.Uid)
	le.PutUint32(b[iGid:], gid)
	if t := mode & S_IFMT; t == S_IFCHR || t == S_IFBLK {
		le.PutUint32(b[iRdev:], rdev)
	}
	le.PutUint64(b[iGen:], gen)
	now = fs.newFileTime(mode, now)
	for _, f := range []int{iAtime, iMtime, iCtime, iCrtime} {
		le.PutUint64(b[f:], uint64(now.Sec))
		le.PutUint32(b[f+8:], now.Nsec)
	}
	return inode{fs: fs, a: fs.a, off: off, ino: ino}, nil
}

// freeInodeRecord releases an inode record whose contents are already freed.
// Preconditions: fs.mu held exclusively; the inode is in no directory and
// not on the orphan list.
func (fs *FS) freeInodeRecord(tx *pram.Tx, in inode) error {
	tx.Set64(in.off+iMagic, 0)
	tx.Set64(pram.RootOff(slotInodes), fs.a.Root(slotInodes)-1)
	return fs.h.Free(tx, in.off)
}
