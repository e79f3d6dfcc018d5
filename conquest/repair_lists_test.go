package conquest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"conquest/diskstore"
	"conquest/pram"
)

// The disk store's free map is an arena allocation at root slot
// diskstore.RootFreeMap; these are its layout's offsets (diskstore/freemap.go):
// the free count, and the headers of its three lists, each with its
// directory at +0, record count at +16 and record width at +24.
const (
	fmFree       = 24
	fmList       = 32
	fmUnsynced   = 64
	fmQuarantine = 96
)

func freeMapOff(fs *FS) pram.Off { return pram.Off(fs.a.Root(diskstore.RootFreeMap)) }

// firstFreeRecord is the offset of the free map's first record {begin, end}.
func firstFreeRecord(fs *FS) pram.Off {
	dir := pram.Off(fs.a.U64(freeMapOff(fs) + fmList))
	return pram.Off(fs.a.U64(dir+8)) + 16
}

// TestRepairDiskLists damages the disk store's own lists in one way per
// case; Repair rebuilds them from the files, every file reads back, the
// store allocates again, and a second repair finds nothing.
func TestRepairDiskLists(t *testing.T) {
	cases := []struct {
		name   string
		damage func(fs *FS, tx *pram.Tx)
		want   string
	}{
		{"free map structure", func(fs *FS, tx *pram.Tx) { tx.Set32(freeMapOff(fs)+fmList+24, 7) },
			"rebuilt the free map, quarantine from the files"},
		{"free count", func(fs *FS, tx *pram.Tx) { tx.Set64(freeMapOff(fs)+fmFree, 9) },
			"rebuilt the free map, quarantine from the files"},
		{"free extent over a file's blocks", func(fs *FS, tx *pram.Tx) {
			r := firstFreeRecord(fs)
			tx.Set64(r, fs.a.U64(r)-3)
		}, "rebuilt the free map, quarantine from the files"},
		{"free extent past the disk", func(fs *FS, tx *pram.Tx) {
			r := firstFreeRecord(fs)
			tx.Set64(r+8, 1<<40)
		}, "rebuilt the free map, quarantine from the files"},
		{"quarantine structure", func(fs *FS, tx *pram.Tx) { tx.Set32(freeMapOff(fs)+fmQuarantine+24, 9) },
			"rebuilt the free map, quarantine from the files"},
		{"quarantine directory", func(fs *FS, tx *pram.Tx) {
			tx.Set64(freeMapOff(fs)+fmQuarantine, 1<<40)
			tx.Set32(freeMapOff(fs)+fmQuarantine+8, 1)
			tx.Set32(freeMapOff(fs)+fmQuarantine+12, 4)
			tx.Set32(freeMapOff(fs)+fmQuarantine+24, 3)
		}, "rebuilt the free map, quarantine from the files"},
		{"unsynced files structure", func(fs *FS, tx *pram.Tx) { tx.Set32(freeMapOff(fs)+fmUnsynced+24, 9) },
			"rebuilt the list of files with unsynced blocks from the files (2 files with unsynced blocks"},
		{"unsynced files count", func(fs *FS, tx *pram.Tx) { tx.Set64(freeMapOff(fs)+fmUnsynced+16, 1) },
			"rebuilt the list of files with unsynced blocks from the files (2 files with unsynced blocks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, env := newTestFSOpt(t, fsOpt{disk: true})
			a, b := pattern(300<<10, 7), pattern(200<<10, 8)
			makeFile(t, fs, "a", a)
			makeFile(t, fs, "b", b)
			before := fs.ds.Stats()
			corrupt(fs, func(tx *pram.Tx) { c.damage(fs, tx) })
			errs := fs.Check()
			if !errors.As(errs[0], new(*diskstore.ListDamageError)) {
				t.Fatalf("Check: %v, want a ListDamageError first", errs)
			}
			rep, err := fs.Repair(RepairOptions{VerifyData: true})
			must(t, err)
			text := fixesText(rep)
			if len(rep.Remaining) > 0 {
				t.Fatalf("remaining: %v\nfixes:\n%s", rep.Remaining, text)
			}
			if !strings.Contains(text, "disk: 1 problem(s) in the free map") && !strings.Contains(text, "problem(s) in the free map, quarantine") {
				t.Errorf("no list problem in:\n%s", text)
			}
			if !strings.Contains(text, c.want) {
				t.Errorf("no fix %q in:\n%s", c.want, text)
			}
			if st := fs.ds.Stats(); st.FreeBlocks != before.FreeBlocks {
				t.Errorf("after repair %d free blocks, before the damage %d", st.FreeBlocks, before.FreeBlocks)
			}
			wantContent(t, fs, "/a", a)
			wantContent(t, fs, "/b", b)
			// The store allocates from the new map, and nothing is shared.
			c := pattern(400<<10, 9)
			makeFile(t, fs, "c", c)
			wantContent(t, fs, "/a", a)
			wantContent(t, fs, "/c", c)
			rep, err = fs.Repair(RepairOptions{VerifyData: true})
			must(t, err)
			if len(rep.Found)+len(rep.Fixes)+len(rep.Remaining) > 0 {
				t.Fatalf("second repair: %+v", rep)
			}
			fs = env.reopen(fs)
			wantContent(t, fs, "/b", b)
		})
	}
}

// TestRepairDiskListsFragmented rebuilds a free map of many extents with a
// journal too small for one transaction.
func TestRepairDiskListsFragmented(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true, journalLen: 64 << 10})
	data := pattern(70<<10, 3)
	inos := make([]Ino, 120)
	for i := range inos {
		inos[i] = makeFile(t, fs, fmt.Sprint("f", i), data)
		// A checkpoint lets the next file reuse the end of this one's
		// preallocation, trimmed at close (held until then: diskstore's
		// watchCheckpoints), so the files lie side by side.
		must(t, fs.Sync())
	}
	for i := 0; i < 120; i += 2 {
		must(t, fs.Unlink(RootIno, fmt.Sprint("f", i)))
		fs.Forget(inos[i], 1) // the kernel reference of makeFile's Create
	}
	must(t, fs.Sync()) // frees the quarantined blocks
	before := fs.ds.Stats()
	extents := fs.a.U64(freeMapOff(fs) + fmList + 16)
	if extents < 50 {
		t.Fatalf("only %d free extents", extents)
	}
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(freeMapOff(fs)+fmFree, 1) })
	rep, err := fs.Repair(RepairOptions{})
	must(t, err)
	text := fixesText(rep)
	if len(rep.Remaining) > 0 {
		t.Fatalf("remaining: %v\nfixes:\n%s", rep.Remaining, text)
	}
	want := fmt.Sprintf("rebuilt the free map, quarantine from the files (%d free blocks in %d extents", before.FreeBlocks, extents)
	if !strings.Contains(text, want) || strings.Contains(text, "; 1 transaction(s))") {
		t.Fatalf("no fix %q in several transactions in:\n%s", want, text)
	}
	if got := fs.a.U64(freeMapOff(fs) + fmList + 16); got != extents {
		t.Errorf("%d free extents after the rebuild, %d before", got, extents)
	}
	for i := 1; i < 120; i += 2 {
		wantContent(t, fs, fmt.Sprint("/f", i), data)
	}
}

