package diskstore

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"conquest/pram"
)

// TestDroppedWriteCaught: a disk that acknowledges a write (and the sync
// after it) but never stores it is caught by the checksums: the read fails
// with EIO naming the file, offset and disk block, it is logged, and fsck
// reports it. The wrong (stale) bytes are never returned.
func TestDroppedWriteCaught(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd})
	seg := e.newFile(42)
	old := pattern(1, 0, 1<<20)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, old) })
	// Drop the next write that touches the file's block 10 (copy-on-write
	// goes elsewhere, so drop any write: the next one is the overwrite).
	var dropped int64 = -1
	cd.SetDropFilter(func(off int64, n int) bool {
		if dropped < 0 {
			dropped = off
			return true
		}
		return false
	})
	newData := pattern(2, 40960, 8192)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 40960, newData) })
	cd.SetDropFilter(nil)
	if dropped < 0 {
		t.Fatal("no write dropped")
	}
	buf := make([]byte, 1<<20)
	_, err := e.s.ReadAt(seg, buf, 0, nil)
	if !errors.Is(err, ErrIO) || !errors.Is(err, ErrDataChecksum) {
		t.Fatalf("read after dropped write: %v, want ErrIO and ErrDataChecksum", err)
	}
	diskBlock := dropped / 4096
	want := fmt.Sprintf("inode 42, offset 40960, disk block %d", diskBlock)
	if !strings.Contains(err.Error(), want) || !e.logged(want) {
		t.Fatalf("error %q / logs %q do not name %q", err, e.logs, want)
	}
	// Reading around the bad block works; the bad block never returns bytes.
	if got, err := e.read(seg, 0, 40960); err != nil || !bytes.Equal(got, old[:40960]) {
		t.Fatalf("read before the bad block: %v", err)
	}
	ra := e.s.NewReadahead()
	defer ra.Close()
	for off := int64(0); off < 1<<20; off += 4096 {
		p := make([]byte, 4096)
		_, err := e.s.ReadAt(seg, p, off, ra)
		bad := off == 40960 || off == 45056
		if bad != (err != nil) {
			t.Fatalf("readahead read at %d: %v", off, err)
		}
	}
	if st := e.s.Stats(); st.ChecksumErrors < 2 {
		t.Fatalf("stats count %d checksum errors", st.ChecksumErrors)
	}
	errs := e.checkErrs(map[pram.Off]int64{seg: 1 << 20}, true)
	if len(errs) != 2 || !errors.Is(errs[0], ErrDataChecksum) || !errors.Is(errs[1], ErrDataChecksum) {
		t.Fatalf("fsck: %v, want two checksum errors (the dropped write covered two blocks)", errs)
	}
	// The metadata walk alone does not read data.
	if errs := e.checkErrs(map[pram.Off]int64{seg: 1 << 20}, false); len(errs) != 0 {
		t.Fatalf("metadata check: %v", errs)
	}
	// Overwriting the whole bad block repairs it.
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 40960, newData) })
	e.check(map[pram.Off]int64{seg: 1 << 20})
}

// TestBitRotCaught: a read that returns flipped bits fails with EIO.
func TestBitRotCaught(t *testing.T) {
	fd := NewFaultDevice(NewMemDevice(16<<20), nil)
	e := newEnv(t, envOpts{dev: fd})
	seg := e.newFile(3)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, pattern(3, 0, 2<<20)) })
	fd.SetInjector(OnNth(OpRead, 1, FaultCorrupt))
	if _, err := e.read(seg, 0, 2<<20); !errors.Is(err, ErrDataChecksum) {
		t.Fatalf("read of rotten data: %v", err)
	}
	if got, err := e.read(seg, 0, 2<<20); err != nil || !bytes.Equal(got, pattern(3, 0, 2<<20)) {
		t.Fatalf("second read: %v", err)
	}
}

// TestForeignBlockDetected: a block of another file copied over a file's
// block (misdirected write) does not verify, even with identical contents,
// because the checksum is seeded per file and per offset.
func TestForeignBlockDetected(t *testing.T) {
	md := NewMemDevice(16 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: md})
	a, b := e.newFile(1), e.newFile(2)
	same := pattern(7, 0, 1<<20)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, same) })
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, b, 0, same) })
	// Swap in a's block 0 for b's block 1: same file contents are different
	// blocks of the file, so both the seed and the offset differ.
	spA, _ := e.s.lookup(a, 0)
	spB, _ := e.s.lookup(b, 1)
	copy(md.Bytes()[int64(spB.disk)*4096:], md.Bytes()[int64(spA.disk)*4096:int64(spA.disk+1)*4096])
	if _, err := e.read(b, 4096, 4096); !errors.Is(err, ErrDataChecksum) {
		t.Fatalf("foreign block: %v", err)
	}
	// Same offset, other file: identical bytes, other seed.
	spB0, _ := e.s.lookup(b, 0)
	copy(md.Bytes()[int64(spB0.disk)*4096:], bytes.Repeat([]byte{0xAB}, 4096))
	copy(md.Bytes()[int64(spA.disk)*4096:], bytes.Repeat([]byte{0xAB}, 4096))
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, bytes.Repeat([]byte{0xAB}, 4096)) })
	spA, _ = e.s.lookup(a, 0)
	copy(md.Bytes()[int64(spB0.disk)*4096:], md.Bytes()[int64(spA.disk)*4096:int64(spA.disk+1)*4096])
	if _, err := e.read(b, 0, 4096); !errors.Is(err, ErrDataChecksum) {
		t.Fatalf("block of another file at the same offset: %v", err)
	}
}

