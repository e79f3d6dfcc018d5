package diskstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"conquest/pram"
)

// A segment list is the arena-resident description of one large file's data,
// kept with its inode (the core stores its offset). Header, segListSize bytes:
//
//	+0  magic   uint64 segListMagic
//	+8  owner   uint64 the core's inode number, for messages
//	+16 seed    uint64 random per file, mixed into every block checksum so a
//	                   block of another file (or of another offset) never
//	                   verifies
//	+24 blocks  uint64 disk blocks mapped (data and preallocated)
//	+32 segs    xlist of segments {fileBlock, diskBlock, count}: file blocks
//	            [fileBlock, fileBlock+count) live in disk blocks
//	            [diskBlock, diskBlock+count). Unmapped file blocks are holes.
//	+64 sums    xlist of checksum pages {base, page, cap, check}: the
//	            checksums of file blocks [base, base+cap), base a multiple of
//	            sumsPerPage, in an arena allocation of cap words (cap a power
//	            of two, grown on demand, so a small file's page is small);
//	            check is the page's check word (sumcheck.go), absent (three
//	            words) in arenas formatted before it.
//	+96 unsynced xlist of unsynced records {fileBlock, epoch, oldBlock,
//	            oldSum, keep}: the blocks published since the last device
//	            sync (unsynced.go); lazy, so that lists made before it
//	            existed (zeros there) read as empty.
//
// A block's checksum is 0 when the block holds only zeros or was never
// written (then its disk contents are never read: a preallocated block reads
// as zeros whatever the disk holds); otherwise it is blockSum of its data,
// which is never 0.
const (
	segListMagic   = 0x31474553514e4f43 // "CONQSEG1"
	segListSize    = 128
	slOffOwner     = 8
	slOffSeed      = 16
	slOffBlocks    = 24
	slOffSegs      = 32
	slOffSums      = 64
	segWords       = 3
	sumsPerPage    = 512
	minSumPageCap  = 16
	segRecordBytes = segWords * 8
)

func (s *Store) segs(seg pram.Off) xlist {
	return xlist{a: s.a, h: s.h, hdr: seg + slOffSegs, words: segWords, what: "segment"}
}

func (s *Store) sums(seg pram.Off) xlist {
	l := xlist{a: s.a, h: s.h, hdr: seg + slOffSums, words: s.sumWords(), what: "checksum page"}
	if s.sumChecks {
		l.keyFits = s.sumBaseFits
	}
	return l
}

// validSeg checks the header of the segment list at seg.
func (s *Store) validSeg(seg pram.Off) error {
	if !s.a.InHeap(seg, segListSize) || seg%8 != 0 {
		return fmt.Errorf("%w: segment list %d out of range", ErrCorrupt, seg)
	}
	if m := s.a.U64(seg); m != segListMagic {
		return &SegMagicError{Seg: seg, Magic: m}
	}
	return nil
}

func (s *Store) owner(seg pram.Off) uint64 { return s.a.U64(seg + slOffOwner) }

// NewFile creates an empty segment list for the file with inode number owner
// (used in messages) and returns its offset, which the core keeps with the
// inode.
func (s *Store) NewFile(tx *pram.Tx, owner uint64) (pram.Off, error) {
	return s.newFile(tx, owner, rand.Uint64())
}

// newFile is NewFile with the checksum seed given (Adopt: the staged
// blocks were hashed with it).
func (s *Store) newFile(tx *pram.Tx, owner, seed uint64) (pram.Off, error) {
	seg, err := s.h.AllocZero(tx, segListSize)
	if err != nil {
		return 0, err
	}
	b := freshBytes(s.h, s.a, seg, 0, segListSize) // written unlogged
	le := binary.LittleEndian
	le.PutUint64(b[0:], segListMagic)
	le.PutUint64(b[slOffOwner:], owner)
	le.PutUint64(b[slOffSeed:], seed)
	le.PutUint32(b[slOffSegs+xhWords:], segWords)
	le.PutUint32(b[slOffSums+xhWords:], uint32(s.sumWords()))
	le.PutUint32(b[slOffUnsynced+xhWords:], unsyncedWords)
	tx.Set64(s.st+stOffFiles, s.a.U64(s.st+stOffFiles)+1)
	return seg, nil
}