// A segment list that no file owns keeps its blocks while the free map is
// rebuilt; it is destroyed afterwards, its blocks freed into the new map.
func TestRepairDiskListsLeakedSegList(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true})
	data := pattern(300<<10, 8)
	makeFile(t, fs, "large", data)
	before := fs.ds.Stats()
	ownerlessSegList(t, fs)
	corrupt(fs, func(tx *pram.Tx) { tx.Set32(freeMapOff(fs)+fmList+24, 7) })
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	text := fixesText(rep)
	if len(rep.Remaining) > 0 {
		t.Fatalf("remaining: %v\nfixes:\n%s", rep.Remaining, text)
	}
	r, d := strings.Index(text, "rebuilt the free map"), strings.Index(text, "belongs to no file: freed it and its disk blocks")
	if r < 0 || d < r {
		t.Fatalf("want the rebuild, then the segment list destroyed:\n%s", text)
	}
	if st := fs.ds.Stats(); st.FreeBlocks != before.FreeBlocks || st.Files != before.Files {
		t.Errorf("after repair %d free blocks, %d files; before %d, %d", st.FreeBlocks, st.Files, before.FreeBlocks, before.Files)
	}
	wantContent(t, fs, "/large", data)
}

// The free map is not rebuilt while a file's blocks cannot all be walked:
// they would be made free.
func TestRepairDiskListsRefused(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true, noCheck: true})
	ino := makeFile(t, fs, "large", pattern(300<<10, 8))
	in, _ := fs.inode(ino)
	free := fs.ds.Stats().FreeBlocks
	corrupt(fs, func(tx *pram.Tx) {
		tx.Set64(freeMapOff(fs)+fmFree, 9)
		tx.Set64(in.seg()+slSegs, 1<<40) // the file's segments list: its directory pointer
	})
	rep, err := fs.Repair(RepairOptions{})
	must(t, err)
	if strings.Contains(fixesText(rep), "rebuilt the free map") || len(rep.Remaining) == 0 {
		t.Fatalf("fixes:\n%sremaining: %v", fixesText(rep), rep.Remaining)
	}
	if got := fs.a.U64(freeMapOff(fs) + fmFree); got != 9 {
		t.Fatalf("free count %d, want the damaged 9 left alone (%d before)", got, free)
	}
}

// A damaged list of files with unsynced blocks fails a mount's Open,
// naming it; fsck's Open (ForCheck) skips recovery, and after the repair
// the file system opens again.
func TestRepairUnsyncedListOpen(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true})
	a := pattern(300<<10, 7)
	makeFile(t, fs, "a", a)
	corrupt(fs, func(tx *pram.Tx) { tx.Set32(freeMapOff(fs)+fmUnsynced+24, 9) })
	fs.a.Abandon() // as a crash: the store is not closed, its list stays
	env.current = nil
	o := Options{Logf: env.logf, Disk: env.diskOpts}
	if _, err := Open(env.path, env.disk, o); err == nil || !strings.Contains(err.Error(), "unsynced file list") {
		t.Fatalf("Open: %v, want the damaged list named", err)
	}
	o.Disk.ForCheck = true
	fs, err := Open(env.path, env.disk, o)
	must(t, err)
	env.current = fs
	if r := fs.ds.Recovery(); r.Damaged != 1 {
		t.Errorf("recovery %+v, want 1 damaged", r)
	}
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	if len(rep.Remaining) > 0 || !strings.Contains(fixesText(rep), "rebuilt the list of files with unsynced blocks") {
		t.Fatalf("fixes:\n%sremaining: %v", fixesText(rep), rep.Remaining)
	}
	fs = env.reopen(fs)
	wantContent(t, fs, "/a", a)
}

// Segment-list header offsets of a large file's three lists (diskstore:
// seglist.go and unsynced.go), each with its record width at +24.
const (
	slSegs     = 32
	slSums     = 64
	slUnsynced = 96
)

