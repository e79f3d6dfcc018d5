package diskstore

import (
	"fmt"
	"slices"

	"conquest/pram"
)

// The store's own lists (the free map, the quarantine, the list of files
// with unsynced records) hold nothing of their own: each follows from the
// files' segment lists and unsynced records. When the consistency walk finds
// one damaged it reports a *ListDamageError, and Checker.RebuildLists
// recomputes it from what the walk reached, as e2fsck rebuilds its block
// bitmaps from the inodes. Extension of DESIGN.md.

// The store's lists, for ListDamageError.List.
const (
	listFree = iota
	listQuarantine
	listUnsynced
	numLists
)

// UnsyncedListName names the list of files with unsynced blocks in
// ListDamageError.List and ListRebuild.Lists.
const UnsyncedListName = "list of files with unsynced blocks"

var listNames = [numLists]string{"free map", "quarantine", UnsyncedListName}

// ListDamageError is damage to one of the store's own lists (the free map,
// the quarantine or the list of files with unsynced blocks): a damaged
// structure, records out of range or order, a wrong count, or records that
// disagree with the files. It wraps the walk's error, which is ErrCorrupt.
type ListDamageError struct {
	List string
	Err  error
}

func (e *ListDamageError) Error() string { return e.Err.Error() }
func (e *ListDamageError) Unwrap() error { return e.Err }

// listDamage wraps the errors added since n as damage to list i, and
// reports whether there were any.
func (k *Checker) listDamage(i, n int) bool {
	for j := n; j < len(k.errs); j++ {
		k.errs[j] = &ListDamageError{List: listNames[i], Err: k.errs[j]}
		k.damaged[i] = true
	}
	return len(k.errs) > n
}

// Partial reports whether the walk could not account for every block of
// some file (a damaged list of it): RebuildLists refuses until that is
// repaired.
func (k *Checker) Partial() bool { return k.partial }

// VerifiedFiles is the number of files whose blocks the walk read and
// verified (CheckOptions.VerifyData).
func (k *Checker) VerifiedFiles() uint64 { return k.verified }

// ListRebuild says what RebuildLists rewrote.
type ListRebuild struct {
	Lists         []string // the lists rebuilt
	FreeExtents   int      // extents of the new free map
	FreeBlocks    uint64   // blocks it holds
	Quarantined   uint64   // blocks of the new quarantine
	UnsyncedFiles int      // files on the new list of files with unsynced blocks
	Transactions  int
}

// rebuildRoom is the journal room RebuildLists keeps for one more insert
// (a leaf and the shifted tail of a directory, see xlist).
const rebuildRoom = maxLeafBytes + maxDirEntries*dirEntrySize + 4096

