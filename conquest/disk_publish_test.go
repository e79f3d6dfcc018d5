package conquest

import (
	"bytes"
	"path/filepath"
	"testing"

	"conquest/diskstore"
)

// TestGatheredFlushPublishesSize: with writes gathered in memory, a write
// that goes to the store in several pieces (a small arena's journal) and
// whose middle piece fills the buffer flushes everything gathered so far,
// including bytes past the size the arena has published; the pieces after
// it gather bytes below that size again. The arena's size must cover the
// flushed blocks before the Tx commits: a crash then left blocks beyond the
// end holding data (Check: BeyondEndError). The workload is the one a
// random crash test found (seed 96555973).
func TestGatheredFlushPublishesSize(t *testing.T) {
	const K = 1 << 10
	dir := t.TempDir()
	P := filepath.Join(dir, "p")
	pdev := diskstore.NewCrashDevice(16 << 20)
	must(t, Mkfs(P, "", MkfsOptions{PramSize: 8 << 20, Device: pdev, LargeFileThreshold: 16 * K, DiskBlockSize: 4096}))
	opts := withDevice(Options{Logf: t.Logf,
		Disk: diskstore.Options{Durability: diskstore.GatherInMemory, FileBuffer: 64 * K, MaxExtent: 128 * K,
			SyncBytes: 512 * K, ForegroundSync: true}}, pdev)
	fs, err := Open(P, "", opts)
	must(t, err)
	bs := fs.ds.BlockSize()
	piece := int(min(64, max(fs.a.Geometry().JournalLen/2/diskstore.JournalPerBlock, 1)) * bs)
	if piece < 40*K || piece > 100*K {
		t.Fatalf("setup: pieces of %d bytes, want 40 to 100 KiB", piece)
	}
	at, h, err := fs.Create(RootIno, "f", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	ino := at.Ino
	var want []byte
	write := func(off int, c byte, n int) {
		t.Helper()
		b := bytes.Repeat([]byte{c}, n)
		if _, err := fs.Write(ino, h, int64(off), b, false); err != nil {
			t.Fatalf("write at %d: %v", off, err)
		}
		if off+n > len(want) {
			want = append(want, make([]byte, off+n-len(want))...)
		}
		copy(want[off:], b)
	}
	write(0, 'a', 160*K)
	must(t, fs.Fsync(ino, false))
	write(160*K, 'b', 40*K) // one piece, gathered past the published size
	// Two pieces: the first fills the buffer, which flushes all of it (the
	// 'b' bytes too); the second gathers bytes below the published size.
	write(20*K, 'c', piece+8*K)
	if !bytes.Equal(readAll(t, fs, ino), want) {
		t.Fatal("contents differ before the crash")
	}
	// Crash: the process dies and the disk loses what was not synced.
	must(t, fs.a.Abandon())
	fs, err = Open(P, "", withDevice(opts, pdev.Crash(diskstore.CrashLoseAll, 1)))
	must(t, err)
	defer fs.Close()
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after the crash: %v", errs)
	}
	ino, err = resolve(fs, "f")
	must(t, err)
	got := readAll(t, fs, ino)
	if len(got) < 160*K {
		t.Fatalf("the fsync'd size was 160 KiB; %d after the crash", len(got))
	}
	for off, c := range got {
		if c != 0 && c != 'a' && c != 'b' && c != 'c' {
			t.Fatalf("byte %d is %d after the crash", off, c)
		}
	}
}