// TestRepairFileLists damages the structure of one of a large file's lists
// per case. Damage to a field that follows from the rest is mended, the
// file intact. Otherwise a list of unsynced records is emptied, the file
// intact; a list of checksum pages or segments is left alone, with its
// blocks, unless ZeroBadBlocks lets the file's data go (it then reads as
// zeros).
func TestRepairFileLists(t *testing.T) {
	// A bogus directory pointer cannot be mended (nothing tells the
	// directory's place); a damaged record width can.
	bogusDir := func(fs *FS, tx *pram.Tx, list pram.Off) { tx.Set64(list, 1<<40) }
	badWidth := func(fs *FS, tx *pram.Tx, list pram.Off) { tx.Set32(list+24, 11) }
	badLeafCount := func(fs *FS, tx *pram.Tx, list pram.Off) {
		leaf := pram.Off(fs.a.U64(pram.Off(fs.a.U64(list)) + 8))
		tx.Set32(leaf, 0x7f000001) // its count; the list's count tells it
	}
	badDirKey := func(fs *FS, tx *pram.Tx, list pram.Off) {
		dir := pram.Off(fs.a.U64(list))
		tx.Set64(dir, fs.a.U64(dir)+0x100)
	}
	badCount := func(fs *FS, tx *pram.Tx, list pram.Off) { tx.Set64(list+16, 1<<50) }
	// One flipped bit of a pointer, found by corrupting random bytes of an
	// image: "directory at 269488640 out of range" left the file unreadable.
	dirPtrBit := func(fs *FS, tx *pram.Tx, list pram.Off) { tx.Set64(list, fs.a.U64(list)^1<<28) }
	leafPtrBit := func(fs *FS, tx *pram.Tx, list pram.Off) {
		dir := pram.Off(fs.a.U64(list))
		tx.Set64(dir+8, fs.a.U64(dir+8)^1<<33)
	}
	dirPtrByte := func(fs *FS, tx *pram.Tx, list pram.Off) { tx.Set8(list+3, fs.a.U8(list+3)^0xb7) }
	// One more record than the leaves count, which they have room for:
	// the list's count or a leaf's could be the damaged one.
	plausibleCount := func(fs *FS, tx *pram.Tx, list pram.Off) { tx.Set64(list+16, fs.a.U64(list+16)+1) }
	cases := []struct {
		name      string
		list      pram.Off
		damage    func(fs *FS, tx *pram.Tx, list pram.Off)
		zero      bool
		fixed     string // the fix's text; "" if not repaired
		zeros     bool   // the file reads as zeros after the repair
		freesData bool   // the file's blocks return to the free map
	}{
		{"unsynced mended", slUnsynced, badWidth, false, "/large: damaged list of unsynced blocks: mended it from its other fields (record width 11→5)", false, false},
		{"sums mended", slSums, badWidth, false, "/large: damaged list of checksum pages: mended it from its other fields (record width 11→4)", false, false},
		{"segments mended", slSegs, badWidth, false, "/large: damaged list of segments: mended it from its other fields (record width 11→3)", false, false},
		{"segments leaf count", slSegs, badLeafCount, false, "/large: damaged list of segments: mended it from its other fields (leaf 0 count 2130706433→", false, false},
		{"sums directory key", slSums, badDirKey, false, "/large: damaged list of checksum pages: mended it from its other fields (directory key 0", false, false},
		{"segments directory pointer", slSegs, dirPtrBit, false, "/large: damaged list of segments: mended it from its other fields (directory pointer", false, false},
		{"unsynced directory pointer byte", slUnsynced, dirPtrByte, false, "/large: damaged list of unsynced blocks: mended it from its other fields (directory pointer", false, false},
		{"sums leaf pointer", slSums, leafPtrBit, false, "/large: damaged list of checksum pages: mended it from its other fields (leaf 0 pointer", false, false},
		{"segments count", slSegs, badCount, false, "/large: damaged list of segments: mended it from its other fields (record count 1125899906842624→", false, false},
		{"segments ambiguous count kept", slSegs, plausibleCount, false, "", false, false},
		{"unsynced emptied", slUnsynced, bogusDir, false, "/large: damaged list of unsynced blocks: emptied it", false, false},
		{"sums kept", slSums, bogusDir, false, "", false, false},
		{"sums zeroed", slSums, bogusDir, true, "/large: damaged list of checksum pages: emptied it: the file reads as zeros", true, false},
		{"segments kept", slSegs, bogusDir, false, "", false, false},
		{"segments zeroed", slSegs, bogusDir, true, "/large: damaged list of segments (where the data is on disk): emptied the file's lists", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFSOpt(t, fsOpt{disk: true, noCheck: c.fixed == ""})
			data, other := pattern(300<<10, 8), pattern(200<<10, 9)
			ino := makeFile(t, fs, "large", data)
			makeFile(t, fs, "other", other)
			in, _ := fs.inode(ino)
			if n := fs.a.U64(in.seg() + slUnsynced + 16); c.list == slUnsynced && n == 0 {
				t.Fatal("the file has no unsynced records to damage")
			}
			before := fs.ds.Stats()
			hdr := fs.a.Bytes(in.seg()+c.list, 32)
			saved := append([]byte(nil), hdr...)
			corrupt(fs, func(tx *pram.Tx) { c.damage(fs, tx, in.seg()+c.list) })
			errs := fs.Check()
			if !errors.As(errs[0], new(*diskstore.FileListError)) {
				t.Fatalf("Check: %v, want a FileListError first", errs)
			}
			rep, err := fs.Repair(RepairOptions{VerifyData: true, ZeroBadBlocks: c.zero})
			must(t, err)
			text := fixesText(rep)
			wantContent(t, fs, "/other", other)
			if c.fixed == "" {
				if len(rep.Fixes) > 0 || len(rep.Remaining) == 0 {
					t.Fatalf("fixes:\n%sremaining: %v; want the damage left alone", text, rep.Remaining)
				}
				if st := fs.ds.Stats(); st.FreeBlocks != before.FreeBlocks {
					t.Fatalf("%d free blocks after, %d before: the file's blocks were taken", st.FreeBlocks, before.FreeBlocks)
				}
				// Undone, the file is intact: nothing else changed.
				corrupt(fs, func(tx *pram.Tx) { tx.SetBytes(in.seg()+c.list, saved) })
				wantContent(t, fs, "/large", data)
				if errs := fs.Check(); len(errs) > 0 {
					t.Fatalf("Check after undoing the damage: %v", errs)
				}
				return
			}
			if len(rep.Remaining) > 0 || !strings.Contains(text, c.fixed) {
				t.Fatalf("fixes:\n%sremaining: %v; want %q", text, rep.Remaining, c.fixed)
			}
			if c.zeros {
				wantContent(t, fs, "/large", make([]byte, len(data)))
			} else {
				wantContent(t, fs, "/large", data)
			}
			st := fs.ds.Stats()
			if freed := st.FreeBlocks > before.FreeBlocks; freed != c.freesData {
				t.Errorf("%d free blocks after, %d before; want the file's blocks freed: %v", st.FreeBlocks, before.FreeBlocks, c.freesData)
			}
			// The file is usable: written again, it reads back.
			h := openRW(t, fs, ino, O_RDWR)
			writeFile(t, fs, ino, h, 0, data)
			fs.Release(ino, h)
			wantContent(t, fs, "/large", data)
		})
	}
}

// sumRecord is the arena offset of the checksum recorded for file block fb
// (< 512) of the large file whose segment list is seg: its list of checksum
// pages (header at +64: directory at +0) holds {base, page, capacity}
// records, and the page one word per block.
func sumRecord(fs *FS, seg pram.Off, fb uint64) pram.Off {
	dir := pram.Off(fs.a.U64(seg + slSums))
	leaf := pram.Off(fs.a.U64(dir + 8))
	page := pram.Off(fs.a.U64(leaf + 16 + 8))
	return page + pram.Off(8*fb)
}