// RebuildLists rewrites the store's lists that the walk (ended by Finish)
// found damaged, from what it reached:
//
//   - the free map (rebuilt together with the quarantine, whichever of the
//     two is damaged): every data block that no file reached uses, no
//     segment list in extra uses, and no live unsynced record keeps;
//   - the quarantine: the blocks live unsynced records keep, of this epoch.
//     Blocks it held for other reasons (freed since the last sync) become
//     free: the arena's state that freed them is what fsck leaves;
//   - the list of files with unsynced blocks: the files reached, and the
//     segment lists in extra, that have unsynced records.
//
// extra are the segment lists the caller found leaked in the arena (it
// destroys them, or gives them back to their files, later): their blocks
// are not free. The old lists' allocations are abandoned, and the next walk
// reports them leaked. It refuses (ErrCorrupt, nothing changed) when a
// file's blocks could not all be walked, or a segment list in extra cannot
// be read: blocks it may use would be made free. Only the caller knows that
// the walk reached every file (no inode is lost to damage).
//
// The free map of a fragmented disk may not fit one transaction: the lists
// are emptied in the first, and the free extents are added in as many more
// as they take, so an interruption leaves blocks neither free nor used
// (leaked, for the next repair), never a block free and used. It runs with
// the store otherwise idle (fsck).
func (k *Checker) RebuildLists(extra []pram.Off) (rep ListRebuild, err error) {
	s := k.s
	if !k.finished {
		return rep, fmt.Errorf("%w: rebuilding the store's lists before the walk finished", ErrCorrupt)
	}
	if k.partial {
		return rep, fmt.Errorf("%w: a large file's blocks could not all be walked (repair it first)", ErrCorrupt)
	}
	freeMap := k.damaged[listFree] || k.damaged[listQuarantine]
	unsynced := k.damaged[listUnsynced]
	if !freeMap && !unsynced {
		return rep, nil
	}
	var free, quar []extent
	if freeMap {
		used := slices.Clone(k.fileUsed)
		test := func(b Block) bool { return used[b/64]&(1<<(b%64)) != 0 }
		set := func(b Block) { used[b/64] |= 1 << (b % 64) }
		for _, seg := range extra {
			if err := s.validSeg(seg); err != nil {
				return rep, fmt.Errorf("leaked segment list %d: %w", seg, err)
			}
			err := s.segs(seg).walk(func(r rec) bool {
				x := segment{r[0], Block(r[1]), r[2]}
				if x.count == 0 || x.disk < 1 || uint64(x.disk)+x.count > s.super.Blocks || uint64(x.disk)+x.count < x.count {
					return true // outside the disk: nothing to keep
				}
				for b := x.disk; b < x.disk+Block(x.count); b++ {
					set(b)
				}
				return true
			})
			if err != nil {
				return rep, fmt.Errorf("leaked segment list %d: %w", seg, err)
			}
		}
		olds := make([]Block, 0, len(k.liveOld))
		for _, o := range k.liveOld {
			if o.old >= 1 && uint64(o.old) < s.super.Blocks && !test(o.old) {
				olds = append(olds, o.old)
				set(o.old)
			}
		}
		slices.Sort(olds)
		for _, b := range olds {
			if n := len(quar); n > 0 && quar[n-1].e == b {
				quar[n-1].e++
			} else {
				quar = append(quar, extent{b, b + 1})
			}
			rep.Quarantined++
		}
		for b := Block(1); uint64(b) < s.super.Blocks; b++ {
			if test(b) {
				continue
			}
			e := b
			for uint64(e) < s.super.Blocks && !test(e) {
				e++
			}
			free = append(free, extent{b, e})
			rep.FreeBlocks += uint64(e - b)
			b = e
		}
		rep.FreeExtents = len(free)
		rep.Lists = append(rep.Lists, listNames[listFree], listNames[listQuarantine])
	}
	var files []uint64
	if unsynced {
		for seg := range k.unsynced {
			files = append(files, uint64(seg))
		}
		// A leaked list keeps its place until it is given back to its
		// file or destroyed (which takes it off the list).
		for _, seg := range extra {
			if n, err := s.unsyncedOf(seg).length(); err == nil && n > 0 && !k.unsynced[seg] {
				files = append(files, uint64(seg))
			}
		}
		slices.Sort(files)
		rep.UnsyncedFiles = len(files)
		rep.Lists = append(rep.Lists, listNames[listUnsynced])
	}
	// The first transaction empties the lists and fills all but the free
	// map (a few records each).
	tx := s.a.Begin()
	rep.Transactions++
	fail := func(err error) (ListRebuild, error) {
		s.Abort(tx)
		return rep, err
	}
	defer func() {
		if r := recover(); r != nil { // a journal too small, a damaged arena
			s.Abort(tx)
			err = fmt.Errorf("%w: rebuilding the store's lists: %v", ErrCorrupt, r)
		}
	}()
	if freeMap {
		s.freeList().initHeader(tx)
		tx.Set64(s.fm+fmOffFree, 0)
		ql := s.quarantineList()
		ql.initHeader(tx)
		tx.Set64(s.st+stOffQuarantined, rep.Quarantined)
		cur := s.tag()
		for _, x := range quar {
			if err := ql.insert(tx, rec{uint64(x.b), uint64(x.e), cur}); err != nil {
				return fail(err)
			}
		}
	}
	if unsynced {
		fl := s.unsyncedFiles()
		fl.initHeader(tx)
		for _, seg := range files {
			if err := fl.insert(tx, rec{seg}); err != nil {
				return fail(err)
			}
		}
	}
	l := s.freeList()
	var count uint64
	for _, x := range free {
		if tx.Room() < rebuildRoom && tx.Used() > 0 {
			s.Commit(tx)
			tx = s.a.Begin()
			rep.Transactions++
		}
		if err := l.insert(tx, rec{uint64(x.b), uint64(x.e)}); err != nil {
			return fail(err)
		}
		count += x.len()
		tx.Set64(s.fm+fmOffFree, count)
	}
	s.Commit(tx)
	return rep, nil
}
