package dirhash

import (
	"encoding/binary"

	"conquest/pram"
)

// On-arena layout. Every structure is little-endian and addressed by
// pram.Off; nothing here is a Go struct mapped onto the arena. The sizes and
// field offsets below are pinned by layout_test.go: changing one changes the
// on-arena format and needs a new magic.
//
// A directory is three kinds of allocation:
//
//	root   (rootSize bytes)  magic, global depth G, entry count, table offset, counters
//	table  2^G bucket offsets indexed by the top G bits of an entry's key:
//	       one allocation of 8<<G bytes while G <= leafBits, otherwise a
//	       top array of 2^(G-leafBits) leaf offsets, each leaf leafBytes long
//	page   a bucket page of minPage..maxPage bytes (a power of two): a header,
//	       a slot array growing up from the header and the names packed down
//	       from the end. A bucket is a primary page plus an overflow chain.
const (
	rootMagic   = 0x52445143 // "CQDR"
	rootVersion = 1

	rootOffMagic   = 0  // u32
	rootOffVersion = 4  // u8
	rootOffDepth   = 5  // u8: global depth G
	rootOffCount   = 8  // u64: entries
	rootOffTable   = 16 // u64: table (or top array) offset
	rootOffAtDepth = 24 // u64: primary buckets whose local depth is G
	rootOffBuckets = 32 // u64: primary buckets (distinct buckets in the table)
	rootOffPages   = 40 // u64: bucket pages, primaries plus overflow pages
	rootSize       = 64 // bytes 48..63 reserved (zero)

	pageMagic       = 0x42445143 // "CQDB"
	pageOffMagic    = 0          // u32
	pageOffDepth    = 4          // u8: local depth ld
	pageOffFlags    = 5          // u8: flagOverflow
	pageOffN        = 6          // u16: slots in use
	pageOffSize     = 8          // u16: page bytes
	pageOffNameLo   = 10         // u16: lowest byte of the name area
	pageOffNameLive = 12         // u16: bytes of live names in [nameLo, size)
	pageOffPrefix   = 16         // u64: the bucket's top ld key bits
	pageOffNext     = 24         // u64: next page of the overflow chain (0 = end)
	pageHdr         = 32

	// The words of the header that insert and delete change, logged together.
	pageCountersLo = pageOffN
	pageCountersHi = pageOffNameLive + 2

	flagOverflow = 1

	slotOffKey  = 0  // u64: entry key (the scan order)
	slotOffIno  = 8  // u64: inode number
	slotOffName = 16 // u16: offset of the name in the page
	slotOffLen  = 18 // u8: name length
	slotOffType = 19 // u8: DT_* type
	slotSize    = 24 // bytes 20..23 reserved (zero)
	minPage     = 256
	maxPage     = 4096

	leafBits  = 13 // a table leaf holds 2^leafBits bucket offsets
	leafSlots = 1 << leafBits
	leafBytes = 8 * leafSlots // 64 KiB
	topBits   = 17            // a top array holds at most 2^topBits leaves (1 MiB)

	// MaxDepth is the largest global depth: 2^30 buckets.
	MaxDepth = leafBits + topBits
)

// Keys. An entry's key is its scan order and its cursor: the top hashBits
// bits of the name's 64-bit hash followed by an ordinal that tells apart
// names whose hashes agree in those bits. Keys are < 1<<keyBits, and the
// largest key is 1<<keyBits - 2 because the largest ordinal is maxOrdinal,
// so a cursor key+1 is always below 1<<62.
const (
	keyBits    = 62
	ordBits    = 7
	hashBits   = keyBits - ordBits // 55
	maxOrdinal = 1<<ordBits - 2    // 126: 127 ordinals, 0..126
	keyLimit   = 1 << keyBits
)

var le = binary.LittleEndian

// page is a view of one bucket page, aliasing the arena. Its header has been
// validated by loadPage; slot fields are validated where they are used.
type page struct {
	off pram.Off
	b   []byte
}

