package conquest

import (
	"bytes"
	"errors"
	"testing"
)

// fillArena creates files in dir until nothing more fits: first files with
// data, then empty ones, then xattrs, so slabs are full as well as pages.
// It returns the number of objects created. On a file system with a disk,
// the first file that spills to the disk (spill.go) is deleted and ends
// its size's round: the arena is what this fills, and files of 512 bytes
// and less never spill.
func fillArena(t *testing.T, fs *FS, dir Ino, prefix string) int {
	t.Helper()
	n := 0
	for _, size := range []int{4000, 500, 64, 0} {
		for i := 0; ; i++ {
			name := sprintf("%s-%d-%d", prefix, size, i)
			at, h, err := fs.Create(dir, name, 0o644, O_RDWR|O_CREAT|O_EXCL, user)
			if errors.Is(err, ErrNoSpace) {
				break
			}
			must(t, err)
			n++
			var werr error
			if size > 0 {
				_, werr = fs.Write(at.Ino, h, 0, pattern(size, byte(i)), false)
			}
			fs.Release(at.Ino, h)
			if werr == nil && isLarge(t, fs, at.Ino) {
				must(t, fs.Unlink(dir, name))
				fs.Forget(at.Ino, 1)
				n--
				break
			}
			fs.Forget(at.Ino, 1)
			if errors.Is(werr, ErrNoSpace) {
				break
			}
			must(t, werr)
		}
	}
	for i := 0; ; i++ {
		err := fs.SetXattr(RootIno, sprintf("user.%s%d", prefix, i), pattern(16, 1), 0)
		if errors.Is(err, ErrNoSpace) {
			break
		}
		must(t, err)
		n++
	}
	return n
}

// TestFreeUsesReserve fills the arena completely and then deletes large
// files whose disk extents cannot merge with any free extent, so every free
// adds records to the disk's free map in the arena. Those records come from
// a reserve that only frees may use: each deletion must free its file at
// once (nothing stuck on the orphan list) and leave fsck clean.
func TestFreeUsesReserve(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{size: 4 << 20, disk: true, threshold: 16 << 10, diskSize: 256 << 20})
	d := mkdir(t, fs, RootIno, "d")
	var large []Attr
	for i := 0; ; i++ {
		at, h, err := fs.Create(d.Ino, sprintf("L%d", i), 0o644, O_RDWR|O_CREAT|O_EXCL, user)
		if errors.Is(err, ErrNoSpace) {
			break
		}
		must(t, err)
		_, err = fs.Write(at.Ino, h, 0, pattern(20<<10, byte(i)), false)
		fs.Release(at.Ino, h)
		if errors.Is(err, ErrNoSpace) {
			must(t, fs.Unlink(d.Ino, sprintf("L%d", i)))
			fs.Forget(at.Ino, 1)
			break
		}
		must(t, err)
		must(t, fs.Fsync(at.Ino, false))
		large = append(large, at)
		if len(large) == 3000 {
			break
		}
	}
	if len(large) < 600 {
		t.Fatalf("only %d large files fit", len(large))
	}
	fill := fillArena(t, fs, RootIno, "fill")
	t.Logf("%d large files, %d objects fill the rest", len(large), fill)
	extents := func() int { return int(fs.ds.Stats().FreeExtents) }
	before := extents()
	// Every fourth file is cut short (its tail blocks freed), the files
	// between are deleted: each frees extents that cannot merge.
	for i := 0; i < len(large); i += 2 {
		if i%4 == 0 {
			if _, err := fs.SetAttr(large[i].Ino, SetAttr{Valid: SetSize, Size: 9000}, user); err != nil {
				t.Fatalf("truncating large file %d of %d (%d free extents, %d before): %v",
					i, len(large), extents(), before, err)
			}
			continue
		}
		must(t, fs.Unlink(d.Ino, sprintf("L%d", i)))
		fs.Forget(large[i].Ino, 1)
		if fs.stuck {
			t.Fatalf("deleting large file %d of %d (%d free extents, %d before) left it on the orphan list",
				i, len(large), extents(), before)
		}
	}
	if got := extents(); got < before+len(large)/2-2 {
		t.Fatalf("free extents %d -> %d: the frees did not fragment the free map", before, got)
	}
	for i := 0; i < len(large); i += 4 {
		if got, want := readAll(t, fs, large[i].Ino), pattern(20<<10, byte(i))[:9000]; !bytes.Equal(got, want) {
			t.Fatalf("large file %d cut to 9000 bytes reads wrong", i)
		}
	}
	st := fs.h.Stats()
	t.Logf("free extents %d -> %d; %d of the %d reserved pages left", before, extents(), st.FreePages, st.ReservePages)
	// Ordinary allocations still may not take what is left of the reserve.
	if _, _, err := fs.Create(RootIno, "more", 0o644, O_RDWR|O_CREAT|O_EXCL, user); err == nil {
		fillArena(t, fs, RootIno, "refill")
	} else if !errors.Is(err, ErrNoSpace) {
		t.Fatal(err)
	}
	if st2 := fs.h.Stats(); st2.FreePages < min(st.FreePages, st.ReservePages) {
		t.Errorf("ordinary allocations took reserved pages: %d free before, %d after", st.FreePages, st2.FreePages)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check: %v", errs)
	}
}

