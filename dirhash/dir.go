package dirhash

import (
	"bytes"
	"errors"

	"conquest/alloc"
	"conquest/pram"

	farm "github.com/dgryski/go-farm"
)

// MaxName is the longest name, in bytes.
const MaxName = 255

// HashFunc hashes names. It is a test hook: tests replace it to force
// collisions. It must not change while a directory built with another hash
// function is in use, and it is read without synchronization.
var HashFunc = farm.Hash64

// Entry is one directory entry as Scan returns it.
type Entry struct {
	Name []byte // a copy owned by the caller
	Ino  uint64
	Type uint8 // DT_* value of dirent(5)
}

// Dir is an open directory: a cheap value naming a root in the arena. Its
// methods validate what they read; a damaged directory yields ErrCorrupt
// (Lookup: not found), never a panic. Tx methods may still panic with
// pram.ErrTxFull; the caller recovers and aborts the transaction.
type Dir struct {
	h    *alloc.Heap
	a    *pram.Arena
	root pram.Off
}

// Create makes a new empty directory and returns its root offset.
func Create(tx *pram.Tx, h *alloc.Heap) (pram.Off, error) {
	d := Dir{h: h, a: h.Arena()}
	offs, err := d.allocPages(tx, []int{minPage})
	if err != nil {
		return 0, err
	}
	d.writeChain(offs, []int{minPage}, [][]ent{nil}, 0, 0)
	table, err := h.Alloc(tx, 8)
	if err != nil {
		return 0, errors.Join(err, d.freeAll(tx, offs))
	}
	le.PutUint64(d.a.Bytes(table, 8), uint64(offs[0]))
	root, err := h.Alloc(tx, rootSize)
	if err != nil {
		return 0, errors.Join(err, d.freeAll(tx, append(offs, table)))
	}
	// Fresh memory: written unlogged.
	encodeRoot(d.a.Bytes(root, rootSize), &rootHdr{table: table, atDepth: 1, buckets: 1, pages: 1})
	return root, nil
}

// Open returns the directory whose root Create returned. h (not nil) must
// be the heap of the arena the directory lives in. Open reads nothing: a bad
// root shows up as ErrCorrupt from the methods.
func Open(h *alloc.Heap, root pram.Off) Dir {
	return Dir{h: h, a: h.Arena(), root: root}
}

// Root is the directory's root offset.
func (d Dir) Root() pram.Off { return d.root }

// checkName validates a name for storage.
func checkName(name []byte) error {
	switch {
	case len(name) == 0:
		return ErrBadName
	case len(name) > MaxName:
		return ErrNameTooLong
	case len(name) <= 2 && name[0] == '.' && name[len(name)-1] == '.':
		return ErrBadName // "." and "..": the file system synthesizes them
	}
	for _, c := range name {
		if c == '/' || c == 0 {
			return ErrBadName
		}
	}
	return nil
}

// hashPrefix is the top hashBits bits of name's hash: an entry's key is
// hashPrefix<<ordBits | ordinal.
func hashPrefix(name []byte) uint64 { return HashFunc(name) >> (64 - hashBits) }

// Lookup returns the inode number and type name maps to; a damaged
// directory holds no name for it (Find tells the two apart).
func (d Dir) Lookup(name []byte) (ino uint64, typ uint8, ok bool) {
	ino, typ, err := d.Find(name)
	return ino, typ, err == nil
}

// Find returns the inode number and type name maps to: ErrNotFound if the
// directory does not hold it (or name is not a valid name), ErrCorrupt if
// its structure is damaged on the way (a wild table or bucket offset), so
// that the caller answers EIO, as ext4 does for a damaged directory block,
// rather than "no such file".
func (d Dir) Find(name []byte) (ino uint64, typ uint8, err error) {
	if checkName(name) != nil {
		return 0, 0, ErrNotFound
	}
	hp := hashPrefix(name)
	r, err := d.loadRoot()
	if err != nil {
		return 0, 0, err
	}
	off, err := d.bucketAt(&r, slotIndex(r.depth, hp<<ordBits))
	if err != nil {
		return 0, 0, err
	}
	for hops := d.maxChain(); off != 0 && hops > 0; hops-- {
		p, err := d.loadPage(off)
		if err != nil {
			return 0, 0, err
		}
		slots := p.b[pageHdr : pageHdr+slotSize*p.n()]
		for s := 0; s+slotSize <= len(slots); s += slotSize {
			if le.Uint64(slots[s:])>>ordBits != hp {
				continue
			}
			if nm, ok := p.name(s / slotSize); ok && bytes.Equal(nm, name) {
				return p.ino(s / slotSize), p.typ(s / slotSize), nil
			}
		}
		off = p.next()
	}
	return 0, 0, ErrNotFound
}

// Len is the number of entries (0 if the root is damaged).
func (d Dir) Len() uint64 {
	r, err := d.loadRoot()
	if err != nil {
		return 0
	}
	return r.count
}

// find locates name in the bucket that owns hash prefix hp.
func (d Dir) find(r *rootHdr, name []byte, hp uint64) (b bucket, pg, slot int, err error) {
	b, err = d.locate(r, hp<<ordBits)
	if err != nil {
		return b, 0, 0, err
	}
	for k, p := range b.pages {
		for i := range p.n() {
			if p.key(i)>>ordBits != hp {
				continue
			}
			nm, ok := p.name(i)
			if !ok {
				return b, 0, 0, corruptf("directory %d: page %d slot %d: bad name offset", d.root, p.off, i)
			}
			if bytes.Equal(nm, name) {
				return b, k, i, nil
			}
		}
	}
	return b, 0, 0, ErrNotFound
}

