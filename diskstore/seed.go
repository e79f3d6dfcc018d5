package diskstore

import (
	"fmt"

	"conquest/pram"
)

// A damaged seed. Every block checksum of a large file is seeded with the
// random seed in its segment list's header, so one flipped bit there makes
// every block of the file fail its checksum although neither the data nor
// the checksums changed. The consistency walk (with VerifyData) recognises
// it: when a file's first written block fails, it tries the seeds a small
// damage to the recorded one could have come from (one or two bits flipped,
// or one byte changed: about 4,000 hashes of one block). If one of them
// verifies that block, and no block before it verified under the recorded
// seed, every failing block that verifies under the found seed is explained
// by it; blocks after it that verify under the recorded seed were written
// since the damage (seedResult). The walk reports a *SeedDamageError
// instead of those blocks, and Store.RewriteSeed repairs it. A walk
// searches for at most maxSeedSearches files. A wrong seed that happens to
// verify a block of unrelated data has a chance of about 2^-52.

// SeedDamageError is a large file whose recorded checksum seed is damaged:
// Blocks of its blocks verify under Seed and none under the recorded
// Stored. It is ErrCorrupt, not ErrDataChecksum: the data is sound. Callers
// get it with errors.As; Store.RewriteSeed repairs it.
type SeedDamageError struct {
	Owner  uint64 // the inode
	Seg    pram.Off
	Stored uint64 // the seed the segment list records
	Seed   uint64 // the seed the data verifies under
	Blocks uint64 // blocks that verify under Seed
	// Rehash are the file blocks that verify under Stored: written since
	// the damage, with the damaged seed. They are fewer than Blocks and
	// come after the first block.
	Rehash []uint64
}

func (e *SeedDamageError) Error() string {
	if len(e.Rehash) > 0 {
		return fmt.Sprintf("%v: inode %d: the checksum seed %#016x is damaged: %d block(s) verify under %#016x, %d written since the damage under it",
			ErrCorrupt, e.Owner, e.Stored, e.Blocks, e.Seed, len(e.Rehash))
	}
	return fmt.Sprintf("%v: inode %d: the checksum seed %#016x is damaged: %d block(s) verify under %#016x and none under it",
		ErrCorrupt, e.Owner, e.Stored, e.Blocks, e.Seed)
}

// Unwrap returns ErrCorrupt.
func (e *SeedDamageError) Unwrap() error { return ErrCorrupt }

// maxSeedSearches bounds the searches of one walk (each hashes one block
// about 4,000 times, some 20 ms for a 16 KiB block): a disk whose data is
// lost everywhere must not make fsck take hours.
const maxSeedSearches = 256

// seedFinding is what the walk learned about one file's seed.
type seedFinding struct {
	tried  bool
	found  bool
	seed   uint64
	blocks uint64   // failing blocks the found seed verifies
	rehash []uint64 // blocks that verified under the recorded seed after the search
}

// maxRehash bounds SeedDamageError.Rehash: the repair rewrites their
// checksums in one transaction.
const maxRehash = 1024

// seedPassed notes that file blocks [fb, end) of seg verified under the
// recorded seed.
func (k *Checker) seedPassed(seg pram.Off, fb, end uint64) {
	k.passed[seg] += end - fb
	if f := k.seeds[seg]; f != nil && f.found {
		for ; fb < end && len(f.rehash) <= maxRehash; fb++ {
			f.rehash = append(f.rehash, fb)
		}
	}
}

// seedCandidates calls f with each seed a small damage to stored could have
// come from, until f returns true.
func seedCandidates(stored uint64, f func(seed uint64) bool) (uint64, bool) {
	for i := range 64 {
		if c := stored ^ 1<<i; f(c) {
			return c, true
		}
	}
	for i := range 64 {
		for j := i + 1; j < 64; j++ {
			if c := stored ^ (1<<i | 1<<j); f(c) {
				return c, true
			}
		}
	}
	for byteAt := range 8 {
		for v := uint64(1); v < 256; v++ {
			if c := stored ^ v<<(8*byteAt); f(c) {
				return c, true
			}
		}
	}
	return 0, false
}

