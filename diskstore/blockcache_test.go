package diskstore

import (
	"bytes"
	"errors"
	"testing"

	"conquest/pram"
)

// Small reads inside written blocks read each block from the device once;
// without the cache every read reads its block.
func TestCacheSmallReads(t *testing.T) {
	for _, cache := range []int64{0, -1} {
		cd := &countDevice{Device: NewMemDevice(64 << 20)}
		e := newEnv(t, envOpts{dev: cd, o: Options{CacheBytes: cache}})
		seg := e.newFile(1)
		const size = 1 << 20
		data := pattern(1, 0, size)
		e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, data) })
		cd.reads.Store(0)
		const chunk = 8 << 10
		for pass := 0; pass < 2; pass++ {
			for off := int64(size - chunk); off >= 0; off -= chunk {
				p, err := e.read(seg, off, chunk)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(p, data[off:off+chunk]) {
					t.Fatalf("cache %d: data at %d differs", cache, off)
				}
			}
		}
		blocks, reads := int64(size/DefaultBlockSize), cd.reads.Load()
		if cache == 0 && reads != blocks {
			t.Fatalf("with the cache: %d device reads for %d blocks", reads, blocks)
		}
		if cache < 0 && reads != 2*size/chunk {
			t.Fatalf("without the cache: %d device reads, want %d", reads, 2*size/chunk)
		}
	}
}

// Sequential 8 KiB appends read nothing back (the block they append to is
// cached) and the file reads back intact from the device.
func TestCacheAppendsReadNothing(t *testing.T) {
	cd := &countDevice{Device: NewMemDevice(64 << 20)}
	e := newEnv(t, envOpts{dev: cd})
	seg := e.newFile(1)
	const size, chunk = 2 << 20, 8 << 10
	data := pattern(2, 0, size)
	cd.reads.Store(0)
	for off := int64(0); off < size; off += chunk {
		if err := e.write(seg, off, data[off:off+chunk]); err != nil {
			t.Fatal(err)
		}
	}
	if n := cd.reads.Load(); n != 0 {
		t.Fatalf("%d device reads while appending", n)
	}
	if e.s.cache.hits == 0 {
		t.Fatal("no cache hits")
	}
	e.s.cache = newBlockCache(DefaultBlockSize, 0) // off: read the device
	p, err := e.read(seg, 0, size)
	if err != nil || !bytes.Equal(p, data) {
		t.Fatalf("from the device: %v, equal %v", err, bytes.Equal(p, data))
	}
	if n := cd.reads.Load(); n == 0 {
		t.Fatal("the read did not read the device")
	}
}

// A cached block stops matching when the file changes: overwrite, abort of
// an append written in place, truncate and regrow, destroy and a new file
// at the same place.
func TestCacheNeverStale(t *testing.T) {
	e := newEnv(t, envOpts{})
	const bs = DefaultBlockSize
	seg := e.newFile(1)
	old := pattern(3, 0, bs/2)
	if err := e.write(seg, 0, old); err != nil {
		t.Fatal(err)
	}
	expect := func(what string, off int64, want []byte) {
		t.Helper()
		p, err := e.read(seg, off, len(want))
		if err != nil || !bytes.Equal(p, want) {
			t.Fatalf("%s: err %v, data equal %v", what, err, bytes.Equal(p, want))
		}
	}
	expect("first read", 0, old)
	// An append in place that is rolled back: the tail reads as zeros again.
	boom := errors.New("boom")
	err := e.do(func(tx *pram.Tx) error {
		if err := e.s.Write(tx, seg, bs/2, pattern(4, bs/2, 4096)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	expect("after abort", 0, append(append([]byte(nil), old...), make([]byte, 4096)...))
	// Overwrite (copy-on-write once synced).
	if err := e.flush(seg); err != nil {
		t.Fatal(err)
	}
	neu := pattern(5, 100, 8192)
	if err := e.write(seg, 100, neu); err != nil {
		t.Fatal(err)
	}
	expect("after overwrite", 100, neu)
	// Truncate into the block and grow again: zeros beyond the cut.
	e.must(func(tx *pram.Tx) error { return e.s.Truncate(tx, seg, 50) })
	e.must(func(tx *pram.Tx) error { return e.s.Truncate(tx, seg, bs) })
	expect("after truncate", 0, append(append([]byte(nil), old[:50]...), make([]byte, bs-50)...))
	// Destroy; a new file may get the same segment list.
	e.must(func(tx *pram.Tx) error { return e.s.Destroy(tx, seg) })
	seg = e.newFile(2)
	other := pattern(6, 0, bs/2)
	if err := e.write(seg, 0, other); err != nil {
		t.Fatal(err)
	}
	expect("new file", 0, other)
}

// The cache holds at most CacheBytes and evicts the least recently used.
func TestCacheBounded(t *testing.T) {
	c := newBlockCache(4096, 3*4096)
	blk := func(b byte) []byte { return bytes.Repeat([]byte{b}, 4096) }
	for i := uint64(1); i <= 4; i++ {
		c.put(8, i, 7, Block(i), i, blk(byte(i)))
		if i == 3 {
			var p [1]byte
			c.get(8, 1, 7, 1, 1, p[:], 0) // 1 is now the most recent: 2 goes
		}
	}
	if len(c.m) != 3 || c.has(8, 2, 7, 2, 2) || !c.has(8, 1, 7, 1, 1) || !c.has(8, 4, 7, 4, 4) {
		t.Fatalf("entries %d, has 1 %v, 2 %v, 4 %v", len(c.m), c.has(8, 1, 7, 1, 1), c.has(8, 2, 7, 2, 2), c.has(8, 4, 7, 4, 4))
	}
	var p [10]byte
	if c.get(8, 4, 7, 4, 5, p[:], 0) || c.get(8, 4, 8, 4, 4, p[:], 0) || c.get(8, 4, 7, 9, 4, p[:], 0) {
		t.Fatal("an entry matched another checksum, seed or disk block")
	}
	if !c.get(8, 4, 7, 4, 4, p[:], 100) || p[0] != 4 {
		t.Fatal("entry 4 not served")
	}
	c.drop(8)
	if len(c.m) != 0 {
		t.Fatalf("%d entries after drop", len(c.m))
	}
}

// Dropping a file's blocks keeps only spareBuffers of their buffers: the
// memory of a deleted file's cached blocks goes back.
func TestCacheDropFreesMemory(t *testing.T) {
	const n = 4 * spareBuffers
	c := newBlockCache(4096, n*4096)
	blk := bytes.Repeat([]byte{1}, 4096)
	for i := uint64(1); i <= n; i++ {
		c.put(8, i, 7, Block(i), i, blk)
	}
	if len(c.m) != n {
		t.Fatalf("%d entries, want %d", len(c.m), n)
	}
	c.drop(8)
	if len(c.m) != 0 || len(c.free) != spareBuffers {
		t.Fatalf("after drop: %d entries, %d spare buffers, want 0 and %d", len(c.m), len(c.free), spareBuffers)
	}
	for i := uint64(1); i <= 2; i++ { // reused first
		c.put(9, i, 7, Block(i), i, blk)
	}
	if len(c.free) != spareBuffers-2 {
		t.Fatalf("%d spare buffers after 2 puts, want %d", len(c.free), spareBuffers-2)
	}
}