func (p page) depth() uint      { return uint(p.b[pageOffDepth]) }
func (p page) flags() uint8     { return p.b[pageOffFlags] }
func (p page) n() int           { return int(le.Uint16(p.b[pageOffN:])) }
func (p page) size() int        { return len(p.b) }
func (p page) nameLo() int      { return int(le.Uint16(p.b[pageOffNameLo:])) }
func (p page) nameLive() int    { return int(le.Uint16(p.b[pageOffNameLive:])) }
func (p page) prefix() uint64   { return le.Uint64(p.b[pageOffPrefix:]) }
func (p page) next() pram.Off   { return pram.Off(le.Uint64(p.b[pageOffNext:])) }
func (p page) key(i int) uint64 { return le.Uint64(p.b[pageHdr+slotSize*i+slotOffKey:]) }
func (p page) ino(i int) uint64 { return le.Uint64(p.b[pageHdr+slotSize*i+slotOffIno:]) }
func (p page) typ(i int) uint8  { return p.b[pageHdr+slotSize*i+slotOffType] }

// used is the bytes the page's contents occupy: header, slots, live names.
func (p page) used() int { return pageHdr + slotSize*p.n() + p.nameLive() }

// free is the bytes a compaction would make available.
func (p page) free() int { return p.size() - p.used() }

// gap is the contiguous free bytes between the slots and the names.
func (p page) gap() int { return p.nameLo() - pageHdr - slotSize*p.n() }

// name returns slot i's name, or false if its offset or length is damaged.
func (p page) name(i int) ([]byte, bool) {
	s := p.b[pageHdr+slotSize*i:]
	o, l := int(le.Uint16(s[slotOffName:])), int(s[slotOffLen])
	if l == 0 || o < p.nameLo() || o+l > len(p.b) {
		return nil, false
	}
	return p.b[o : o+l : o+l], true
}

// recSize is the bytes one entry with a name of n bytes takes in a page.
func recSize(n int) int { return slotSize + n }

// pageFor is the page size for contents of used bytes, with a quarter to
// spare for growth: a power of two in [minPage, maxPage].
func pageFor(used int) int {
	want := used + used/4
	s := minPage
	for s < want && s < maxPage {
		s *= 2
	}
	return s
}

// ent is an entry held in Go memory while a page is rebuilt.
type ent struct {
	key  uint64
	ino  uint64
	typ  uint8
	name []byte
}

// buildPage lays out a page image of len(img) bytes holding ents.
// Preconditions: the entries fit (pageHdr + sum of recSize <= len(img)).
func buildPage(img []byte, depth uint, flags uint8, prefix uint64, next pram.Off, ents []ent) {
	clear(img)
	le.PutUint32(img[pageOffMagic:], pageMagic)
	img[pageOffDepth] = uint8(depth)
	img[pageOffFlags] = flags
	le.PutUint16(img[pageOffSize:], uint16(len(img)))
	le.PutUint64(img[pageOffPrefix:], prefix)
	le.PutUint64(img[pageOffNext:], uint64(next))
	lo, live := len(img), 0
	for i, e := range ents {
		lo -= len(e.name)
		live += len(e.name)
		copy(img[lo:], e.name)
		putSlot(img[pageHdr+slotSize*i:], e, lo)
	}
	le.PutUint16(img[pageOffN:], uint16(len(ents)))
	le.PutUint16(img[pageOffNameLo:], uint16(lo))
	le.PutUint16(img[pageOffNameLive:], uint16(live))
}

// putSlot encodes e, whose name is at page offset nameOff, into s.
func putSlot(s []byte, e ent, nameOff int) {
	le.PutUint64(s[slotOffKey:], e.key)
	le.PutUint64(s[slotOffIno:], e.ino)
	le.PutUint16(s[slotOffName:], uint16(nameOff))
	s[slotOffLen] = uint8(len(e.name))
	s[slotOffType] = e.typ
	clear(s[slotOffType+1 : slotSize])
}

// contentBytes is the bytes ents take in pages, without page headers.
func contentBytes(ents []ent) int {
	n := 0
	for _, e := range ents {
		n += recSize(len(e.name))
	}
	return n
}