// Insert adds name → (ino, typ). It fails with ErrExists if name is present,
// ErrNameTooLong or ErrBadName for an invalid name, and an error wrapping
// alloc.ErrNoSpace (ErrCollision among them) if the arena is full. On error
// the directory's entries are unchanged (its shape may have changed, which
// no reader can observe); the caller may Abort the transaction to undo the
// reshaping too.
func (d Dir) Insert(tx *pram.Tx, name []byte, ino uint64, typ uint8) error {
	if err := checkName(name); err != nil {
		return err
	}
	hp := hashPrefix(name)
	e := ent{ino: ino, typ: typ, name: name}
	need := recSize(len(name))
	// Each pass either stores the entry or reshapes the bucket once (grow,
	// double, split or chain); a real insert needs at most about 2*MaxDepth.
	for range 4*MaxDepth + 16 {
		r, err := d.loadRoot()
		if err != nil {
			return err
		}
		b, err := d.locate(&r, hp<<ordBits)
		if err != nil {
			return err
		}
		var used [2]uint64 // ordinals taken by names sharing hp
		for _, p := range b.pages {
			for i := range p.n() {
				k := p.key(i)
				if k>>ordBits != hp {
					continue
				}
				nm, ok := p.name(i)
				if !ok {
					return corruptf("directory %d: page %d slot %d: bad name offset", d.root, p.off, i)
				}
				if bytes.Equal(nm, name) {
					return ErrExists
				}
				o := k & (1<<ordBits - 1)
				used[o>>6] |= 1 << (o & 63)
			}
		}
		ord := uint64(0)
		for ord <= maxOrdinal && used[ord>>6]&(1<<(ord&63)) != 0 {
			ord++
		}
		if ord > maxOrdinal {
			return ErrCollision
		}
		e.key = hp<<ordBits | ord
		for _, p := range b.pages {
			ok, err := d.insertInPage(tx, p, e)
			if err != nil {
				return err
			}
			if ok {
				r.count++
				d.storeRoot(tx, &r)
				return nil
			}
		}
		if err := d.makeRoom(tx, &r, &b, e.key, need); err != nil {
			return err
		}
	}
	return corruptf("directory %d: no room made for a %d-byte name", d.root, len(name))
}

// Delete removes name and returns what it mapped to. ErrNotFound if absent.
// It never fails for lack of space: reshaping that would need memory is
// skipped.
func (d Dir) Delete(tx *pram.Tx, name []byte) (ino uint64, typ uint8, err error) {
	if err := checkName(name); err != nil {
		return 0, 0, err
	}
	hp := hashPrefix(name)
	r, err := d.loadRoot()
	if err != nil {
		return 0, 0, err
	}
	b, pg, slot, err := d.find(&r, name, hp)
	if err != nil {
		return 0, 0, err
	}
	p := b.pages[pg]
	ino, typ, key := p.ino(slot), p.typ(slot), p.key(slot)
	d.removeFromPage(tx, p, slot)
	r.count--
	d.storeRoot(tx, &r)
	if err := d.tidy(tx, key); err != nil {
		return 0, 0, err
	}
	return ino, typ, nil
}

// Replace points the existing name at (ino, typ) and returns what it mapped
// to before; ErrNotFound if name is absent (the directory is unchanged).
// The entry keeps its key, so a scan in progress returns it once.
func (d Dir) Replace(tx *pram.Tx, name []byte, ino uint64, typ uint8) (oldIno uint64, oldTyp uint8, err error) {
	if err := checkName(name); err != nil {
		return 0, 0, err
	}
	r, err := d.loadRoot()
	if err != nil {
		return 0, 0, err
	}
	b, pg, slot, err := d.find(&r, name, hashPrefix(name))
	if err != nil {
		return 0, 0, err
	}
	p := b.pages[pg]
	oldIno, oldTyp = p.ino(slot), p.typ(slot)
	s := p.off + pram.Off(pageHdr+slotSize*slot)
	tx.Set64(s+slotOffIno, ino)
	tx.Set8(s+slotOffType, typ)
	return oldIno, oldTyp, nil
}

// Destroy frees all storage of the directory at root, entries or not. It
// validates the whole structure first, so a damaged directory is reported
// (ErrCorrupt) and nothing is freed.
func Destroy(tx *pram.Tx, h *alloc.Heap, root pram.Off) error {
	d := Open(h, root)
	r, err := d.loadRoot()
	if err != nil {
		return err
	}
	offs, err := d.tableAllocs(&r)
	if err != nil {
		return err
	}
	err = d.walk(&r, func(b *bucket) error {
		offs = append(offs, b.pageOffs()...)
		return nil
	})
	if err != nil {
		return err
	}
	return d.freeAll(tx, append(offs, root))
}

// walk calls fn for every bucket in table order, validating the table:
// every bucket owns an aligned run of 2^(G-ld) slots.
func (d Dir) walk(r *rootHdr, fn func(b *bucket) error) error {
	n := uint64(1) << r.depth
	for i := uint64(0); i < n; {
		b, err := d.locate(r, i<<(keyBits-r.depth))
		if err != nil {
			return err
		}
		if b.lo != i {
			return corruptf("directory %d: table slot %d holds bucket of slots [%d, %d)", d.root, i, b.lo, b.hi)
		}
		for j := i + 1; j < b.hi; j++ {
			off, err := d.bucketAt(r, j)
			if err != nil {
				return err
			}
			if off != b.pages[0].off {
				return corruptf("directory %d: table slot %d holds %d, want %d (bucket of slots [%d, %d))",
					d.root, j, off, b.pages[0].off, b.lo, b.hi)
			}
		}
		if err := fn(&b); err != nil {
			return err
		}
		i = b.hi
	}
	return nil
}
