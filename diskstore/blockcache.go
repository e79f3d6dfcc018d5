package diskstore

import (
	"sync"

	"conquest/pram"
)

// The verified-block cache.
//
// A block is the unit of checksumming, so a read of 8 KiB inside a 16 KiB
// block reads and hashes the whole block, and so does the read-modify-write
// of a small write into a written block (an 8 KiB append reads back the
// block it appends to). The cache keeps recently verified (or written)
// blocks in memory so that the next small read or write in the same block
// needs neither the device nor the hash: sequential 8 KiB appends read
// nothing back, and random small reads of a file that fits in the cache
// read each block once.
//
// An entry is the contents of file block fb of the segment list at seg,
// together with the file's seed, the disk block and the checksum they had
// when the bytes were verified against it (or computed from them). A lookup
// gives the current seed, disk block and checksum from the arena (the
// caller resolves them anyway) and uses the entry only if all three match:
// bytes whose hash is the block's current checksum are its current
// contents. No invalidation is needed for correctness: a write, a rollback,
// a truncate or a destroy changes the checksum, the disk block or the seed
// (a segment list allocated again at the same offset has a new random
// seed), and the entry simply stops matching until it is evicted (least
// recently used first) or replaced. Zero blocks (checksum 0) are never read
// and never cached.
//
// The cache has its own mutex, a leaf lock: nothing else is taken while it
// is held, and every copy into or out of an entry happens under it, so
// entries are never shared outside it. Buffers of evicted entries are
// reused. It is safe for concurrent use by readers under the core's read
// lock and by the writer.
type blockCache struct {
	bs  uint64
	max int // entries; 0: disabled

	mu   sync.Mutex
	m    map[cacheKey]*cacheEntry
	head cacheEntry // LRU ring sentinel: head.next is the most recent
	free [][]byte   // buffers of evicted entries
	hits int64
	miss int64
}

type cacheKey struct {
	seg pram.Off
	fb  uint64
}

type cacheEntry struct {
	key        cacheKey
	seed, sum  uint64
	disk       Block
	data       []byte
	prev, next *cacheEntry
}

func newBlockCache(bs uint64, bytes int64) *blockCache {
	c := &blockCache{bs: bs, m: make(map[cacheKey]*cacheEntry)}
	if bytes > 0 {
		c.max = int(max(uint64(bytes)/bs, 1))
	}
	c.head.prev, c.head.next = &c.head, &c.head
	return c
}

func (c *blockCache) unlinkLocked(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *blockCache) frontLocked(e *cacheEntry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}

// get copies bytes [at, at+len(dst)) of file block fb into dst if the cache
// holds the block with this seed, disk block and checksum.
func (c *blockCache) get(seg pram.Off, fb, seed uint64, disk Block, sum uint64, dst []byte, at uint64) bool {
	if c.max == 0 || sum == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[cacheKey{seg, fb}]
	if e == nil || e.seed != seed || e.disk != disk || e.sum != sum {
		c.miss++
		return false
	}
	copy(dst, e.data[at:])
	if c.head.next != e {
		c.unlinkLocked(e)
		c.frontLocked(e)
	}
	c.hits++
	return true
}

// has reports whether get would find the block (without using it).
func (c *blockCache) has(seg pram.Off, fb, seed uint64, disk Block, sum uint64) bool {
	if c.max == 0 || sum == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[cacheKey{seg, fb}]
	return e != nil && e.seed == seed && e.disk == disk && e.sum == sum
}

// put stores a copy of data (one whole block whose checksum, with seed, is
// sum) as file block fb, held in disk block disk.
func (c *blockCache) put(seg pram.Off, fb, seed uint64, disk Block, sum uint64, data []byte) {
	if c.max == 0 || sum == 0 || uint64(len(data)) != c.bs {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{seg, fb}
	e := c.m[k]
	switch {
	case e != nil:
		c.unlinkLocked(e)
	case len(c.m) >= c.max: // reuse the least recently used entry
		e = c.head.prev
		c.unlinkLocked(e)
		delete(c.m, e.key)
		e.key = k
		c.m[k] = e
	default:
		e = &cacheEntry{key: k, data: c.takeLocked()}
		c.m[k] = e
	}
	e.seed, e.disk, e.sum = seed, disk, sum
	copy(e.data, data)
	c.frontLocked(e)
}

// patch replaces bytes [at, at+len(data)) of cached file block fb, if the
// cache holds it with this seed, disk block and checksum old, and gives the
// entry checksum sum (that of the patched bytes); it reports whether it did.
func (c *blockCache) patch(seg pram.Off, fb, seed uint64, disk Block, old, sum uint64, data []byte, at uint64) bool {
	if c.max == 0 || old == 0 || sum == 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[cacheKey{seg, fb}]
	if e == nil || e.seed != seed || e.disk != disk || e.sum != old {
		return false
	}
	copy(e.data[at:], data)
	e.sum = sum
	if c.head.next != e {
		c.unlinkLocked(e)
		c.frontLocked(e)
	}
	return true
}

// takeLocked returns a block buffer: a spare one, else a new one.
func (c *blockCache) takeLocked() []byte {
	if n := len(c.free); n > 0 {
		b := c.free[n-1]
		c.free = c.free[:n-1]
		return b
	}
	return make([]byte, c.bs)
}

// drop forgets seg's blocks (the file is gone: free the memory early). It
// keeps at most spareBuffers of their buffers for the next puts and leaves
// the rest to the garbage collector: before, every one stayed spare, so a
// daemon whose large files had all been deleted held the whole cache's
// worth of memory (an outside soak review, session 50: 27–31 MB of live
// heap with the file system empty and idle).
func (c *blockCache) drop(seg pram.Off) {
	if c.max == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if k.seg == seg {
			c.unlinkLocked(e)
			delete(c.m, k)
			if len(c.free) < spareBuffers {
				c.free = append(c.free, e.data)
			}
			e.data = nil
		}
	}
}

// spareBuffers is how many buffers of dropped entries the cache keeps for
// reuse (1 MiB of 16 KiB blocks).
const spareBuffers = 64