// sumCheckWord is the arena offset of the check word of the large file's
// first checksum page (its record's fourth word, sumcheck.go).
func sumCheckWord(fs *FS, seg pram.Off) pram.Off {
	dir := pram.Off(fs.a.U64(seg + slSums))
	leaf := pram.Off(fs.a.U64(dir + 8))
	return leaf + 16 + 24
}

// TestRepairSumRecord: a damaged checksum record fails its page's check
// (sumcheck.go). Damaged in a byte or two it is also told from damaged data
// by its data's checksum, which differs from it in all but a few bytes, and
// rewritten from the data. Damaged in more bytes, or zeroed (which used to
// read as zeros, with every fsck clean), one or two records or the whole
// page, the page's check proves the records, not the data, damaged, and
// the repair restores them from the data. The file reads back. A zeroed
// record beside a damaged check word explains nothing: reads of it fail
// (EIO), the repair leaves it reported, and with ZeroBadBlocks makes it a
// hole (its data lost, named).
func TestRepairSumRecord(t *testing.T) {
	all := make([]uint64, 75) // the file's blocks
	for i := range all {
		all[i] = uint64(i)
	}
	for _, c := range []struct {
		name      string
		bytes     []int    // bytes of the record to flip
		zero      []uint64 // or file blocks whose records to zero
		checkWord bool     // and the check word damaged
		zeroBad   bool     // RepairOptions.ZeroBadBlocks
		reason    string   // the fix, "" for none
	}{
		{"one byte", []int{3}, nil, false, false, "rewrote it from the data"},
		{"two bytes", []int{0, 7}, nil, false, false, "rewrote it from the data"},
		{"three bytes", []int{1, 4, 6}, nil, false, false, "restored the checksums of file block(s) 5 "},
		{"zeroed", nil, []uint64{5}, false, false, "restored the checksums of file block(s) 5 "},
		{"two zeroed", nil, []uint64{5, 9}, false, false, "restored the checksums of file block(s) 5, 9 "},
		{"page zeroed", nil, all, false, false, "restored the checksums of file block(s) 0, 1, 2"},
		{"zeroed and the check word", nil, []uint64{5}, true, false, ""},
		{"zeroed and the check word, zeroing", nil, []uint64{5}, true, true, "made file block(s) 5 holes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFSOpt(t, fsOpt{disk: true, noCheck: c.reason == ""})
			data := pattern(300<<10, 8)
			ino := makeFile(t, fs, "large", data)
			in, _ := fs.inode(ino)
			rec := sumRecord(fs, in.seg(), 5)
			corrupt(fs, func(tx *pram.Tx) {
				for _, b := range c.bytes {
					tx.Set8(rec+pram.Off(b), fs.a.U8(rec+pram.Off(b))^0x5a)
				}
				for _, fb := range c.zero {
					tx.Set64(sumRecord(fs, in.seg(), fb), 0)
				}
				if c.checkWord {
					w := sumCheckWord(fs, in.seg())
					tx.Set64(w, fs.a.U64(w)^1<<33)
				}
			})
			h := openRW(t, fs, ino, O_RDWR)
			buf := make([]byte, 4096)
			if _, err := fs.Read(ino, h, 5*4096, buf); !errors.Is(err, ErrIO) {
				t.Fatalf("read of the block: %v, want EIO", err)
			}
			fs.Release(ino, h)
			errs := fs.CheckWith(CheckOptions{VerifyData: true})
			var sc *diskstore.SumCheckError
			if len(errs) == 0 || !errors.As(errs[0], &sc) {
				t.Fatalf("Check: %v; want a SumCheckError first", errs)
			}
			var sd *diskstore.SumDamageError
			if byte2 := len(c.bytes) > 0 && len(c.bytes) <= 2; byte2 != (len(errs) == 2 && errors.As(errs[1], &sd)) {
				t.Fatalf("Check: %v; want a SumDamageError after it: %v", errs, byte2)
			}
			rep, err := fs.Repair(RepairOptions{VerifyData: true, ZeroBadBlocks: c.zeroBad})
			must(t, err)
			text := fixesText(rep)
			if c.reason == "" {
				if len(rep.Fixes) > 0 || len(rep.Remaining) != 2 || !errors.As(rep.Remaining[0], &sc) ||
					!strings.Contains(rep.Remaining[1].Error(), "no checksum of file blocks [0, 512) accounts for the page's check") {
					t.Fatalf("fixes:\n%sremaining: %v; want the page left reported", text, rep.Remaining)
				}
				return
			}
			want := fmt.Sprintf("/large: checksum record of the block at offset %d (disk block", 5*4096)
			if len(c.bytes) > 2 || len(c.zero) > 0 {
				want = "/large: the checksums of the blocks at offsets [0, 2097152) fail their page's check"
			}
			if len(rep.Remaining) > 0 || !strings.Contains(text, want) || !strings.Contains(text, c.reason) {
				t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
			}
			if c.zeroBad {
				clear(data[5*4096 : 6*4096])
			}
			wantContent(t, fs, "/large", data)
			if errs := fs.CheckWith(CheckOptions{VerifyData: true}); len(errs) > 0 {
				t.Fatalf("Check after repair: %v", errs)
			}
		})
	}
}

