package conquest

import (
	"errors"
	"testing"
)

// TestInodeLayout pins the inode record: changing it changes the format.
func TestInodeLayout(t *testing.T) {
	fields := []struct {
		name      string
		off, size int
	}{
		{"magic", iMagic, 8}, {"ino", iIno, 8}, {"mode", iMode, 4}, {"nlink", iNlink, 4},
		{"uid", iUid, 4}, {"gid", iGid, 4}, {"rdev", iRdev, 4}, {"flags", iFlags, 4},
		{"gen", iGen, 8}, {"size", iSize, 8}, {"atime", iAtime, 16}, {"mtime", iMtime, 16},
		{"ctime", iCtime, 16}, {"crtime", iCrtime, 16}, {"data", iData, 8}, {"idxlen", iIdxLen, 8},
		{"allocd", iAllocd, 8}, {"parent", iParent, 8}, {"xattr", iXattr, 8},
		{"orphnext", iOrphNext, 8}, {"orphprev", iOrphPrev, 8}, {"seg", iSeg, 8}, {"diskcur", iDiskCur, 8}, {"keepend", iKeepEnd, 8}, {"diskres", iDiskRes, 40}, {"spare", iEnd, 16},
	}
	want := []int{0, 8, 16, 20, 24, 28, 32, 36, 40, 48, 56, 72, 88, 104, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192, 200, 240}
	next := 0
	for i, f := range fields {
		if f.off != want[i] {
			t.Errorf("field %s at %d, pinned at %d", f.name, f.off, want[i])
		}
		if f.off != next {
			t.Errorf("field %s at %d leaves a gap or overlap after %d", f.name, f.off, next)
		}
		if f.off%min(f.size, 8) != 0 {
			t.Errorf("field %s at %d is not aligned", f.name, f.off)
		}
		next = f.off + f.size
	}
	if next != inodeSize || inodeSize != 1<<inodeShift {
		t.Errorf("record ends at %d, inodeSize %d, shift %d", next, inodeSize, inodeShift)
	}
	if inodeMagic != 0x45444f4e49514e43 {
		t.Errorf("inode magic changed")
	}
}

func TestStaleInodeNumbers(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", []byte("x"))
	rootOff := fs.a.Root(slotRoot)
	heap := uint64(fs.a.Geometry().HeapOff)
	bad := []Ino{0, 2, 15, Ino(rootOff >> 8), Ino(heap >> 8), Ino(fs.a.Size() >> 8), Ino(fs.a.Size()>>8) + 5,
		^Ino(0), ^Ino(0) >> 8, Ino(1) << 60}
	// The next slot of the inode slab is not allocated yet.
	if _, err := fs.GetAttr(f.Ino + 1); !errors.Is(err, ErrStale) {
		t.Errorf("GetAttr(next slot %d) = %v, want ErrStale", f.Ino+1, err)
	}
	// Every 256-byte granule of the heap that is not a live inode is stale,
	// including file data that happens to sit in a 256-byte slot.
	fake := create(t, fs, RootIno, "fake", make([]byte, 200))
	in, _ := fs.inode(fake.Ino)
	bad = append(bad, Ino(in.data()>>8))
	for _, ino := range bad {
		if _, err := fs.GetAttr(ino); !errors.Is(err, ErrStale) {
			t.Errorf("GetAttr(%d) = %v, want ErrStale", ino, err)
		}
		if _, err := fs.Read(ino, 0, 0, make([]byte, 10)); !errors.Is(err, ErrStale) {
			t.Errorf("Read(%d) = %v, want ErrStale", ino, err)
		}
		if err := fs.Unlink(ino, "x"); !errors.Is(err, ErrStale) {
			t.Errorf("Unlink(%d) = %v, want ErrStale", ino, err)
		}
	}
	// A forged record inside file data: magic and self-number in place, but
	// the allocation is not 256 bytes or not an inode at all.
	data := make([]byte, 4096*2)
	big := create(t, fs, RootIno, "big", data)
	bin, _ := fs.inode(big.Ino)
	blk := fs.a.U64(bin.data())
	forged := make([]byte, 16)
	putU64(forged, inodeMagic)
	putU64(forged[8:], blk>>8)
	h, _ := fs.Open(big.Ino, O_RDWR)
	if _, err := fs.Write(big.Ino, h, 0, forged, false); err != nil {
		t.Fatal(err)
	}
	fs.Release(big.Ino, h)
	if _, err := fs.GetAttr(Ino(blk >> 8)); !errors.Is(err, ErrStale) {
		t.Errorf("forged inode in a data block: %v, want ErrStale", err)
	}
}

func TestGenerationChangesOnReuse(t *testing.T) {
	fs, _ := newTestFS(t)
	a := create(t, fs, RootIno, "a", nil)
	fs.Forget(a.Ino, 1)
	must(t, fs.Unlink(RootIno, "a"))
	if _, err := fs.GetAttr(a.Ino); !errors.Is(err, ErrStale) {
		t.Fatalf("freed inode: %v, want ErrStale", err)
	}
	b := create(t, fs, RootIno, "b", nil)
	if b.Ino != a.Ino {
		t.Skipf("allocator did not reuse the slot (%d vs %d)", b.Ino, a.Ino)
	}
	if b.Gen == a.Gen {
		t.Fatalf("reused inode %d kept generation %d", b.Ino, b.Gen)
	}
}

func TestInodeNumbersStableAcrossReopen(t *testing.T) {
	fs, env := newTestFS(t)
	d := mkdir(t, fs, RootIno, "d")
	f := create(t, fs, d.Ino, "f", []byte("data"))
	fs = env.reopen(fs)
	if got := lookup(t, fs, RootIno, "d"); got.Ino != d.Ino || got.Gen != d.Gen {
		t.Fatalf("dir: %+v, was %+v", got, d)
	}
	if got := lookup(t, fs, d.Ino, "f"); got.Ino != f.Ino || got.Gen != f.Gen {
		t.Fatalf("file: %+v, was %+v", got, f)
	}
	at, err := fs.GetAttr(RootIno)
	must(t, err)
	if at.Ino != RootIno || at.Mode != S_IFDIR|0o755 || at.Uid != 1000 || at.Nlink != 3 {
		t.Fatalf("root attr %+v", at)
	}
}
