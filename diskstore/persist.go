package diskstore

import (
	"slices"

	"conquest/pram"
)

// Persist flushes to the arena's backing store (pram.Arena.Persist) the
// arena metadata of the file at seg (its segment list, checksum pages,
// unsynced records) and of the free map (with the unsynced-file list and
// the quarantine) and stats: the second half of fsync, called after the
// transaction of Fsync has committed (Store.Commit). Fsync synced the disk
// data, so when Persist returns the file's contents survive a power failure
// as far as the store is concerned; the core persists the inode itself.
func (s *Store) Persist(seg pram.Off) error {
	type rng struct{ off, n uint64 }
	var rs []rng
	add := func(off pram.Off, n uint64) {
		if off != 0 && s.a.InRange(off, n) {
			rs = append(rs, rng{uint64(off), n})
		}
	}
	addList := func(l xlist) {
		add(l.hdr, xlistHeaderSize)
		h, err := l.head()
		if err != nil || h.nleaves == 0 {
			return
		}
		add(h.dir, uint64(h.dirCap*dirEntrySize))
		for i := 0; i < h.nleaves; i++ {
			if lf, err := l.leaf(h, i); err == nil {
				add(lf.off, l.leafBytes(lf))
			}
		}
	}
	add(s.fm, freeMapSize)
	add(s.st, statsSize)
	addList(s.freeList())
	addList(s.unsyncedFiles())
	addList(s.quarantineList())
	if seg != 0 {
		if err := s.validSeg(seg); err != nil {
			return err
		}
		add(seg, segListSize)
		addList(s.segs(seg))
		addList(s.unsyncedOf(seg))
		sl := s.sums(seg)
		addList(sl)
		_ = sl.walk(func(r rec) bool {
			add(pram.Off(r[1]), r[2]*8)
			return true
		})
	}
	// One msync per run of touching pages.
	slices.SortFunc(rs, func(a, b rng) int { return int(int64(a.off) - int64(b.off)) })
	var cur rng
	for _, r := range rs {
		lo, hi := r.off&^(pram.PageSize-1), (r.off+r.n+pram.PageSize-1)&^(pram.PageSize-1)
		if cur.n != 0 && lo <= cur.off+cur.n {
			cur.n = max(cur.n, hi-cur.off)
			continue
		}
		if cur.n != 0 {
			if err := s.a.Persist(pram.Off(cur.off), cur.n); err != nil {
				return err
			}
		}
		cur = rng{lo, hi - lo}
	}
	if cur.n != 0 {
		return s.a.Persist(pram.Off(cur.off), cur.n)
	}
	return nil
}
