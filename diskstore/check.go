package diskstore

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"conquest/alloc"
	"conquest/pram"
)

// CheckOptions tunes a consistency walk.
type CheckOptions struct {
	// VerifyData reads every written block and checks it against its
	// checksum (`conquest fsck`); otherwise only the metadata is walked.
	VerifyData bool
	// Progress, if set, is called as blocks are accounted for, with the
	// number done and the total (the used blocks of the free map).
	Progress func(done, total uint64)
}

// Checker is the disk store's part of the file system's consistency walk:
// the core calls File for every large file it reaches and then Finish,
// which checks that every disk block is used by exactly one file or free.
// It marks every arena allocation it reaches in the alloc.Checker and never
// panics on a damaged arena.
type Checker struct {
	s     *Store
	c     *alloc.Checker
	o     CheckOptions
	used  []uint64 // bitmap of blocks reached (files, then free extents)
	files uint64
	done  uint64
	total uint64
	errs  []error
	buf   []byte   // verify staging, allocated on first use
	sums  []uint64 // checksums of one batch

	unsynced     map[pram.Off]bool         // files reached that have unsynced records
	passed       map[pram.Off]uint64       // blocks that verified, by file (VerifyData)
	seeds        map[pram.Off]*seedFinding // a damaged seed's search, by file (seed.go)
	seedSearches int                       // searches made (maxSeedSearches)
	verified     uint64                    // files whose data was verified (VerifyData)
	liveOld      []oldRef                  // old blocks of live records: must be quarantined

	// For RebuildLists (rebuild.go).
	partial  bool           // a file's blocks could not all be walked
	fileUsed []uint64       // used at the start of Finish: the files' blocks
	damaged  [numLists]bool // store lists the walk found damaged
	finished bool
}

// oldRef is the old block of a live unsynced record.
type oldRef struct {
	owner, fb uint64
	old       Block
	epoch     uint64 // the record's
}

// NewChecker starts a walk. c receives the marks of the store's arena
// allocations.
func (s *Store) NewChecker(c *alloc.Checker, o CheckOptions) *Checker {
	return &Checker{s: s, c: c, o: o, used: make([]uint64, (s.super.Blocks+63)/64), total: s.Stats().UsedBlocks,
		unsynced: make(map[pram.Off]bool), passed: make(map[pram.Off]uint64), seeds: make(map[pram.Off]*seedFinding)}
}

func (k *Checker) add(format string, args ...any) {
	k.errs = append(k.errs, fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...)))
}

func (k *Checker) test(b Block) bool { return k.used[b/64]&(1<<(b%64)) != 0 }
func (k *Checker) set(b Block)       { k.used[b/64] |= 1 << (b % 64) }

// VerifiedBlocks is the number of written blocks whose data verified
// against their checksums so far (VerifyData).
func (k *Checker) VerifiedBlocks() uint64 {
	var n uint64
	for _, p := range k.passed {
		n += p
	}
	return n
}

func (k *Checker) progress(n uint64) {
	k.done += n
	if k.o.Progress != nil {
		k.o.Progress(k.done, k.total)
	}
}