// seedExplains reports whether block fb of seg (data b, recorded checksum
// sum), which failed its checksum, verifies under a seed found for the file
// (searched for at its first failing block, if no block passed before).
func (k *Checker) seedExplains(seg pram.Off, fb, sum uint64, b []byte) bool {
	f := k.seeds[seg]
	if f == nil {
		f = &seedFinding{}
		k.seeds[seg] = f
	}
	if !f.tried {
		f.tried = true
		if k.passed[seg] > 0 || k.seedSearches >= maxSeedSearches {
			return false
		}
		k.seedSearches++
		f.seed, f.found = seedCandidates(k.s.a.U64(seg+slOffSeed), func(seed uint64) bool {
			return k.s.blockSum(seed, fb, b) == sum
		})
	}
	if !f.found || k.s.blockSum(f.seed, fb, b) != sum {
		return false
	}
	f.blocks++
	return true
}

// seedSumDamaged reports whether block fb of seg (data b, recorded checksum
// sum) looks like a block whose checksum record is damaged when judged
// under the seed found for the file, and sets *data to its checksum under
// that seed. The repair rewrites the seed before such records.
func (k *Checker) seedSumDamaged(seg pram.Off, fb, sum uint64, b []byte, data *uint64) bool {
	f := k.seeds[seg]
	if f == nil || !f.found {
		return false
	}
	*data = k.s.blockSum(f.seed, fb, b)
	return sumDamaged(sum, *data)
}

// seedResult reports the finding for seg at the end of its walk: a
// *SeedDamageError. Blocks that verified under the recorded seed after the
// first failing block were written since the damage (appends and
// overwrites use the recorded seed); the repair rehashes them, if they are
// fewer than those the found seed explains (and at most maxRehash). Else
// neither seed is trusted and the walk says so.
func (k *Checker) seedResult(seg pram.Off) {
	f := k.seeds[seg]
	if f == nil || !f.found || f.blocks == 0 {
		return
	}
	owner, stored := k.s.owner(seg), k.s.a.U64(seg+slOffSeed)
	if uint64(len(f.rehash)) >= f.blocks || len(f.rehash) > maxRehash {
		k.add("inode %d: %d block(s) verify under the seed %#016x, %d under the recorded %#016x",
			owner, f.blocks, f.seed, k.passed[seg], stored)
		return
	}
	k.errs = append(k.errs, &SeedDamageError{Owner: owner, Seg: seg, Stored: stored, Seed: f.seed, Blocks: f.blocks, Rehash: f.rehash})
}

// RewriteSeed repairs a *SeedDamageError: it records seed as the checksum
// seed of seg and rehashes under it the file blocks rehash (which must
// verify under stored), after checking that stored is the seed recorded
// now and that seed is one a small damage to it explains (else ErrCorrupt;
// the caller aborts tx). The caller found that the rest of the data
// verifies under seed.
func (s *Store) RewriteSeed(tx *pram.Tx, seg pram.Off, stored, seed uint64, rehash []uint64) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	if cur := s.a.U64(seg + slOffSeed); cur != stored {
		return fmt.Errorf("%w: inode %d: the seed is %#016x now, not %#016x", ErrCorrupt, s.owner(seg), cur, stored)
	}
	if _, ok := seedCandidates(stored, func(c uint64) bool { return c == seed }); !ok {
		return fmt.Errorf("%w: inode %d: seed %#016x is not a small change of %#016x", ErrCorrupt, s.owner(seg), seed, stored)
	}
	buf := AlignedBuffer(int(s.bs))
	for _, fb := range rehash {
		sum, err := s.readWritten(seg, fb, buf)
		if err != nil {
			return err
		}
		if got := s.blockSum(stored, fb, buf); got != sum {
			return fmt.Errorf("%w: inode %d: file block %d does not verify under the recorded seed", ErrCorrupt, s.owner(seg), fb)
		}
		if err := s.setSums(tx, seg, fb, []uint64{s.blockSum(seed, fb, buf)}); err != nil {
			return err
		}
	}
	tx.Set64(seg+slOffSeed, seed)
	s.bump(seg)
	return nil
}
