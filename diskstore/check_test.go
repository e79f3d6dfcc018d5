package diskstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"conquest/alloc"
	"conquest/pram"
)

// leakBlocks takes the given ranges out of the free map without giving them
// to a file: what a lost update leaves behind.
func (e *env) leakBlocks(rs []BlockRange) {
	e.t.Helper()
	e.must(func(tx *pram.Tx) error {
		for _, r := range rs {
			x, err := e.s.allocFree(tx, uint64(r.End-r.Begin), r.Begin)
			if err != nil {
				return err
			}
			if x.b != r.Begin || x.e != r.End {
				return fmt.Errorf("took [%d, %d), want [%d, %d)", x.b, x.e, r.Begin, r.End)
			}
		}
		return nil
	})
}

// TestLeakedBlocksTyped: Finish reports blocks neither free nor used as
// *LeakedBlocksError — ten one range each, the rest in a summary — with
// today's text, as ErrCorrupt; ReclaimLeaked frees them and the walk is
// clean again, the file's data untouched.
func TestLeakedBlocksTyped(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096})
	seg := e.newFile(5)
	data := pattern(1, 0, 40<<10)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, data) })
	files := map[pram.Off]int64{seg: int64(len(data))}
	e.check(files)
	free := e.s.Stats().FreeBlocks
	var leaked []BlockRange
	var total uint64
	for i := range 14 {
		b := Block(1000 + 10*i)
		leaked = append(leaked, BlockRange{b, b + Block(i%3+1)})
		total += uint64(i%3 + 1)
	}
	e.leakBlocks(leaked)
	var got []BlockRange
	per, summaries := 0, 0
	for _, err := range e.checkErrs(files, true) {
		var le *LeakedBlocksError
		if !errors.As(err, &le) || !errors.Is(err, ErrCorrupt) {
			t.Errorf("unexpected error: %v", err)
			continue
		}
		got = append(got, le.Ranges...)
		if le.Summary {
			summaries++
			if le.Total != total || len(le.Ranges) != 4 {
				t.Errorf("summary: total %d, %d ranges, want %d, 4", le.Total, len(le.Ranges), total)
			}
			if want := fmt.Sprintf("%v: %d disk blocks leaked in all", ErrCorrupt, total); err.Error() != want {
				t.Errorf("summary text %q, want %q", err, want)
			}
			continue
		}
		per++
		r := le.Ranges[0]
		if len(le.Ranges) != 1 || le.Total != uint64(r.End-r.Begin) {
			t.Errorf("per-range error %+v", le)
		}
		want := fmt.Sprintf("%v: disk blocks [%d, %d) are neither free nor used by a file (leaked)", ErrCorrupt, r.Begin, r.End)
		if err.Error() != want {
			t.Errorf("text %q, want %q", err, want)
		}
	}
	if per != 10 || summaries != 1 || !slices.Equal(got, leaked) {
		t.Fatalf("%d per-range errors, %d summaries, ranges %v, want 10, 1, %v", per, summaries, got, leaked)
	}
	for _, r := range got {
		e.must(func(tx *pram.Tx) error { return e.s.ReclaimLeaked(tx, r) })
	}
	e.check(files)
	if st := e.s.Stats(); st.FreeBlocks != free {
		t.Errorf("%d free blocks after reclaiming, want %d", st.FreeBlocks, free)
	}
	if b, err := e.read(seg, 0, len(data)); err != nil || !slices.Equal(b, data) {
		t.Errorf("file after reclaiming: %v", err)
	}
}