// File checks the large file whose segment list is at seg and whose size is
// size bytes: structure, disk blocks (in range, not shared with another
// file), checksums only on mapped blocks and none beyond the end of the
// file, the block count, the unsynced records (on mapped blocks, their old
// blocks quarantined); with VerifyData also every block's data (a
// *DataChecksumError per bad block) and that the bytes after size in the
// last block are zeros. It returns the errors found
// in this file (Finish returns them too).
func (k *Checker) File(seg pram.Off, size int64) []error {
	first := len(k.errs)
	s := k.s
	if err := s.validSeg(seg); err != nil {
		k.errs = append(k.errs, err)
		k.partial = true
		return k.errs[first:]
	}
	k.files++
	k.c.Mark(seg, "diskstore segment list")
	owner := s.owner(seg)
	if size < 0 || size > MaxFileSize {
		k.add("inode %d: size %d", owner, size)
		size = 0
	}
	sl, sm, su := s.segs(seg), s.sums(seg), s.unsyncedOf(seg)
	structOK := true
	for i, l := range []xlist{sl, sm, su} {
		for _, err := range l.check(k.c) {
			k.errs = append(k.errs, &FileListError{Owner: owner, Seg: seg, List: []string{FileSegments, FileSums, FileUnsynced}[i], Err: err})
			structOK = false
		}
	}
	if !structOK {
		k.partial = true
		return k.errs[first:]
	}
	eof := (uint64(size) + s.bs - 1) / s.bs
	var held, prevEnd uint64
	var segsSeen, empty []segment // empty: segments of count 0 (a count damaged to 0?)
	err := sl.walk(func(r rec) bool {
		x := segment{r[0], Block(r[1]), r[2]}
		if x.count == 0 && x.disk >= 1 && uint64(x.disk) < s.super.Blocks {
			empty = append(empty, x) // reported below unless its count is mended
			return true
		}
		if x.count == 0 || x.disk < 1 || uint64(x.disk)+x.count > s.super.Blocks || uint64(x.disk)+x.count < x.count {
			k.add("inode %d: segment at file block %d maps disk blocks [%d, +%d) outside the disk", owner, x.fb, x.disk, x.count)
			return true
		}
		if len(segsSeen) > 0 && x.fb < prevEnd {
			k.add("inode %d: segment at file block %d overlaps the previous one (ends %d)", owner, x.fb, prevEnd)
		}
		prevEnd = x.end()
		held += x.count
		for b := x.disk; b < x.disk+Block(x.count); b++ {
			if k.test(b) {
				k.add("inode %d: disk block %d (file block %d) is used by another file too", owner, b, x.fb+uint64(b-x.disk))
			}
			k.set(b)
		}
		segsSeen = append(segsSeen, x)
		return true
	})
	if err != nil {
		k.errs = append(k.errs, err)
		k.partial = true
		return k.errs[first:]
	}
	var mended *SegCountError
	if h := s.a.U64(seg + slOffBlocks); h != held {
		all := append(slices.Clone(segsSeen), empty...)
		slices.SortFunc(all, func(a, b segment) int { return cmp.Compare(a.fb, b.fb) })
		if mend, ok := s.segCountMend(seg, all, h, held); ok {
			k.errs = append(k.errs, mend)
			mended = mend
		} else {
			k.errs = append(k.errs, &SegBlocksError{Owner: owner, Seg: seg, Counted: h, Mapped: held})
		}
	}
	for _, x := range empty {
		if mended == nil || mended.FileBlock != x.fb {
			k.add("inode %d: segment at file block %d maps disk blocks [%d, +%d) outside the disk", owner, x.fb, x.disk, x.count)
		}
	}
	// Checksums: pages sane, non-zero only on mapped blocks below EOF.
	var bases []uint64 // the records' bases, for a damaged one's neighbours
	if s.sumChecks {
		_ = sm.walk(func(r rec) bool { bases = append(bases, r[0]); return true })
	}
	ri := -1
	err = sm.walk(func(r rec) bool {
		ri++
		p := sumPage{r[0], pram.Off(r[1]), r[2], r[3]}
		if !s.sumPageSane(p) {
			k.errs = append(k.errs, &BadSumPageError{Owner: owner, Seg: seg, Base: p.base, Page: p.page, Cap: p.cap})
			return true
		}
		k.c.Mark(p.page, "diskstore checksum page")
		if s.sumChecks {
			if t := s.pageTerms(p); t != p.chk {
				lo, hi := uint64(0), uint64(math.MaxUint64)
				if ri > 0 && ri-1 < len(bases) {
					lo = bases[ri-1] + 1
				}
				if ri+1 < len(bases) {
					hi = bases[ri+1]
				}
				if want, ok := s.findSumBase(r, lo, hi); ok {
					// Its entries belong to other blocks: not strays.
					k.errs = append(k.errs, &SumBaseError{Owner: owner, Seg: seg, Base: p.base, Want: want})
					return true
				}
				k.errs = append(k.errs, &SumCheckError{Owner: owner, Seg: seg, Base: p.base, Stored: p.chk, Computed: t})
			}
		}
		for i := uint64(0); i < p.cap; i++ {
			if s.a.U64(p.page+pram.Off(8*i)) == 0 {
				continue
			}
			fb := p.base + i
			if sp, err := s.lookup(seg, fb); err != nil || sp.disk == 0 {
				k.errs = append(k.errs, &StraySumError{Owner: owner, Seg: seg, Block: fb, BeyondEnd: fb >= eof})
				continue
			}
			if fb >= eof {
				k.errs = append(k.errs, &BeyondEndError{Owner: owner, Seg: seg, Block: fb, Size: size})
			}
		}
		return true
	})
	if err != nil {
		k.errs = append(k.errs, err)
	}
	k.fileUnsynced(seg, owner)
	for _, x := range segsSeen {
		if k.o.VerifyData {
			k.verify(seg, x, size)
		}
		k.progress(x.count)
	}
	if k.o.VerifyData {
		k.seedResult(seg)
		k.verified++
	}
	return k.errs[first:]
}

