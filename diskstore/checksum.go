package diskstore

import (
	"bytes"

	farm "github.com/dgryski/go-farm"
)

// Block checksums.
//
// Every written block of a large file has a 64-bit checksum in the arena,
// seeded with the file's random seed and the block's place in the file, so
// that a block of another file, or of another offset, does not verify. A
// block of zeros has checksum 0 (it needs no disk block and is never read);
// any other block's checksum is never 0.
//
// Page sums (sumFormatPages and sumFormatChecked): the checksum is the
// sum, modulo 2^64, of a farm hash of each 4 KiB page that is not all zeros,
// each seeded with the seed and the page's index in the file. A write that
// changes a few pages of a block updates the sum from those pages alone:
// subtract their old hashes, add the new ones. That is what makes small
// appends cheap (inplace.go): an 8 KiB append into a 64 KiB block hashes
// 8 KiB, not the block, and needs none of the block's other bytes. Each
// page's hash is a full farm hash, so a changed, lost or misplaced page
// changes the sum but for a 2^-64 chance, as with one hash of the block.
// A sum that comes out 0 for a block that is not all zeros is stored as 1;
// a checksum of 1 is then ambiguous and is never updated incrementally
// (the block is hashed whole again).
//
// Whole-block hash (sumFormatWhole, arenas formatted before page sums): one
// farm hash of the block. Such arenas keep it; they only miss the cheap
// update.
//
// Checked pages (sumFormatChecked, every store Format makes since session
// 42): page sums as above, and each checksum page's record also keeps a
// check word (sumcheck.go), so that a checksum zeroed by damage, which
// would read as "never written" (zeros, the disk not read), is caught.
const (
	sumFormatWhole   = 0
	sumFormatPages   = 1
	sumFormatChecked = 2

	hashPage = Alignment // the page of page sums
)

// pageSeed is the seed of the hash of page index pg of a file with seed
// seed: distinct pages of one file get distinct seeds.
func pageSeed(seed, pg uint64) uint64 { return seed ^ (pg+1)*0x9e3779b97f4a7c15 }

// pagesSum is the sum of the page hashes of b, whole pages starting at the
// file's page index pg (zero pages count 0).
func (s *Store) pagesSum(seed, pg uint64, b []byte) uint64 {
	var sum uint64
	zero := s.zero[:hashPage]
	for i := 0; i+hashPage <= len(b); i += hashPage {
		page := b[i : i+hashPage]
		if bytes.Equal(page, zero) {
			pg++
			continue
		}
		sum += farm.Hash64WithSeed(page, pageSeed(seed, pg))
		pg++
	}
	return sum
}

// blockSum is the checksum of file block fb holding b (one whole block).
func (s *Store) blockSum(seed, fb uint64, b []byte) uint64 {
	if !s.pageSums {
		if bytes.Equal(b, s.zero) {
			return 0
		}
		h := farm.Hash64WithSeed(b, seed^(fb*0x9e3779b97f4a7c15))
		if h == 0 {
			h = 1
		}
		return h
	}
	sum := s.pagesSum(seed, fb*(s.bs/hashPage), b)
	if sum == 0 && !bytes.Equal(b, s.zero) {
		sum = 1
	}
	return sum
}

// updatedSum is the checksum of file block fb after bytes [at, at+len(old))
// change from old to new (whole pages: at and the lengths are multiples of
// hashPage), given its checksum sum before; ok is false when it cannot be
// derived this way (whole-block hashes, an ambiguous 1, or a result of 0
// or 1) and the block must be hashed whole.
func (s *Store) updatedSum(seed, fb, sum, at uint64, old, new []byte) (uint64, bool) {
	if !s.pageSums || sum <= 1 || len(old) != len(new) || at%hashPage != 0 || len(old)%hashPage != 0 {
		return 0, false
	}
	pg := fb*(s.bs/hashPage) + at/hashPage
	r := sum - s.pagesSum(seed, pg, old) + s.pagesSum(seed, pg, new)
	if r <= 1 {
		return 0, false
	}
	return r, true
}