// Owner is the inode number the segment list at seg records (fsck uses it
// to give a lost list back to its file).
func (s *Store) Owner(seg pram.Off) (uint64, error) {
	if err := s.validSeg(seg); err != nil {
		return 0, err
	}
	return s.owner(seg), nil
}

// SetOwner changes the inode number recorded for messages.
func (s *Store) SetOwner(tx *pram.Tx, seg pram.Off, owner uint64) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	tx.Set64(seg+slOffOwner, owner)
	return nil
}

// DiskBytes is the disk space the file holds (data and preallocation), for
// st_blocks.
func (s *Store) DiskBytes(seg pram.Off) (uint64, error) {
	if err := s.validSeg(seg); err != nil {
		return 0, err
	}
	return s.a.U64(seg+slOffBlocks) * s.bs, nil
}

// segment is one validated segment record.
type segment struct {
	fb    uint64 // first file block
	disk  Block
	count uint64
}

func (x segment) end() uint64 { return x.fb + x.count }

// fileBlocks is how many blocks a file of MaxFileSize bytes spans: no
// segment reaches past it.
func (s *Store) fileBlocks() uint64 { return (MaxFileSize + s.bs - 1) / s.bs }

func (s *Store) segAt(l xlist, c xcur) (segment, error) {
	r := l.get(c)
	x := segment{r[0], Block(r[1]), r[2]}
	if x.count == 0 || x.disk < 1 || uint64(x.disk)+x.count > s.super.Blocks || uint64(x.disk)+x.count < x.count ||
		x.fb+x.count < x.fb || x.fb+x.count > s.fileBlocks() {
		return x, fmt.Errorf("%w: segment list %d: segment file block %d, disk %d, %d blocks",
			ErrCorrupt, l.hdr-slOffSegs, x.fb, x.disk, x.count)
	}
	return x, nil
}

// span describes the file blocks from fb on: n blocks mapped at disk, or
// (disk 0) a hole of n blocks (math.MaxUint64-fb after the last segment).
type span struct {
	disk Block
	n    uint64
}

// lookup maps file block fb.
func (s *Store) lookup(seg pram.Off, fb uint64) (span, error) {
	l := s.segs(seg)
	c, ok, err := l.seekLE(fb)
	if err != nil {
		return span{}, err
	}
	if ok {
		x, err := s.segAt(l, c)
		if err != nil {
			return span{}, err
		}
		if fb < x.end() {
			return span{x.disk + Block(fb-x.fb), x.end() - fb}, nil
		}
	}
	c, ok, err = l.seekGE(fb)
	if err != nil {
		return span{}, err
	}
	if !ok {
		return span{0, math.MaxUint64 - fb}, nil
	}
	x, err := s.segAt(l, c)
	if err != nil {
		return span{}, err
	}
	return span{0, x.fb - fb}, nil
}

// mappedEnd is one past the last mapped file block (0 if none).
func (s *Store) mappedEnd(seg pram.Off) (uint64, error) {
	l := s.segs(seg)
	c, ok, err := l.last()
	if err != nil || !ok {
		return 0, err
	}
	x, err := s.segAt(l, c)
	return x.end(), err
}

// mapRange maps the unmapped file blocks [fb, fb+n) to disk [disk, disk+n),
// merging with neighbouring segments that continue on disk.
func (s *Store) mapRange(tx *pram.Tx, seg pram.Off, fb uint64, disk Block, n uint64) error {
	l := s.segs(seg)
	tx.Set64(seg+slOffBlocks, s.a.U64(seg+slOffBlocks)+n)
	pc, pok, err := l.seekLE(fb)
	if err != nil {
		return err
	}
	if pok {
		p, err := s.segAt(l, pc)
		if err != nil {
			return err
		}
		if p.end() > fb {
			return fmt.Errorf("%w: mapping file block %d, already mapped by segment at %d", ErrCorrupt, fb, p.fb)
		}
		if p.end() == fb && p.disk+Block(p.count) == disk {
			// Extend p, then absorb the next segment if it continues too.
			total := p.count + n
			nc, nok, err := l.seekGE(fb + n)
			if err != nil {
				return err
			}
			if nok {
				nx, err := s.segAt(l, nc)
				if err != nil {
					return err
				}
				if nx.fb == fb+n && nx.disk == disk+Block(n) {
					if err := l.remove(tx, nc); err != nil {
						return err
					}
					total += nx.count
					if pc, _, err = l.seekLE(fb); err != nil {
						return err
					}
				}
			}
			return l.set(tx, pc, rec{p.fb, uint64(p.disk), total})
		}
	}
	nc, nok, err := l.seekGE(fb)
	if err != nil {
		return err
	}
	if nok {
		nx, err := s.segAt(l, nc)
		if err != nil {
			return err
		}
		if nx.fb < fb+n {
			return fmt.Errorf("%w: mapping file blocks [%d, %d), segment at %d", ErrCorrupt, fb, fb+n, nx.fb)
		}
		if nx.fb == fb+n && nx.disk == disk+Block(n) {
			return l.set(tx, nc, rec{fb, uint64(disk), n + nx.count})
		}
	}
	err = l.insert(tx, rec{fb, uint64(disk), n})
	if errors.Is(err, errListFull) {
		err = fmt.Errorf("%w: file too fragmented for its segment list", ErrFileTooBig)
	}
	return err
}