// fileUnsynced checks the unsynced records of seg.
func (k *Checker) fileUnsynced(seg pram.Off, owner uint64) {
	s := k.s
	cur := s.epoch()
	n := 0
	err := s.unsyncedOf(seg).walk(func(r rec) bool {
		n++
		e, err := s.uentryOf(seg, r)
		if err != nil {
			k.errs = append(k.errs, &BadUnsyncedError{Owner: owner, Seg: seg, Block: r[0], Err: err})
			return true
		}
		if sp, err := s.lookup(seg, e.fb); err != nil || sp.disk == 0 {
			k.errs = append(k.errs, &BadUnsyncedError{Owner: owner, Seg: seg, Block: e.fb,
				Err: fmt.Errorf("%w: inode %d: unsynced record for file block %d, which is not mapped", ErrCorrupt, owner, e.fb)})
		}
		if e.epoch >= cur && e.old != 0 {
			k.liveOld = append(k.liveOld, oldRef{owner, e.fb, e.old, e.epoch})
		}
		return true
	})
	if err != nil {
		k.errs = append(k.errs, err)
	}
	if n > 0 {
		k.unsynced[seg] = true
	}
}

// verify reads the written blocks of segment x and checks their checksums,
// and that no byte after size is non-zero.
func (k *Checker) verify(seg pram.Off, x segment, size int64) {
	s := k.s
	bs := s.bs
	batch := max(uint64(flushBatch)/bs, 1)
	if k.buf == nil {
		k.buf, k.sums = AlignedBuffer(int(batch*bs)), make([]uint64, batch)
	}
	buf, sums := k.buf, k.sums
	for i := uint64(0); i < x.count; i += batch {
		n := min(batch, x.count-i)
		fb := x.fb + i
		if err := s.getSums(seg, fb, sums[:n]); err != nil {
			k.errs = append(k.errs, err)
			return
		}
		for a := uint64(0); a < n; {
			if sums[a] == 0 {
				a++
				continue
			}
			b := a + 1
			for b < n && sums[b] != 0 {
				b++
			}
			dst := buf[:(b-a)*bs]
			if !s.runVerifies(seg, fb+a, x.disk+Block(i+a), sums[a:b], dst) {
				// Find every bad block of the run, not only the first.
				for c := a; c < b; c++ {
					if err := s.readVerified(seg, fb+c, x.disk+Block(i+c), sums[c:c+1], dst[:bs]); err != nil {
						if errors.Is(err, ErrDataChecksum) {
							got := s.blockSum(s.a.U64(seg+slOffSeed), fb+c, dst[:bs])
							switch {
							case sumDamaged(sums[c], got):
								err = &SumDamageError{Owner: s.owner(seg), Seg: seg, Block: fb + c, Disk: x.disk + Block(i+c), Stored: sums[c], Data: got}
							case k.seedExplains(seg, fb+c, sums[c], dst[:bs]):
								continue // reported once for the file (seedResult)
							case k.seedSumDamaged(seg, fb+c, sums[c], dst[:bs], &got):
								// Its record is damaged too, judged under the found seed.
								err = &SumDamageError{Owner: s.owner(seg), Seg: seg, Block: fb + c, Disk: x.disk + Block(i+c), Stored: sums[c], Data: got}
							default:
								err = &DataChecksumError{Inode: s.owner(seg), Offset: int64((fb + c) * bs), Disk: x.disk + Block(i+c), Err: err}
							}
						}
						k.errs = append(k.errs, err)
					} else {
						k.seedPassed(seg, fb+c, fb+c+1)
					}
				}
			} else {
				k.seedPassed(seg, fb+a, fb+b)
				if end := uint64(size); end%bs != 0 && end/bs >= fb+a && end/bs < fb+b {
					// The run holds the last block: its tail must be zeros.
					at := (end/bs - (fb + a)) * bs
					for j, c := range dst[at+end%bs : at+bs] {
						if c != 0 {
							k.add("inode %d: byte %d after the end of the file (size %d) is not zero", s.owner(seg), end+uint64(j), size)
							break
						}
					}
				}
			}
			a = b
		}
	}
}