// TestRepairSeed: a large file's checksum seed (at +16 of its segment
// list) damaged in a bit, two bits or a byte makes every block fail its
// checksum; the walk finds the seed the data verifies under and reports it
// once, and the repair sets it, so the file reads back. Damage to more of
// the seed is left as bad blocks. (Found by corrupting random bytes of an
// image: one flipped bit made a whole 5 MB file unreadable for good.)
func TestRepairSeed(t *testing.T) {
	for _, c := range []struct {
		name    string
		xor     uint64
		rewrite bool
		append  bool // a block written after the damage, under the damaged seed
		record  bool // and a byte of block 7's checksum record damaged too
	}{
		{"one bit", 1 << 37, true, false, false},
		{"two bits", 1<<3 | 1<<60, true, false, false},
		{"one byte", 0xa5 << 16, true, false, false},
		{"three bytes", 0x5a_00_5a_00_5a, false, false, false},
		{"one bit, then an append", 1 << 11, true, true, false},
		{"one bit and a checksum record", 1 << 50, true, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFSOpt(t, fsOpt{disk: true, noCheck: !c.rewrite})
			data := pattern(300<<10, 8)
			ino := makeFile(t, fs, "large", data)
			in, _ := fs.inode(ino)
			seed := in.seg() + 16
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(seed, fs.a.U64(seed)^c.xor) })
			if c.record {
				rec := sumRecord(fs, in.seg(), 7)
				corrupt(fs, func(tx *pram.Tx) { tx.Set8(rec+2, fs.a.U8(rec+2)^0x40) })
			}
			h := openRW(t, fs, ino, O_RDWR)
			if _, err := fs.Read(ino, h, 0, make([]byte, 4096)); !errors.Is(err, ErrIO) {
				t.Fatalf("read: %v, want EIO", err)
			}
			if c.append {
				more := pattern(8192, 9)
				if n, err := fs.Write(ino, h, int64(len(data)), more, false); err != nil || n != len(more) {
					t.Fatalf("append: %d, %v", n, err)
				}
				data = append(data, more...)
			}
			fs.Release(ino, h)
			errs := fs.CheckWith(CheckOptions{VerifyData: true})
			var sd *diskstore.SeedDamageError
			want := 1
			if c.record {
				want = 3 // and the record's SumDamageError, and its page's SumCheckError
			}
			if got := len(errs) == want && errors.As(errs[len(errs)-1], &sd); got != c.rewrite {
				t.Fatalf("Check: %d errors, first %v; want a SeedDamageError: %v", len(errs), errs[0], c.rewrite)
			}
			if c.append && len(sd.Rehash) != 2 {
				t.Fatalf("SeedDamageError %v: want the 2 appended blocks to rehash", sd)
			}
			rep, err := fs.Repair(RepairOptions{VerifyData: true})
			must(t, err)
			text := fixesText(rep)
			if !c.rewrite {
				if len(rep.Fixes) > 0 || len(rep.Remaining) == 0 || !errors.Is(rep.Remaining[0], diskstore.ErrDataChecksum) {
					t.Fatalf("fixes:\n%sremaining: %v; want the bad blocks left", text, rep.Remaining)
				}
				return
			}
			if len(rep.Remaining) > 0 || !strings.Contains(text, "the seed is damaged, not the data") ||
				(!c.append && !strings.Contains(text, "/large: every written block fails its checksum, and")) ||
				(c.record && !strings.Contains(text, "rewrote it from the data")) {
				t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
			}
			wantContent(t, fs, "/large", data)
			if errs := fs.CheckWith(CheckOptions{VerifyData: true}); len(errs) > 0 {
				t.Fatalf("Check after repair: %v", errs)
			}
		})
	}
}

// A segment list's count of blocks (at +24 of the list) follows from its
// segments: when damaged, it is set to what they map.
func TestRepairSegBlocks(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true})
	data := pattern(300<<10, 8)
	ino := makeFile(t, fs, "large", data)
	in, _ := fs.inode(ino)
	held := fs.a.U64(in.seg() + 24)
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.seg()+24, held|1<<40) })
	errs := fs.Check()
	var sb *diskstore.SegBlocksError
	if len(errs) != 1 || !errors.As(errs[0], &sb) || sb.Mapped != held {
		t.Fatalf("Check: %v; want one SegBlocksError", errs)
	}
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	want := fmt.Sprintf("/large: segment list's count of blocks is wrong: set it to the %d blocks its segments map", held)
	if len(rep.Remaining) > 0 || !strings.Contains(fixesText(rep), want) {
		t.Fatalf("fixes:\n%sremaining: %v; want %q", fixesText(rep), rep.Remaining, want)
	}
	wantContent(t, fs, "/large", data)
}

// zeroIt, as TestRepairStoreHeaders's xor, zeroes the word.
const zeroIt = ^uint64(0)

// TestRepairStoreHeaders: the free map keeps a copy of the disk's block
// count (+16) and block size (+8), and the free map and the stats record
// each start with a magic. Damaged, a mount refuses the pair; fsck opens
// it, reports a StoreHeaderError and writes them again (the geometry from
// the disk superblock), after which it mounts with the data intact.
// (Found by corrupting random bytes of an image: one flipped bit made the
// pair unusable for good.)
func TestRepairStoreHeaders(t *testing.T) {
	for _, c := range []struct {
		name  string
		off   func(fs *FS) pram.Off // the word damaged
		xor   uint64
		mount error // what a mount says
	}{
		{"free map block count", func(fs *FS) pram.Off { return pram.Off(fs.a.Root(diskstore.RootFreeMap)) + 16 }, 0x1000, diskstore.ErrGeometry},
		{"free map magic", func(fs *FS) pram.Off { return pram.Off(fs.a.Root(diskstore.RootFreeMap)) }, 0x40 << 24, diskstore.ErrCorrupt},
		{"stats magic", func(fs *FS) pram.Off { return pram.Off(fs.a.Root(diskstore.RootStats)) }, 0x81 << 8, diskstore.ErrCorrupt},
		// A flipped bit of the checksum format word (stats record +56)
		// made the pair unusable for good, fsck --repair included
		// ("unknown checksum format ... made by a newer Conquest?").
		{"stats checksum format", func(fs *FS) pram.Off { return pram.Off(fs.a.Root(diskstore.RootStats)) + 56 }, 1 << 40, diskstore.ErrCorrupt},
		// A flipped bit of the superblock's root slot for the free map or
		// the stats record (not checksummed) made the pair unusable for
		// good: "no free map at root slot 5 (576460752304472064)".
		{"free map root slot", func(fs *FS) pram.Off { return pram.RootOff(diskstore.RootFreeMap) }, 1 << 59, diskstore.ErrCorrupt},
		{"stats root slot byte", func(fs *FS) pram.Off { return pram.RootOff(diskstore.RootStats) }, 0x5a << 16, diskstore.ErrCorrupt},
		// Damaged in two bytes or zeroed (an outside corruption test's 8
		// zero bytes at slot 6), no pointer a byte away finds the record:
		// fsck finds it in the heap (its magic and the geometry the disk
		// superblock gives).
		{"free map root slot two bytes", func(fs *FS) pram.Off { return pram.RootOff(diskstore.RootFreeMap) }, 0x4242 << 24, diskstore.ErrCorrupt},
		{"stats root slot two bytes", func(fs *FS) pram.Off { return pram.RootOff(diskstore.RootStats) }, 0x1111 << 16, diskstore.ErrCorrupt},
		{"free map root slot zeroed", func(fs *FS) pram.Off { return pram.RootOff(diskstore.RootFreeMap) }, zeroIt, diskstore.ErrCorrupt},
		{"stats root slot zeroed", func(fs *FS) pram.Off { return pram.RootOff(diskstore.RootStats) }, zeroIt, diskstore.ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, env := newTestFSOpt(t, fsOpt{disk: true})
			data := pattern(300<<10, 8)
			makeFile(t, fs, "large", data)
			off := c.off(fs)
			xor := c.xor
			if xor == zeroIt {
				xor = fs.a.U64(off)
			}
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(off, fs.a.U64(off)^xor) })
			must(t, fs.Close())
			if _, err := Open(env.path, env.disk, Options{Logf: env.logf, Now: env.clock.Now}); !errors.Is(err, c.mount) {
				t.Fatalf("mount of the damaged pair: %v, want %v", err, c.mount)
			}
			env.diskOpts.ForCheck = true
			fs = env.open()
			errs := fs.CheckWith(CheckOptions{VerifyData: true})
			var sh *diskstore.StoreHeaderError
			if len(errs) != 1 || !errors.As(errs[0], &sh) {
				t.Fatalf("Check: %v; want one StoreHeaderError", errs)
			}
			rep, err := fs.Repair(RepairOptions{VerifyData: true})
			must(t, err)
			if text := fixesText(rep); len(rep.Remaining) > 0 || !strings.Contains(text, "wrote the magics and the free map's copy of the disk's geometry again") {
				t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
			}
			must(t, fs.Close())
			env.diskOpts.ForCheck = false
			fs = env.open()
			wantContent(t, fs, "/large", data)
		})
	}
}