// unmapRange removes the mapping of file blocks [fb, end) and returns the
// disk extents it covered (the caller frees them).
func (s *Store) unmapRange(tx *pram.Tx, seg pram.Off, fb, end uint64) ([]extent, error) {
	l := s.segs(seg)
	var out []extent
	var removed uint64
	for {
		c, ok, err := l.seekLE(fb)
		if err != nil {
			return nil, err
		}
		var x segment
		if ok {
			if x, err = s.segAt(l, c); err != nil {
				return nil, err
			}
		}
		if !ok || x.end() <= fb {
			if c, ok, err = l.seekGE(fb); err != nil {
				return nil, err
			}
			if !ok {
				break
			}
			if x, err = s.segAt(l, c); err != nil {
				return nil, err
			}
		}
		if x.fb >= end {
			break
		}
		ob, oe := max(x.fb, fb), min(x.end(), end)
		out = append(out, extent{x.disk + Block(ob-x.fb), x.disk + Block(oe-x.fb)})
		removed += oe - ob
		switch {
		case ob == x.fb && oe == x.end():
			err = l.remove(tx, c)
		case ob == x.fb:
			err = l.set(tx, c, rec{oe, uint64(x.disk) + (oe - x.fb), x.end() - oe})
		case oe == x.end():
			err = l.set(tx, c, rec{x.fb, uint64(x.disk), ob - x.fb})
		default:
			if err = l.set(tx, c, rec{x.fb, uint64(x.disk), ob - x.fb}); err == nil {
				err = l.insert(tx, rec{oe, uint64(x.disk) + (oe - x.fb), x.end() - oe})
				if errors.Is(err, errListFull) {
					err = fmt.Errorf("%w: file too fragmented for its segment list", ErrFileTooBig)
				}
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if removed > 0 {
		held := s.a.U64(seg + slOffBlocks)
		if removed > held {
			return nil, fmt.Errorf("%w: segment list %d holds %d blocks, unmapped %d", ErrCorrupt, seg, held, removed)
		}
		tx.Set64(seg+slOffBlocks, held-removed)
	}
	return out, nil
}

// sumPage is one validated checksum page record.
type sumPage struct {
	base uint64
	page pram.Off
	cap  uint64
	chk  uint64 // the check word (sumFormatChecked), else 0
}

// rec is the list record of p.
func (p sumPage) rec() rec { return rec{p.base, uint64(p.page), p.cap, p.chk} }

func (s *Store) sumPageAt(l xlist, c xcur) (sumPage, error) {
	r := l.get(c)
	p := sumPage{r[0], pram.Off(r[1]), r[2], r[3]}
	if !s.sumPageSane(p) {
		return p, fmt.Errorf("%w: checksum page base %d at %d, capacity %d", ErrCorrupt, p.base, p.page, p.cap)
	}
	return p, nil
}

// sumPageSane reports whether the record p can be what it says: an aligned
// base, a capacity in range, and a page that is an allocation holding it.
// (A page pointer into free memory would read as checksums of zero, which
// means "never written": the file's blocks would read as zeros.)
func (s *Store) sumPageSane(p sumPage) bool {
	if p.base%sumsPerPage != 0 || p.cap < 1 || p.cap > sumsPerPage || !s.a.InHeap(p.page, p.cap*8) || p.page%8 != 0 {
		return false
	}
	size, err := s.h.SizeOf(p.page)
	return err == nil && size >= p.cap*8
}

// getSums fills out with the checksums of file blocks fb, fb+1, ...
func (s *Store) getSums(seg pram.Off, fb uint64, out []uint64) error {
	l := s.sums(seg)
	for len(out) > 0 {
		base := fb &^ (sumsPerPage - 1)
		idx := fb - base
		k := min(uint64(len(out)), sumsPerPage-idx)
		c, ok, err := l.seekLE(base)
		if err != nil {
			return err
		}
		clear(out[:k])
		if ok {
			p, err := s.sumPageAt(l, c)
			if err != nil {
				return err
			}
			if p.base == base {
				for i := idx; i < min(idx+k, p.cap); i++ {
					out[i-idx] = s.a.U64(p.page + pram.Off(8*i))
				}
			}
		}
		out = out[k:]
		fb += k
	}
	return nil
}

func allZero(v []uint64) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}

func wordsBytes(v []uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}

// setSums stores the checksums of file blocks fb, fb+1, ... through tx,
// and keeps the check words of their pages (sumcheck.go).
func (s *Store) setSums(tx *pram.Tx, seg pram.Off, fb uint64, vals []uint64) error {
	return s.putSums(tx, seg, fb, vals, true)
}

// setSumsRaw stores checksums without changing the check words: for a
// repair that puts back the value an entry had before damage changed it
// (the check word still counts that value).
func (s *Store) setSumsRaw(tx *pram.Tx, seg pram.Off, fb uint64, vals []uint64) error {
	return s.putSums(tx, seg, fb, vals, false)
}

// putSums is setSums; check says whether the pages' check words follow.
func (s *Store) putSums(tx *pram.Tx, seg pram.Off, fb uint64, vals []uint64, check bool) error {
	check = check && s.sumChecks
	l := s.sums(seg)
	for len(vals) > 0 {
		base := fb &^ (sumsPerPage - 1)
		idx := fb - base
		k := min(uint64(len(vals)), sumsPerPage-idx)
		chunk := vals[:k]
		vals, fb = vals[k:], fb+k
		// Only the part up to the last non-zero value needs room.
		need := uint64(0)
		for i := range chunk {
			if chunk[i] != 0 {
				need = idx + uint64(i) + 1
			}
		}
		c, p, ok, err := s.sumPageOf(l, base)
		if err != nil {
			return err
		}
		// delta is what the written entries change in the check word.
		delta := func(w uint64) uint64 {
			if !check {
				return 0
			}
			d := termsOf(base+idx, chunk[:w])
			for i := idx; i < min(idx+w, p.cap); i++ {
				d -= sumTerm(base+i, s.a.U64(p.page+pram.Off(8*i)))
			}
			return d
		}
		if !ok {
			if need == 0 {
				continue
			}
			pg, pcap, err := s.newSumPage(tx, need, 0, 0)
			if err != nil {
				return err
			}
			// Fresh page, written unlogged; entries past need are zeros.
			copy(freshBytes(s.h, s.a, pg, 8*idx, 8*(need-idx)), wordsBytes(chunk[:need-idx]))
			np := sumPage{base, pg, pcap, 0}
			if check {
				np.chk = termsOf(base+idx, chunk[:need-idx])
			}
			err = l.insert(tx, np.rec())
			if errors.Is(err, errListFull) {
				err = fmt.Errorf("%w: file too large for its checksum list", ErrFileTooBig)
			}
			if err != nil {
				return err
			}
			continue
		}
		if need > p.cap {
			pg, pcap, err := s.newSumPage(tx, need, p.page, p.cap)
			if err != nil {
				return err
			}
			w := min(k, pcap-idx) // fresh page, written unlogged
			np := sumPage{base, pg, pcap, p.chk + delta(w)}
			copy(freshBytes(s.h, s.a, pg, 8*idx, 8*w), wordsBytes(chunk[:w]))
			if err := l.set(tx, c, np.rec()); err != nil {
				return err
			}
			if err := s.h.Free(tx, p.page); err != nil {
				return err
			}
			continue
		}
		if idx < p.cap {
			w := min(k, p.cap-idx)
			if d := delta(w); d != 0 {
				p.chk += d
				if err := l.set(tx, c, p.rec()); err != nil {
					return err
				}
			}
			tx.SetBytes(p.page+pram.Off(8*idx), wordsBytes(chunk[:w]))
		}
	}
	return nil
}

// sumPageOf finds the checksum page of l whose entries start at file
// block base: ok is false if there is none (c then points at the page
// before, if any).
func (s *Store) sumPageOf(l xlist, base uint64) (c xcur, p sumPage, ok bool, err error) {
	c, ok, err = l.seekLE(base)
	if err != nil || !ok {
		return c, p, false, err
	}
	if p, err = s.sumPageAt(l, c); err != nil {
		return c, p, false, err
	}
	return c, p, p.base == base, nil
}

// reserveSums makes room in seg's checksum pages for file blocks
// [fb, end) without changing any checksum, so that writing those blocks
// later takes no arena memory for their checksums: fallocate's promise
// (Allocate) that a write into what it reserved does not fail for want of
// space holds with a full arena too. Pages hold zeros where nothing was
// written; check words do not change (a zero contributes no term).
func (s *Store) reserveSums(tx *pram.Tx, seg pram.Off, fb, end uint64) error {
	l := s.sums(seg)
	for fb < end {
		base := fb &^ (sumsPerPage - 1)
		need := min(end-base, sumsPerPage)
		fb = base + sumsPerPage
		c, p, ok, err := s.sumPageOf(l, base)
		if err != nil {
			return err
		}
		switch {
		case !ok:
			pg, pcap, err := s.newSumPage(tx, need, 0, 0)
			if err != nil {
				return err
			}
			err = l.insert(tx, sumPage{base, pg, pcap, 0}.rec())
			if errors.Is(err, errListFull) {
				err = fmt.Errorf("%w: file too large for its checksum list", ErrFileTooBig)
			}
			if err != nil {
				return err
			}
		case need > p.cap:
			pg, pcap, err := s.newSumPage(tx, need, p.page, p.cap)
			if err != nil {
				return err
			}
			if err := l.set(tx, c, sumPage{base, pg, pcap, p.chk}.rec()); err != nil {
				return err
			}
			if err := s.h.Free(tx, p.page); err != nil {
				return err
			}
		}
	}
	return nil
}

// newSumPage allocates a zeroed checksum page holding at least need
// entries, copying the old page's cap entries (if any) into it.
func (s *Store) newSumPage(tx *pram.Tx, need uint64, old pram.Off, oldCap uint64) (pram.Off, uint64, error) {
	pcap := uint64(minSumPageCap)
	for pcap < need {
		pcap *= 2
	}
	pg, err := s.h.AllocZero(tx, pcap*8)
	if err != nil {
		return 0, 0, err
	}
	if old != 0 {
		copy(freshBytes(s.h, s.a, pg, 0, oldCap*8), s.a.View(old, oldCap*8))
	}
	return pg, pcap, nil
}

// clearSums zeroes the checksums of file blocks [fb, end), freeing pages
// that lie wholly inside the range, and keeps the check words of the pages
// it clears in part.
func (s *Store) clearSums(tx *pram.Tx, seg pram.Off, fb, end uint64) error {
	return s.zeroSums(tx, seg, fb, end, s.sumChecks)
}

// zeroSums is clearSums; check says whether the check words follow (not
// for a repair that drops an entry damage made up).
func (s *Store) zeroSums(tx *pram.Tx, seg pram.Off, fb, end uint64, check bool) error {
	l := s.sums(seg)
	for fb < end {
		c, ok, err := l.seekGE(fb &^ (sumsPerPage - 1))
		if err != nil || !ok {
			return err
		}
		p, err := s.sumPageAt(l, c)
		if err != nil {
			return err
		}
		if p.base >= end {
			return nil
		}
		if p.base >= fb && end-p.base >= sumsPerPage {
			if err := s.h.Free(tx, p.page); err != nil {
				return err
			}
			if err := l.remove(tx, c); err != nil {
				return err
			}
			continue
		}
		// A page the range covers in part: clear the covered entries.
		lo, hi := max(fb, p.base)-p.base, min(end-p.base, p.cap)
		if lo < hi {
			if check {
				var d uint64
				for i := lo; i < hi; i++ {
					d += sumTerm(p.base+i, s.a.U64(p.page+pram.Off(8*i)))
				}
				if d != 0 {
					p.chk -= d
					if err := l.set(tx, c, p.rec()); err != nil {
						return err
					}
				}
			}
			tx.Zero(p.page+pram.Off(8*lo), (hi-lo)*8)
		}
		fb = p.base + sumsPerPage
	}
	return nil
}

// Trim frees the blocks of the file wholly beyond size bytes without
// touching the last partial block: it drops the preallocation of a growing
// file (call it when the last handle closes). Blocks beyond the end of a
// file hold no data, so nothing visible changes.
func (s *Store) Trim(tx *pram.Tx, seg pram.Off, size int64) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	if size < 0 || size > MaxFileSize {
		return fmt.Errorf("%w: size %d", ErrFileTooBig, size)
	}
	nb := (uint64(size) + s.bs - 1) / s.bs
	s.mu.Lock()
	fs := s.files[seg]
	var bufEnd int64
	if fs != nil {
		bufEnd = fs.end()
	}
	s.mu.Unlock()
	if bufEnd > size {
		nb = (uint64(bufEnd) + s.bs - 1) / s.bs // keep room for buffered data
	}
	return s.dropFrom(tx, seg, nb)
}

// dropFrom unmaps and releases file blocks >= nb and clears their checksums
// and unsynced records.
func (s *Store) dropFrom(tx *pram.Tx, seg pram.Off, nb uint64) error {
	xs, err := s.unmapRange(tx, seg, nb, math.MaxUint64)
	if err != nil {
		return err
	}
	if err := s.clearSums(tx, seg, nb, math.MaxUint64); err != nil {
		return err
	}
	if err := s.dropUnsynced(tx, seg, nb, math.MaxUint64); err != nil {
		return err
	}
	s.bump(seg)
	return s.release(tx, xs)
}

// Walkable reports whether seg's segment, checksum and unsynced-block
// lists can be walked to their ends, as Destroy must, and are made of live
// allocations (a pass of fsck --repair may have freed those of a list it
// could not walk as leaks); an error names the damage.
func (s *Store) Walkable(seg pram.Off) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	for _, l := range []xlist{s.segs(seg), s.sums(seg), s.unsyncedOf(seg)} {
		if err := l.live(); err != nil {
			return err
		}
		if err := l.walk(func(rec) bool { return true }); err != nil {
			return err
		}
	}
	return nil
}