// TestDamagedArena: corrupt segment lists and free maps are reported as
// errors (ErrCorrupt) by reads, writes and the walk, without panics.
func TestDamagedArena(t *testing.T) {
	damage := []struct {
		name string
		hit  func(e *env, seg pram.Off)
	}{
		{"segment disk block out of range", func(e *env, seg pram.Off) {
			l := e.s.segs(seg)
			c, _, _ := l.first()
			e.a.PutU64(l.recOff(c.leaf, c.i)+8, 1<<40)
		}},
		{"segment count zero", func(e *env, seg pram.Off) {
			l := e.s.segs(seg)
			c, _, _ := l.first()
			e.a.PutU64(l.recOff(c.leaf, c.i)+16, 0)
		}},
		{"directory pointer wild", func(e *env, seg pram.Off) { e.a.PutU64(seg+slOffSegs+xhDir, 1<<62) }},
		{"leaf pointer wild", func(e *env, seg pram.Off) {
			e.a.PutU64(pram.Off(e.a.U64(seg+slOffSegs+xhDir))+8, 12345)
		}},
		{"leaf count beyond capacity", func(e *env, seg pram.Off) {
			lo := pram.Off(e.a.U64(pram.Off(e.a.U64(seg+slOffSegs+xhDir)) + 8))
			e.a.PutU64(lo, 1<<31|1<<30)
		}},
		{"checksum page wild", func(e *env, seg pram.Off) {
			l := e.s.sums(seg)
			c, _, _ := l.first()
			e.a.PutU64(l.recOff(c.leaf, c.i)+8, 3)
		}},
		{"bad magic", func(e *env, seg pram.Off) { e.a.PutU64(seg, 0) }},
		{"free map leaf wild", func(e *env, seg pram.Off) {
			e.a.PutU64(pram.Off(e.a.U64(e.s.fm+fmOffList+xhDir))+8, 8)
		}},
		{"free extent overlaps a file", func(e *env, seg pram.Off) {
			l := e.s.freeList()
			c, _, _ := l.first()
			e.a.PutU64(l.recOff(c.leaf, c.i), 1)
		}},
	}
	for _, d := range damage {
		t.Run(d.name, func(t *testing.T) {
			e := newEnv(t, envOpts{blockSize: 4096})
			seg := e.newFile(5)
			e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, pattern(5, 0, 300<<10)) })
			d.hit(e, seg)
			errs := e.checkErrs(map[pram.Off]int64{seg: 300 << 10}, true)
			if len(errs) == 0 {
				t.Fatal("walk found nothing")
			}
			// Operations report errors or work; they never panic.
			_, _ = e.read(seg, 0, 300<<10)
			_ = e.do(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 4096, pattern(6, 4096, 9000)) })
			_ = e.do(func(tx *pram.Tx) error { return e.s.Truncate(tx, seg, 5000) })
			_ = e.do(func(tx *pram.Tx) error { return e.s.Destroy(tx, seg) })
			seg2 := pram.Off(0)
			_ = e.do(func(tx *pram.Tx) (err error) {
				if seg2, err = e.s.NewFile(tx, 6); err != nil {
					return err
				}
				return e.s.WriteThrough(tx, seg2, 0, pattern(6, 0, 100<<10))
			})
			_ = e.s.Stats()
		})
	}
}

// TestCheckProgress: the walk reports progress up to the used blocks.
func TestCheckProgress(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096})
	files := map[pram.Off]int64{}
	for i := 0; i < 3; i++ {
		seg := e.newFile(uint64(i))
		e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, pattern(uint32(i), 0, (i+1)<<20)) })
		files[seg] = int64(i+1) << 20
	}
	var last, total, calls uint64
	c := e.h.NewChecker()
	k := e.s.NewChecker(c, CheckOptions{VerifyData: true, Progress: func(done, tot uint64) {
		if done < last {
			t.Errorf("progress went back from %d to %d", last, done)
		}
		last, total = done, tot
		calls++
	}})
	for seg, size := range files {
		k.File(seg, size)
	}
	if errs := append(k.Finish(), c.Finish()...); len(errs) > 0 {
		t.Fatal(errs)
	}
	if calls == 0 || last != total || total != e.s.Stats().UsedBlocks {
		t.Fatalf("progress ended at %d of %d (%d calls), used %d", last, total, calls, e.s.Stats().UsedBlocks)
	}
}