// TestFsyncOnFullArena: large files rewritten (copy-on-write: their old
// blocks wait in the quarantine for the next disk sync), then the arena
// filled. The fsync and the syncs after it sync the disk and free the
// quarantine (as far as each Tx's journal allows) into a free map
// fragmented enough that it needs new leaves: that is a free, and may use
// the heap's reserve. Before, the sync that needed a leaf failed with
// ENOSPC (the data was synced, yet the caller was told it was not), and
// the quarantined blocks stayed held.
func TestFsyncOnFullArena(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{size: 4 << 20, disk: true, threshold: 16 << 10, diskSize: 256 << 20})
	d := mkdir(t, fs, RootIno, "d")
	var large []Attr
	for i := 0; i < 1000; i++ {
		at, h, err := fs.Create(d.Ino, sprintf("L%d", i), 0o644, O_RDWR|O_CREAT|O_EXCL, user)
		must(t, err)
		_, err = fs.Write(at.Ino, h, 0, pattern(20<<10, byte(i)), false)
		must(t, err)
		fs.Release(at.Ino, h)
		large = append(large, at)
	}
	must(t, fs.Fsync(large[0].Ino, false))
	// 250 isolated free extents: the free map's first leaf is near full.
	for i := 0; i < 250; i++ {
		_, err := fs.Write(large[2*i+1].Ino, 0, 0, pattern(4096, 1), false)
		must(t, err)
	}
	must(t, fs.Fsync(large[0].Ino, false))
	for i := 500; i < 1000; i += 2 {
		_, err := fs.Write(large[i].Ino, 0, 0, pattern(4096, 2), false)
		must(t, err)
	}
	// Filled directly: an operation that finds no space syncs the disk
	// first (FS.update), which would end the quarantine before the fsync.
	exhaustHeap(t, fs)
	q := fs.ds.Stats().QuarantinedBlocks
	if q < 200 {
		t.Fatalf("%d blocks quarantined, want 250", q)
	}
	if err := fs.Fsync(large[0].Ino, false); err != nil {
		t.Fatalf("fsync on a full arena with %d blocks quarantined: %v", q, err)
	}
	for i := 0; i < 20 && fs.ds.Stats().QuarantinedBlocks > 0; i++ {
		must(t, fs.Sync())
	}
	if q := fs.ds.Stats().QuarantinedBlocks; q != 0 {
		t.Fatalf("%d blocks still quarantined after 20 syncs", q)
	}
	for i := 500; i < 1000; i += 2 {
		want := pattern(20<<10, byte(i))
		copy(want, pattern(4096, 2))
		if got := readAll(t, fs, large[i].Ino); !bytes.Equal(got, want) {
			t.Fatalf("large file %d reads wrong", i)
		}
	}
}

// TestCreateAfterRemoveOnFullArena: with a disk, new inodes stop short of
// the arena kept for mapping its free blocks (mapReserve), as an ext4 runs
// out of inodes. As there, removing one file must make room for one new
// one: its inode record's slot takes no page. It used to take 16 to 32
// removes (a whole page of records) before a create worked again.
func TestCreateAfterRemoveOnFullArena(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{size: 16 << 20, disk: true})
	d := mkdir(t, fs, RootIno, "d")
	many := mkdir(t, fs, d.Ino, "many")
	n := 0
	for ; ; n++ {
		at, h, err := fs.Create(many.Ino, sprintf("%07d", n), 0o644, O_CREAT|O_RDWR, user)
		if errors.Is(err, ErrNoSpace) {
			break
		}
		must(t, err)
		fs.Release(at.Ino, h)
		fs.Forget(at.Ino, 1)
	}
	if st := fs.h.Stats(); st.AvailBytes >= fs.mapReserve(st)+inodeSize {
		t.Fatalf("creates stopped after %d files with %d bytes available and %d kept for the disk's map", n, st.AvailBytes, fs.mapReserve(st))
	}
	// df -i agrees: no free inode when a create fails, one after a remove.
	if st := fs.StatFS(); st.Ffree != 0 {
		t.Errorf("statfs shows %d free inodes when a create fails with ENOSPC", st.Ffree)
	}
	for k := 0; k < 40; k++ {
		must(t, fs.Unlink(many.Ino, sprintf("%07d", k)))
		if st := fs.StatFS(); st.Ffree == 0 {
			t.Errorf("after %d removes, statfs shows no free inode", k+1)
		}
		at, h, err := fs.Create(d.Ino, sprintf("new%d", k), 0o644, O_CREAT|O_RDWR|O_EXCL, user)
		if err != nil {
			t.Fatalf("after %d files filled the arena and %d were removed, a create in another directory: %v", n, k+1, err)
		}
		fs.Release(at.Ino, h)
		fs.Forget(at.Ino, 1)
	}
}