// TestRepairFreeCountPastDisk: a free map whose count of free blocks was
// damaged past the disk's size (one high bit) was refused by every Open,
// fsck's included, although the repair rebuilds the free map from the
// files: the pair was unusable for good. A mount still refuses it; fsck
// opens it, and the repair rebuilds the map.
func TestRepairFreeCountPastDisk(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true})
	data := pattern(300<<10, 8)
	makeFile(t, fs, "large", data)
	before := fs.ds.Stats()
	off := freeMapOff(fs) + fmFree
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(off, fs.a.U64(off)^1<<40) })
	must(t, fs.Close())
	if _, err := Open(env.path, env.disk, Options{Logf: env.logf, Now: env.clock.Now}); !errors.Is(err, diskstore.ErrCorrupt) {
		t.Fatalf("mount of the damaged pair: %v, want ErrCorrupt", err)
	}
	env.diskOpts.ForCheck = true
	fs = env.open()
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	if text := fixesText(rep); len(rep.Remaining) > 0 || !strings.Contains(text, "rebuilt the free map") {
		t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	must(t, fs.Close())
	env.diskOpts.ForCheck = false
	fs = env.open()
	wantContent(t, fs, "/large", data)
	if st := fs.ds.Stats(); st.FreeBlocks != before.FreeBlocks {
		t.Errorf("after repair %d free blocks, before the damage %d", st.FreeBlocks, before.FreeBlocks)
	}
}

// TestRepairVerifiesAfterListFix: a file whose list of segments is damaged
// cannot have its data verified by the first walk; once the list is
// mended, Repair verifies the data again, so a damaged checksum record of
// the same file is found and rewritten in the same run instead of being
// left for the next fsck. (Found by corrupting random bytes of an image:
// fsck --repair said "clean now" and the next fsck found the record.)
func TestRepairVerifiesAfterListFix(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true})
	data := pattern(300<<10, 8)
	ino := makeFile(t, fs, "large", data)
	in, _ := fs.inode(ino)
	seg := in.seg()
	rec := sumRecord(fs, seg, 5)
	corrupt(fs, func(tx *pram.Tx) {
		tx.Set8(rec+1, fs.a.U8(rec+1)^0x08)
		leaf := pram.Off(fs.a.U64(pram.Off(fs.a.U64(seg+slSegs)) + 8))
		tx.Set32(leaf, 0x7f000001) // the leaf's count; the list's count tells it
	})
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	text := fixesText(rep)
	if len(rep.Remaining) > 0 || !strings.Contains(text, "damaged list of segments: mended it") ||
		!strings.Contains(text, "rewrote it from the data") {
		t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	if errs := fs.CheckWith(CheckOptions{VerifyData: true}); len(errs) > 0 {
		t.Fatalf("Check after repair: %v", errs)
	}
	wantContent(t, fs, "/large", data)
}

// TestRepairVerifiesLostFile: a large file no directory names is not
// reached by the first (data verifying) walk; the repair gives it a name in
// /lost+found and then verifies the data it could not before, so a damaged
// checksum record of that file is rewritten in the same run. (Found by
// corrupting random bytes of an image.)
func TestRepairVerifiesLostFile(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true})
	data := pattern(300<<10, 8)
	ino := makeFile(t, fs, "large", data)
	in, _ := fs.inode(ino)
	rec := sumRecord(fs, in.seg(), 9)
	root, _ := fs.inode(RootIno)
	corrupt(fs, func(tx *pram.Tx) {
		tx.Set8(rec+6, fs.a.U8(rec+6)^0x01)
		if _, _, err := fs.dir(root).Delete(tx, []byte("large")); err != nil {
			t.Fatal(err)
		}
	})
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	text := fixesText(rep)
	if len(rep.Remaining) > 0 || !strings.Contains(text, "/lost+found/#") || !strings.Contains(text, "rewrote it from the data") {
		t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	if errs := fs.CheckWith(CheckOptions{VerifyData: true}); len(errs) > 0 {
		t.Fatalf("Check after repair: %v", errs)
	}
	wantContent(t, fs, fmt.Sprintf("/lost+found/#%d", ino), data)
}

