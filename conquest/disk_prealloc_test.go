package conquest

import (
	"errors"
	"testing"
)

// An allocation that finds the disk full first takes back the blocks other
// files took ahead of their writes and did not write (their preallocation,
// open files' too), then tries again: a writer got ENOSPC while another
// open file held 5% of the disk it had not written, and sparse random
// writes while their own file held up to 8%.
func TestFullDiskTakesBackPrealloc(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true, threshold: 64 << 10, diskSize: 32 << 20})
	a, ha, err := fs.Create(RootIno, "a", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	defer fs.Release(a.Ino, ha)
	const aData = 256 << 10
	_, err = fs.Write(a.Ino, ha, 0, pattern(aData, 1), false)
	must(t, err)
	at, err := fs.GetAttr(a.Ino)
	must(t, err)
	if at.Blocks*512 <= aData+4096 {
		t.Fatalf("a holds %d bytes for %d written: want a preallocation for the test", at.Blocks*512, aData)
	}

	b, hb, err := fs.Create(RootIno, "b", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	defer fs.Release(b.Ino, hb)
	var off int64
	for ; ; off += 128 << 10 {
		if _, err = fs.Write(b.Ino, hb, off, pattern(128<<10, 2), false); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("b ended at %d bytes with %v, want ErrNoSpace", off, err)
	}
	at, err = fs.GetAttr(a.Ino)
	must(t, err)
	if held := at.Blocks * 512; held > aData+4096 {
		t.Errorf("b got ENOSPC after %d bytes while a held %d bytes for %d written (disk free %d)", off, held, aData, fs.Space().DiskFree)
	}
	if free := fs.Space().DiskAvail; free >= 128<<10 {
		t.Errorf("b got ENOSPC with %d bytes available", free)
	}
	// a still grows where space is (b's preallocation went back too), and
	// reads back.
	got := make([]byte, aData)
	n, err := fs.Read(a.Ino, ha, 0, got)
	if err != nil || n != aData || string(got) != string(pattern(aData, 1)) {
		t.Fatalf("a reads back %d bytes, %v", n, err)
	}
}