// Finish checks the quarantine (in range, disjoint, not used by a file, its
// count, holding the old block of every live unsynced record), the list of
// files with unsynced records (exactly the files File found with records),
// the free map (sorted, disjoint, coalesced, in range, its count), that no
// free block is used by a file or quarantined, that every block is either
// used, quarantined or free (no leaks: *LeakedBlocksError, which
// Store.ReclaimLeaked can free), and the file count (*FileCountError); it
// marks the allocations of these lists. It returns every error of the walk.
func (k *Checker) Finish() []error {
	s := k.s
	k.c.Mark(s.fm, "diskstore free map")
	k.c.Mark(s.st, "diskstore stats")
	if area := s.intentArea(); area != 0 {
		k.c.Mark(area, "diskstore intent area")
		for _, r := range s.readIntents() {
			k.add("inode %d: an append in place to file block %d (disk block %d) was not undone", s.owner(r.seg), r.fb, r.disk)
		}
	} else if s.a.U64(s.st+stOffIntents) != 0 {
		k.add("stats record points to a bad intent area %d", s.a.U64(s.st+stOffIntents))
	}
	if err := s.headerErr(); err != nil {
		k.errs = append(k.errs, err)
	}
	k.finished = true
	k.fileUsed = slices.Clone(k.used)
	k.finishUnsynced()
	l := s.freeList()
	n := len(k.errs)
	if errs := l.check(k.c); len(errs) > 0 {
		k.errs = append(k.errs, errs...)
		k.listDamage(listFree, n)
		return k.errs
	}
	var free uint64
	var prev extent
	first := true
	err := l.walk(func(r rec) bool {
		x := extent{Block(r[0]), Block(r[1])}
		if x.b < 1 || x.e <= x.b || uint64(x.e) > s.super.Blocks {
			k.add("free extent [%d, %d) outside the disk's data blocks [1, %d)", x.b, x.e, s.super.Blocks)
			return true
		}
		if !first && x.b <= prev.e {
			if x.b == prev.e {
				k.add("free extents [%d, %d) and [%d, %d) are not coalesced", prev.b, prev.e, x.b, x.e)
			} else {
				k.add("free extents [%d, %d) and [%d, %d) overlap", prev.b, prev.e, x.b, x.e)
			}
		}
		first, prev = false, x
		free += x.len()
		for b := x.b; b < x.e; b++ {
			if k.test(b) {
				k.add("disk block %d is free but used by a file", b)
			}
			k.set(b)
		}
		return true
	})
	if err != nil {
		k.errs = append(k.errs, err)
	}
	if got := s.freeBlocks(); got != free {
		k.add("free map counts %d free blocks, its extents hold %d", got, free)
	}
	k.listDamage(listFree, n)
	// Leaks: blocks neither used nor free.
	const showLeaks = 10
	var leaks uint64
	var more []BlockRange // past the first showLeaks
	shown := 0
	for b := Block(1); uint64(b) < s.super.Blocks; b++ {
		if k.used[b/64] == ^uint64(0) && b%64 == 0 && uint64(b)+64 <= s.super.Blocks {
			b += 63
			continue
		}
		if k.test(b) {
			continue
		}
		e := b
		for uint64(e) < s.super.Blocks && !k.test(e) {
			e++
		}
		leaks += uint64(e - b)
		r := BlockRange{b, e}
		if shown < showLeaks {
			k.errs = append(k.errs, &LeakedBlocksError{Ranges: []BlockRange{r}, Total: r.len()})
			shown++
		} else {
			more = append(more, r)
		}
		b = e
	}
	if shown == showLeaks {
		k.errs = append(k.errs, &LeakedBlocksError{Ranges: more, Summary: true, Total: leaks})
	}
	if n := s.a.U64(s.st + stOffFiles); n != k.files {
		k.errs = append(k.errs, &FileCountError{Counted: n, Reached: k.files})
	}
	return k.errs
}