// Abandon frees the header of a segment list that belongs to no file and
// cannot be walked (Walkable), for fsck --repair, where Destroy would meet
// the damage: its other arena allocations and its disk blocks are then
// reached by nothing, and the repair frees them as leaks. The count of
// files drops by one, and the list of files with unsynced blocks forgets
// it (when that list is damaged too, the repair rebuilds it from the
// files).
func (s *Store) Abandon(tx *pram.Tx, seg pram.Off) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	if err := s.unregisterUnsynced(tx, seg); err != nil && !errors.Is(err, ErrCorrupt) {
		return err
	}
	s.mu.Lock()
	s.dropBufferLocked(seg, 0)
	s.mu.Unlock()
	tx.Set64(seg, 0) // the magic
	if err := s.h.Free(tx, seg); err != nil {
		return err
	}
	if n := s.a.U64(s.st + stOffFiles); n > 0 {
		tx.Set64(s.st+stOffFiles, n-1)
	}
	s.mu.Lock()
	if fs := s.files[seg]; fs != nil {
		delete(s.files, seg)
		s.onAbortLocked(func() { s.files[seg] = fs })
	}
	s.mu.Unlock()
	s.cache.drop(seg)
	return nil
}

// Destroy frees all disk blocks and arena storage of the file at seg (unlink
// of the last link, or moving the file back into the arena). Buffered data
// of the file is dropped.
func (s *Store) Destroy(tx *pram.Tx, seg pram.Off) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	s.mu.Lock()
	s.dropBufferLocked(seg, 0)
	s.mu.Unlock()
	if err := s.dropFrom(tx, seg, 0); err != nil {
		return err
	}
	if err := s.segs(seg).destroy(tx); err != nil {
		return err
	}
	if err := s.sums(seg).destroy(tx); err != nil {
		return err
	}
	tx.Set64(seg, 0) // the magic: a stale reference is detected
	if err := s.h.Free(tx, seg); err != nil {
		return err
	}
	if n := s.a.U64(s.st + stOffFiles); n > 0 {
		tx.Set64(s.st+stOffFiles, n-1)
	}
	s.mu.Lock()
	if fs := s.files[seg]; fs != nil && fs.empty() {
		delete(s.files, seg)
		s.onAbortLocked(func() { s.files[seg] = fs })
	}
	s.mu.Unlock()
	s.cache.drop(seg) // its entries no longer match: free them early
	return nil
}