// TestReclaimLeakedRefuses: ReclaimLeaked changes nothing and reports
// ErrCorrupt for blocks outside the data blocks, blocks partly free, and
// quarantined blocks.
func TestReclaimLeakedRefuses(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd})
	seg := e.newFile(7)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, pattern(1, 0, 64<<10)) })
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, seg, 64<<10) })
	old, _ := e.s.lookup(seg, 1)
	e.must(func(tx *pram.Tx) error { return e.s.Write(tx, seg, 4096+10, pattern(3, 4096+10, 100)) })
	if st := e.s.Stats(); st.QuarantinedBlocks != 1 {
		t.Fatalf("%d blocks quarantined, want 1 (the rewritten block's old copy)", st.QuarantinedBlocks)
	}
	e.leakBlocks([]BlockRange{{3000, 3002}})
	n := Block(e.s.Super().Blocks)
	before := e.s.Stats()
	for _, r := range []BlockRange{
		{0, 2}, {n - 1, n + 1}, {5, 5}, // outside, past the end, empty
		{3000, 3003}, {2999, 3002}, // partly free
		{old.disk, old.disk + 1}, // quarantined
	} {
		err := e.do(func(tx *pram.Tx) error { return e.s.ReclaimLeaked(tx, r) })
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("ReclaimLeaked(%v): %v, want ErrCorrupt", r, err)
		}
		if st := e.s.Stats(); st != before {
			t.Errorf("ReclaimLeaked(%v) changed the stats: %+v, were %+v", r, st, before)
		}
	}
	e.must(func(tx *pram.Tx) error { return e.s.ReclaimLeaked(tx, BlockRange{3000, 3002}) })
	if st := e.s.Stats(); st.FreeBlocks != before.FreeBlocks+2 {
		t.Errorf("%d free blocks, want %d", st.FreeBlocks, before.FreeBlocks+2)
	}
}

// TestCheckerTypedErrors: a bad block found with VerifyData is a
// *DataChecksumError naming the inode, file offset and disk block (and is
// ErrIO and ErrDataChecksum); a file the walk did not reach makes the file
// count a *FileCountError, which SetFileCount repairs.
func TestCheckerTypedErrors(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096})
	seg, other := e.newFile(42), e.newFile(43)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, pattern(1, 0, 64<<10)) })
	sp, err := e.s.lookup(seg, 3)
	if err != nil || sp.disk == 0 {
		t.Fatalf("lookup: %v %+v", err, sp)
	}
	if _, err := e.dev.WriteAt([]byte{0xff, 0x00, 0xff}, int64(sp.disk)*4096+100); err != nil {
		t.Fatal(err)
	}
	errs := e.checkErrs(map[pram.Off]int64{seg: 64 << 10, other: 0}, true)
	if len(errs) != 1 {
		t.Fatalf("fsck: %v, want one error", errs)
	}
	var ce *DataChecksumError
	if !errors.As(errs[0], &ce) || !errors.Is(errs[0], ErrIO) || !errors.Is(errs[0], ErrDataChecksum) {
		t.Fatalf("fsck: %v is not a DataChecksumError, ErrIO and ErrDataChecksum", errs[0])
	}
	if ce.Inode != 42 || ce.Offset != 3*4096 || ce.Disk != sp.disk {
		t.Errorf("DataChecksumError %+v, want inode 42, offset %d, disk block %d", ce, 3*4096, sp.disk)
	}
	if want := fmt.Sprintf("inode 42, offset %d, disk block %d", 3*4096, sp.disk); !errors.Is(errs[0], ErrDataChecksum) ||
		!strings.Contains(errs[0].Error(), want) {
		t.Errorf("text %q does not name %q", errs[0], want)
	}
	// Counted and logged once (the run read whole, then block by block,
	// did both twice).
	e.logMu.Lock()
	logged := 0
	for _, l := range e.logs {
		if strings.Contains(l, "checksum mismatch") {
			logged++
		}
	}
	e.logMu.Unlock()
	if n := e.s.Stats().ChecksumErrors; n != 1 || logged != 1 {
		t.Errorf("one bad block: counted %d times, logged %d times, want once each", n, logged)
	}
	// The walk is not told of other: the stats count one file too many.
	var fc *FileCountError
	for _, err := range e.checkErrs(map[pram.Off]int64{seg: 64 << 10}, false) {
		if errors.As(err, &fc) {
			break
		}
	}
	if fc == nil || fc.Counted != 2 || fc.Reached != 1 || !errors.Is(fc, ErrCorrupt) ||
		fc.Error() != fmt.Sprintf("%v: stats count 2 large files, the walk reached 1", ErrCorrupt) {
		t.Fatalf("FileCountError: %v", fc)
	}
	e.must(func(tx *pram.Tx) error { e.s.SetFileCount(tx, fc.Reached); return nil })
	for _, err := range e.checkErrs(map[pram.Off]int64{seg: 64 << 10}, false) {
		if errors.As(err, &fc) {
			t.Errorf("after SetFileCount: %v", err)
		}
	}
	if st := e.s.Stats(); st.Files != 1 {
		t.Errorf("stats count %d files after SetFileCount(1)", st.Files)
	}
}