// TestRepairSumPageRecord: a damaged byte of a checksum page record (its
// page pointer or its capacity) is mended from the data: of the records a
// byte away, the one whose checksums the file's data verifies. Damage to
// two bytes is left alone, and dropped (the blocks read as zeros) only with
// ZeroBadBlocks. (Found by TestRepairRandomDamage.)
func TestRepairSumPageRecord(t *testing.T) {
	for _, c := range []struct {
		name   string
		word   pram.Off // 8: the page pointer, 16: the capacity
		xor    uint64
		mended bool
	}{
		{"page pointer byte", 8, 0x5c << 8, true},
		{"page pointer bit", 8, 1 << 45, true},
		{"capacity byte", 16, 0x30 << 56, true},
		{"page pointer two bytes", 8, 0x0101 << 24, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFSOpt(t, fsOpt{disk: true, noCheck: !c.mended})
			data := pattern(300<<10, 8)
			ino := makeFile(t, fs, "large", data)
			in, _ := fs.inode(ino)
			dir := pram.Off(fs.a.U64(in.seg() + slSums))
			rec := pram.Off(fs.a.U64(dir+8)) + 16 // the first record: base, page, capacity
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(rec+c.word, fs.a.U64(rec+c.word)^c.xor) })
			// Never zeros for data: a page pointer into free memory would
			// read as checksums of zero ("never written").
			h := openRW(t, fs, ino, O_RDWR)
			if _, err := fs.Read(ino, h, 0, make([]byte, 4096)); !errors.Is(err, ErrIO) {
				t.Fatalf("read before the repair: %v, want EIO", err)
			}
			fs.Release(ino, h)
			rep, err := fs.Repair(RepairOptions{VerifyData: true})
			must(t, err)
			text := fixesText(rep)
			if !c.mended {
				if len(rep.Remaining) == 0 || strings.Contains(text, "mended it from the data") {
					t.Fatalf("fixes:\n%sremaining: %v; want it left", text, rep.Remaining)
				}
				rep, err = fs.Repair(RepairOptions{VerifyData: true, ZeroBadBlocks: true})
				must(t, err)
				if text := fixesText(rep); len(rep.Remaining) > 0 || !strings.Contains(text, "dropped it: the blocks it covered read as zeros") {
					t.Fatalf("with ZeroBadBlocks: fixes:\n%sremaining: %v", text, rep.Remaining)
				}
				return
			}
			if len(rep.Remaining) > 0 || !strings.Contains(text, "damaged checksum page record for file blocks from 0: mended it from the data") {
				t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
			}
			wantContent(t, fs, "/large", data)
			if errs := fs.CheckWith(CheckOptions{VerifyData: true}); len(errs) > 0 {
				t.Fatalf("Check after repair: %v", errs)
			}
		})
	}
}

// TestRepairNewRecords: the disk's free map record overwritten (not just
// its magic or its root slot, which the open mends) made every open refuse
// the pair, fsck --repair's too ("no free map at root slot 5"), with every
// file intact; so did the stats record (slot 6). Nothing in the free map is
// its own: NewDiskFreeMap lays an empty one, and the repair's walk frees
// the blocks no file uses and the old record. NewDiskStats lays a stats
// record with the epoch and quarantine the lists show, and the walk sets
// its count of files. The pair mounts again with its files and free space.
func TestRepairNewRecords(t *testing.T) {
	for _, c := range []struct {
		name     string
		slots    []int // the records overwritten
		slotToo  bool  // their root slots zeroed as well
		fragment bool  // files deleted between others: a free map of several extents
	}{
		{"free map", []int{diskstore.RootFreeMap}, false, true},
		{"free map and root slot", []int{diskstore.RootFreeMap}, true, false},
		{"stats", []int{diskstore.RootStats}, false, true},
		{"stats and root slot", []int{diskstore.RootStats}, true, false},
		{"both", []int{diskstore.RootFreeMap, diskstore.RootStats}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, env := newTestFSOpt(t, fsOpt{disk: true})
			files := map[string][]byte{}
			for i := range 6 {
				name := fmt.Sprintf("large%d", i)
				files[name] = pattern(300<<10+i*4096, byte(i+1))
				makeFile(t, fs, name, files[name])
			}
			if c.fragment {
				for _, name := range []string{"large1", "large3"} {
					must(t, fs.Unlink(RootIno, name))
					delete(files, name)
				}
				// The unlinked files' blocks go when their inodes do (no
				// kernel reference left: at the next open).
				must(t, fs.Close())
				fs = env.open()
			}
			must(t, fs.Sync())
			before := fs.ds.Stats()
			if from, to, err := NewDiskFreeMap(env.path, env.disk); err == nil {
				t.Fatalf("NewDiskFreeMap on a mounted pair: %#x -> %#x, nil; want it refused", from, to)
			}
			intents := fs.a.U64(pram.Off(fs.a.Root(diskstore.RootStats)) + 48) // the intent area
			old := map[int]pram.Off{}
			corrupt(fs, func(tx *pram.Tx) {
				for _, slot := range c.slots {
					old[slot] = pram.Off(fs.a.Root(slot))
					size := 128 // the free map
					if slot == diskstore.RootStats {
						size = 64
					}
					tx.SetBytes(old[slot], bytes.Repeat([]byte{0xa5}, size))
					if c.slotToo {
						tx.Set64(pram.RootOff(slot), 0)
					}
				}
			})
			must(t, fs.Close())
			_, err := Open(env.path, env.disk, Options{Logf: env.logf, Now: env.clock.Now})
			var me *diskstore.MissingRecordError
			if !errors.As(err, &me) || me.Slot != c.slots[0] {
				t.Fatalf("mount of the damaged pair: %v, want a MissingRecordError for slot %d", err, c.slots[0])
			}
			env.diskOpts.ForCheck = true
			if _, err := Open(env.path, env.disk, Options{Logf: env.logf, Now: env.clock.Now, Disk: env.diskOpts}); !errors.As(err, &me) {
				t.Fatalf("fsck's open of the damaged pair: %v, want a MissingRecordError", err)
			}
			if slices.Contains(c.slots, diskstore.RootFreeMap) {
				if _, _, err := NewDiskStats(env.path, env.disk); err == nil {
					t.Fatal("NewDiskStats without a free map: nil error")
				}
			}
			for _, slot := range c.slots {
				lay := NewDiskFreeMap
				if slot == diskstore.RootStats {
					lay = NewDiskStats
				}
				from, to, err := lay(env.path, env.disk)
				must(t, err)
				if from == to || to == old[slot] {
					t.Fatalf("slot %d: laid %#x -> %#x (the old record at %#x)", slot, from, to, old[slot])
				}
				if f2, t2, err := lay(env.path, env.disk); err != nil || f2 != to || t2 != to {
					t.Fatalf("slot %d again: %#x -> %#x, %v; want nothing done at %#x", slot, f2, t2, err, to)
				}
			}
			fs = env.open()
			if errs := fs.CheckWith(CheckOptions{VerifyData: true}); len(errs) == 0 {
				t.Fatal("Check found nothing to repair")
			}
			must(t, fs.Close())
			fs = repairedAsFsck(t, env)
			for name, data := range files {
				wantContent(t, fs, "/"+name, data)
			}
			if got := fs.a.U64(pram.Off(fs.a.Root(diskstore.RootStats)) + 48); got != intents {
				t.Errorf("the intent area is at %#x, was at %#x", got, intents)
			}
			st := fs.ds.Stats()
			if st.FreeBlocks != before.FreeBlocks || st.Files != before.Files {
				t.Errorf("after repair %d free blocks, %d files; before the damage %d, %d",
					st.FreeBlocks, st.Files, before.FreeBlocks, before.Files)
			}
			more := pattern(400<<10, 9)
			makeFile(t, fs, "after", more)
			wantContent(t, fs, "/after", more)
		})
	}
}