// finishUnsynced checks the quarantine and the list of files with unsynced
// records, and marks the quarantined blocks used.
func (k *Checker) finishUnsynced() {
	s := k.s
	cur := s.tag()
	ql := s.quarantineList()
	n := len(k.errs)
	if errs := ql.check(k.c); len(errs) > 0 {
		k.errs = append(k.errs, errs...)
	} else {
		var held uint64
		var prev Block
		err := ql.walk(func(r rec) bool {
			x := extent{Block(r[0]), Block(r[1])}
			if x.b < 1 || x.e <= x.b || uint64(x.e) > s.super.Blocks || x.b < prev || r[2] > cur {
				k.add("quarantine extent [%d, %d) of epoch %d (now %d) is out of range or order", x.b, x.e, r[2], cur)
				return true
			}
			prev = x.e
			held += x.len()
			for b := x.b; b < x.e; b++ {
				if k.test(b) {
					k.add("disk block %d is quarantined but used by a file", b)
				}
				k.set(b)
			}
			k.progress(x.len())
			return true
		})
		if err != nil {
			k.errs = append(k.errs, err)
		}
		if q := s.quarantined(); q != held {
			k.add("stats count %d quarantined blocks, the quarantine holds %d", q, held)
		}
		for _, o := range k.liveOld {
			c, ok, err := ql.seekLE(uint64(o.old))
			// Quarantined in the record's epoch (or later, by a rebuild):
			// kept until the record is stale.
			if err != nil || !ok || Block(ql.get(c)[1]) <= o.old || ql.get(c)[2] < o.epoch {
				k.add("inode %d: file block %d keeps its synced contents in disk block %d, which is not quarantined until its record of epoch %d is stale",
					o.owner, o.fb, o.old, o.epoch)
			}
		}
	}
	k.listDamage(listQuarantine, n)
	fl := s.unsyncedFiles()
	n = len(k.errs)
	defer k.listDamage(listUnsynced, n)
	if errs := fl.check(k.c); len(errs) > 0 {
		k.errs = append(k.errs, errs...)
		return
	}
	listed := make(map[pram.Off]bool)
	err := fl.walk(func(r rec) bool {
		seg := pram.Off(r[0])
		listed[seg] = true
		if !k.unsynced[seg] {
			k.add("segment list %d is on the unsynced list but was not reached or has no unsynced records", seg)
		}
		return true
	})
	if err != nil {
		k.errs = append(k.errs, err)
	}
	for seg := range k.unsynced {
		if !listed[seg] {
			k.add("inode %d has unsynced records but is not on the unsynced list", s.owner(seg))
		}
	}
}