// TestStraySum: a checksum recorded for a file block that maps no disk
// block (a hole, or past the end) is one *StraySumError per block, and
// ClearStraySum zeroes it (refusing a block that maps data); the data is
// untouched. (Found by corrupting random bytes of an image: fsck --repair
// could not fix it.)
func TestStraySum(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096})
	seg := e.newFile(42)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, pattern(1, 0, 16<<10)) })
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 8<<20, pattern(1, 8<<20, 16<<10)) })
	const size = 8<<20 + 16<<10
	for _, fb := range []uint64{1000, 5000} {
		if sp, err := e.s.lookup(seg, fb); err != nil || sp.disk != 0 {
			t.Fatalf("file block %d maps %+v, %v; want a hole", fb, sp, err)
		}
		e.must(func(tx *pram.Tx) error { return e.s.setSums(tx, seg, fb, []uint64{0x5a5a}) })
	}
	errs := e.checkErrs(map[pram.Off]int64{seg: size}, true)
	if len(errs) != 2 {
		t.Fatalf("fsck: %v; want two errors", errs)
	}
	for i, want := range []StraySumError{{Owner: 42, Seg: seg, Block: 1000}, {Owner: 42, Seg: seg, Block: 5000, BeyondEnd: true}} {
		ss, ok := errors.AsType[*StraySumError](errs[i])
		if !ok || *ss != want || !errors.Is(errs[i], ErrCorrupt) {
			t.Fatalf("error %d: %v; want %+v", i, errs[i], want)
		}
	}
	if err := e.do(func(tx *pram.Tx) error { return e.s.ClearStraySum(tx, seg, 0) }); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ClearStraySum of a mapped block: %v", err)
	}
	e.must(func(tx *pram.Tx) error {
		for _, fb := range []uint64{1000, 5000} {
			if err := e.s.ClearStraySum(tx, seg, fb); err != nil {
				return err
			}
		}
		return nil
	})
	e.check(map[pram.Off]int64{seg: size})
	got := make([]byte, size)
	if _, err := e.s.ReadAt(seg, got, 0, nil); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	copy(want, pattern(1, 0, 16<<10))
	copy(want[8<<20:], pattern(1, 8<<20, 16<<10))
	if !slices.Equal(got, want) {
		t.Fatal("data changed")
	}
}