// segCountWord is the arena offset of the count of blocks of the first
// segment of the large file whose segment list is seg: its list of
// segments (header at +32: directory at +0) holds {file block, disk block,
// count} records.
func segCountWord(fs *FS, seg pram.Off) pram.Off {
	dir := pram.Off(fs.a.U64(seg + slSegs))
	leaf := pram.Off(fs.a.U64(dir + 8))
	return leaf + 16 + 16
}

// TestRepairSegCount: one segment's count of blocks damaged (a corruption
// review). Raised by one, the file took the first block of the file after
// it on the disk, which the walk reported used twice and the repair left;
// lowered, the repair cleared the checksums of the blocks the segment no
// longer mapped and freed them: 44 KiB of data lost that the arena still
// described. The segment list's own count and the blocks' checksums show
// the segment's count: the repair sets it back, and both files read back.
func TestRepairSegCount(t *testing.T) {
	for _, c := range []struct {
		name  string
		delta int64
	}{
		{"raised by one", 1},
		{"raised by three", 3},
		{"lowered by eleven", -11},
		{"lowered to one block", -74},
		// A count of 0 was taken for a segment outside the disk, and the
		// list's count was set to the segments' first (a third review).
		{"lowered to zero", -75},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFSOpt(t, fsOpt{disk: true})
			a, b := pattern(300<<10, 8), pattern(200<<10, 9)
			ino := makeFile(t, fs, "a", a)
			makeFile(t, fs, "b", b)
			in, _ := fs.inode(ino)
			w := segCountWord(fs, in.seg())
			if n := fs.a.U64(w); n != 75 {
				t.Fatalf("the first segment of /a maps %d blocks, want 75 (one segment)", n)
			}
			before := fs.ds.Stats()
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(w, uint64(int64(fs.a.U64(w))+c.delta)) })
			errs := fs.CheckWith(CheckOptions{VerifyData: true})
			var sc *diskstore.SegCountError
			if !slices.ContainsFunc(errs, func(err error) bool { return errors.As(err, &sc) }) || sc.Want != 75 {
				t.Fatalf("Check: %v; want a SegCountError showing 75 blocks", errs)
			}
			rep, err := fs.Repair(RepairOptions{VerifyData: true})
			must(t, err)
			if text := fixesText(rep); len(rep.Remaining) > 0 || !strings.Contains(text, "its list's count and its blocks' checksums show 75: set it to 75") ||
				strings.Contains(text, "cleared it") {
				t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
			}
			wantContent(t, fs, "/a", a)
			wantContent(t, fs, "/b", b)
			if st := fs.ds.Stats(); st.FreeBlocks != before.FreeBlocks {
				t.Errorf("%d free blocks after, %d before", st.FreeBlocks, before.FreeBlocks)
			}
		})
	}
}

// repairedAsFsck opens env's pair as fsck does (ForCheck), repairs it with
// nothing left, and opens it again as a mount does, clean.
func repairedAsFsck(t *testing.T, env *testEnv) *FS {
	t.Helper()
	env.diskOpts.ForCheck = true
	fs := env.open()
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	if len(rep.Remaining) > 0 {
		t.Fatalf("fixes:\n%sremaining: %v", fixesText(rep), rep.Remaining)
	}
	must(t, fs.Close())
	env.diskOpts.ForCheck = false
	fs = env.open()
	if errs := fs.CheckWith(CheckOptions{VerifyData: true}); len(errs) > 0 {
		t.Fatalf("Check after the repair: %v", errs)
	}
	return fs
}

// TestRepairSumBase: a checksum page record's base (its key) damaged into
// another multiple of 512 (a corruption review: one flipped bit) made the
// repair take the page's entries for checksums of blocks the file does not
// map and clear them, and rewrite the check word: the file read zeros and
// fsck said clean. The check word depends on the base: the walk finds the
// one base a byte away that passes it (the last record, raised past the
// end), and the list's mend keeps a leaf's first record when the directory
// key is the one its check word passes (the first record). Nothing is lost.
func TestRepairSumBase(t *testing.T) {
	for _, c := range []struct {
		name string
		rec  int    // the record damaged
		xor  uint64 // into its base
	}{
		{"last record raised past the end", 2, 1 << 14},
		{"first record, a high bit", 0, 1 << 49},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFSOpt(t, fsOpt{disk: true, diskSize: 128 << 20})
			data := pattern(3*512*4096, 7) // three checksum pages
			ino := makeFile(t, fs, "large", data)
			in, _ := fs.inode(ino)
			dir := pram.Off(fs.a.U64(in.seg() + slSums))
			leaf := pram.Off(fs.a.U64(dir + 8))
			base := leaf + 16 + pram.Off(32*c.rec) // records of 4 words
			if got := fs.a.U64(base); got != uint64(512*c.rec) {
				t.Fatalf("record %d has base %d", c.rec, got)
			}
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(base, fs.a.U64(base)^c.xor) })
			if errs := fs.CheckWith(CheckOptions{VerifyData: true}); len(errs) == 0 {
				t.Fatal("Check found nothing")
			}
			rep, err := fs.Repair(RepairOptions{VerifyData: true, ZeroBadBlocks: true})
			must(t, err)
			if text := fixesText(rep); len(rep.Remaining) > 0 || strings.Contains(text, "cleared it") || strings.Contains(text, "check word was damaged") {
				t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
			}
			wantContent(t, fs, "/large", data)
		})
	}
}