// TestDropUnsynced: a damaged unsynced record, or one naming an unmapped
// block, is a *BadUnsyncedError (with today's text), and DropUnsynced
// removes it; once a file's last record goes, the file leaves the list of
// files with records, and the walk is clean with the data intact. (Found by
// corrupting random bytes of an arena: fsck --repair could not fix it.)
func TestDropUnsynced(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096})
	seg := e.newFile(7)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, pattern(1, 0, 64<<10)) })
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, seg, 64<<10) })
	data := pattern(2, 0, 8<<10)
	if err := e.write(seg, 0, data); err != nil { // two blocks, published unsynced
		t.Fatal(err)
	}
	l := e.s.unsyncedOf(seg)
	if n, err := l.length(); err != nil || n != 2 {
		t.Fatalf("%d unsynced records, %v; want 2", n, err)
	}
	e.must(func(tx *pram.Tx) error {
		c, ok, err := l.seekLE(0)
		if err != nil || !ok {
			return fmt.Errorf("no record of block 0: %v", err)
		}
		r := l.get(c)
		r[4] = 0 // keep: impossible
		if err := l.set(tx, c, r); err != nil {
			return err
		}
		c, ok, err = l.seekLE(1)
		if err != nil || !ok {
			return fmt.Errorf("no record of block 1: %v", err)
		}
		r = l.get(c)
		if err := l.remove(tx, c); err != nil {
			return err
		}
		r[0] = 40 // a block the file does not map
		return l.insert(tx, r)
	})
	const size = 64 << 10
	errs := e.checkErrs(map[pram.Off]int64{seg: size}, true)
	var blocks []uint64
	for _, err := range errs {
		if bu, ok := errors.AsType[*BadUnsyncedError](err); ok && bu.Owner == 7 && bu.Seg == seg && errors.Is(err, ErrCorrupt) {
			blocks = append(blocks, bu.Block)
		}
	}
	if !slices.Equal(blocks, []uint64{0, 40}) || !strings.Contains(fmt.Sprint(errs), "unsynced record for file block 40, which is not mapped") {
		t.Fatalf("fsck: %v; want BadUnsyncedErrors for blocks 0 and 40", errs)
	}
	e.must(func(tx *pram.Tx) error { return e.s.DropUnsynced(tx, seg, 0) })
	e.must(func(tx *pram.Tx) error { return e.s.DropUnsynced(tx, seg, 40) })
	if n, _ := e.s.unsyncedFiles().length(); n != 0 {
		t.Errorf("%d files still listed with unsynced records", n)
	}
	e.check(map[pram.Off]int64{seg: size})
	want := pattern(1, 0, size)
	copy(want, data)
	got := make([]byte, size)
	if _, err := e.s.ReadAt(seg, got, 0, nil); err != nil || !slices.Equal(got, want) {
		t.Fatalf("data after repair: %v (equal %v)", err, slices.Equal(got, want))
	}
}

// TestDropSumPage: a damaged checksum page record is a *BadSumPageError;
// DropSumPage refuses a sound one and removes a damaged one, after which the
// blocks it covered read as zeros, the rest of the file is intact and the
// walk is clean but for the page's allocation, now leaked.
func TestDropSumPage(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096})
	seg := e.newFile(9)
	size := int64(2 * sumsPerPage * 4096) // two checksum pages
	data := pattern(1, 0, int(size))
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, data) })
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, seg, size) })
	if err := e.do(func(tx *pram.Tx) error { return e.s.DropSumPage(tx, seg, sumsPerPage) }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("DropSumPage of a sound page: %v", err)
	}
	l := e.s.sums(seg)
	var page pram.Off
	e.must(func(tx *pram.Tx) error {
		c, ok, err := l.seekLE(sumsPerPage)
		if err != nil || !ok {
			return fmt.Errorf("no second page: %v", err)
		}
		r := l.get(c)
		page = pram.Off(r[1])
		r[2] = sumsPerPage + 1 // capacity: impossible
		return l.set(tx, c, r)
	})
	errs := e.checkErrs(map[pram.Off]int64{seg: size}, false)
	var bp *BadSumPageError
	for _, err := range errs {
		if b, ok := errors.AsType[*BadSumPageError](err); ok {
			bp = b
		}
	}
	if bp == nil || *bp != (BadSumPageError{Owner: 9, Seg: seg, Base: sumsPerPage, Page: page, Cap: sumsPerPage + 1}) {
		t.Fatalf("fsck: %v; want a BadSumPageError for the second page", errs)
	}
	if _, err := e.s.ReadAt(seg, make([]byte, 4096), size-4096, nil); err == nil {
		t.Fatal("a block of the damaged page read without error")
	}
	e.must(func(tx *pram.Tx) error { return e.s.DropSumPage(tx, seg, sumsPerPage) })
	var leaked []pram.Off
	for _, err := range e.checkErrs(map[pram.Off]int64{seg: size}, true) {
		le, ok := errors.AsType[*alloc.LeakError](err)
		if !ok {
			t.Fatalf("after DropSumPage: %v", err)
		}
		leaked = append(leaked, le.Off)
	}
	if !slices.Equal(leaked, []pram.Off{page}) {
		t.Fatalf("leaks after DropSumPage: %v; want the page at %d", leaked, page)
	}
	got := make([]byte, size)
	if _, err := e.s.ReadAt(seg, got, 0, nil); err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(data)
	clear(want[size/2:])
	if !slices.Equal(got, want) {
		t.Fatal("after DropSumPage the first page's blocks changed or the second's do not read as zeros")
	}
}
