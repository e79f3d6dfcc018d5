package diskstore

import (
	"fmt"
	"math"
	"strings"

	"conquest/pram"
)

// Check words of checksum pages (sumFormatChecked).
//
// A block's checksum of 0 means "never written or zeros": the block reads
// as zeros and the disk is not read (a preallocated block holds whatever
// the disk held). So damage that zeroes a checksum word served a block of
// data as zeros without an error, and fsck, which verifies only non-zero
// checksums, found nothing (a corruption review zeroed one word: 16 KiB of
// a file read as zeros, and every fsck said clean).
//
// Each checksum page's record {base, page, cap, check} therefore keeps a
// check word: the sum, modulo 2^64, of sumTerm(base+i, sum_i) over its
// entries, where a zero entry counts 0 and any other a mix of the file
// block and the checksum, so that a zeroed, changed or moved entry changes
// the sum. Every write of checksums through setSums and clearSums updates
// it by the difference of the entries' terms, in the same transaction. A
// read that meets a mapped block of checksum 0 checks its page first, and
// fails with EIO (logged) when the page's check fails. The walk checks
// every page (*SumCheckError), and the repair (ReconcileSums) uses the
// check word to tell which entry is damaged: the one entry whose data's
// checksum accounts for the difference is restored from its data; when
// every entry verifies against its data, the check word itself is what was
// damaged and is written again.
//
// Lists of arenas formatted before (sumFormatPages, sumFormatWhole) have
// three-word records and no check.

const (
	sumWordsPlain   = 3 // {base, page, cap}
	sumWordsChecked = 4 // {base, page, cap, check}
)

// sumTerm is the check word's term of checksum v of file block fb: 0 for
// v == 0, else a mix of both (splitmix64's finalizer of v and fb).
func sumTerm(fb, v uint64) uint64 {
	if v == 0 {
		return 0
	}
	z := v ^ (fb+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	if z == 0 {
		z = 1 // a term of 0 would hide the entry
	}
	return z
}

// sumWords is the record width of the store's checksum page lists.
func (s *Store) sumWords() int {
	if s.sumChecks {
		return sumWordsChecked
	}
	return sumWordsPlain
}

// termsOf is the sum of the terms of vals, the checksums of file blocks
// fb, fb+1, ...
func termsOf(fb uint64, vals []uint64) uint64 {
	var t uint64
	for i, v := range vals {
		t += sumTerm(fb+uint64(i), v)
	}
	return t
}

// pageTerms is the sum of the terms of the entries page p holds.
func (s *Store) pageTerms(p sumPage) uint64 {
	var t uint64
	for i := uint64(0); i < p.cap; i++ {
		t += sumTerm(p.base+i, s.a.U64(p.page+pram.Off(8*i)))
	}
	return t
}

// checkPageOf reports whether the checksum page holding file block fb of
// seg passes its check (true when the store keeps no check words, and when
// fb has no page: it reads as zeros, as a hole).
func (s *Store) checkPageOf(seg pram.Off, fb uint64) (ok bool, p sumPage, err error) {
	if !s.sumChecks {
		return true, p, nil
	}
	l := s.sums(seg)
	base := fb &^ (sumsPerPage - 1)
	c, found, err := l.seekLE(base)
	if err != nil || !found {
		return err == nil, p, err
	}
	if p, err = s.sumPageAt(l, c); err != nil || p.base != base {
		return err == nil, p, err
	}
	return s.pageTerms(p) == p.chk, p, nil
}

// SumCheckError is a checksum page whose check word disagrees with its
// entries (sumcheck.go): an entry or the check word is damaged; an entry
// zeroed by damage would read as zeros. Found by Checker.File;
// Store.ReconcileSums repairs it. It is ErrCorrupt.
type SumCheckError struct {
	Owner    uint64
	Seg      pram.Off
	Base     uint64 // the page's first file block
	Stored   uint64 // its check word
	Computed uint64 // the sum of its entries' terms
}

func (e *SumCheckError) Error() string {
	return fmt.Sprintf("%v: inode %d: the checksums of file blocks [%d, %d) fail their page's check (stored %#016x, computed %#016x): one of them, or the check, is damaged",
		ErrCorrupt, e.Owner, e.Base, e.Base+sumsPerPage, e.Stored, e.Computed)
}

// Unwrap returns ErrCorrupt.
func (e *SumCheckError) Unwrap() error { return ErrCorrupt }

// Blocks is the range of file blocks the page covers.
func (e *SumCheckError) Blocks() (lo, hi uint64) { return e.Base, e.Base + sumsPerPage }

// fixSum sets the checksum of file block fb to v for a repair of the
// entry. When the page passes its check now, the check counts the entry as
// it is and follows the change. When it fails, the check most likely still
// counts the value damage changed, and is left alone: if v is that value,
// the page passes again; if not, ReconcileSums judges the page.
func (s *Store) fixSum(tx *pram.Tx, seg pram.Off, fb, v uint64) error {
	ok, _, err := s.checkPageOf(seg, fb)
	if err != nil {
		return err
	}
	if ok {
		return s.setSums(tx, seg, fb, []uint64{v})
	}
	return s.setSumsRaw(tx, seg, fb, []uint64{v})
}

// BlockVerifies reports whether written file block fb of seg reads back
// with the checksum recorded for it (false for a block with no data).
func (s *Store) BlockVerifies(seg pram.Off, fb uint64) (bool, error) {
	if err := s.validSeg(seg); err != nil {
		return false, err
	}
	buf := AlignedBuffer(int(s.bs))
	sum, err := s.readWritten(seg, fb, buf)
	if err != nil {
		return false, err
	}
	return s.blockSum(s.a.U64(seg+slOffSeed), fb, buf) == sum, nil
}

// ReconcileSums repairs a *SumCheckError of seg's checksum page for file
// blocks from base. It reads every mapped block of the page and takes the
// checksum of its data, d, against the entry recorded, e; the blocks where
// they differ are the suspects, each with the change δ = sumTerm(d) -
// sumTerm(e) that restoring its entry would make to the page's terms, and
// r is what the terms lack (the check word less them). Damage to entries
// leaves the check word as it was, so:
//
//   - exactly one suspect with δ = r: its entry is what damage changed
//     (zeroed, say, which read as zeros): restored from the data;
//   - otherwise, all the suspects together with Σδ = r: the page's entries
//     were damaged together (a zeroed page): all restored;
//   - otherwise, exactly one pair with δ1 + δ2 = r: both restored;
//   - no suspect at all (every entry agrees with its data): the check word
//     is what was damaged: written again from the entries;
//   - else nothing is explained (the data of a preallocated block, never
//     written, differs from its entry of 0 as a lost checksum's does; or
//     entries and data are damaged together). With zeroUnknown, as with
//     --zero-bad-blocks, the suspects whose entry is 0 are made holes
//     (they read as zeros, as they did, or their data is lost and named)
//     and the check word is written again; a suspect with an entry keeps
//     it (its data fails it: a bad block, which the caller zeroes or
//     reports). Without it, nothing changes (ErrCorrupt).
//
// A page that passes its check (a fix made since) changes nothing. It
// returns what it did ("" for nothing).
func (s *Store) ReconcileSums(tx *pram.Tx, seg pram.Off, base uint64, zeroUnknown bool) (string, error) {
	if err := s.validSeg(seg); err != nil {
		return "", err
	}
	ok, p, err := s.checkPageOf(seg, base)
	if err != nil || ok {
		return "", err
	}
	if p.base != base {
		return "", fmt.Errorf("%w: inode %d has no checksum page for file block %d", ErrCorrupt, s.owner(seg), base)
	}
	r := p.chk - s.pageTerms(p)
	seed := s.a.U64(seg + slOffSeed)
	buf := AlignedBuffer(int(s.bs))
	type suspect struct{ fb, e, d, delta uint64 }
	var sus []suspect
	for i := uint64(0); i < sumsPerPage; i++ {
		fb := base + i
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return "", err
		}
		if sp.disk == 0 {
			continue // a stray entry there is StraySumError's
		}
		var e uint64
		if i < p.cap {
			e = s.a.U64(p.page + pram.Off(8*i))
		}
		if _, err := s.dev.ReadAt(buf, int64(uint64(sp.disk)*s.bs)); err != nil {
			return "", s.ioErr(fmt.Sprintf("inode %d: reading disk block %d", s.owner(seg), sp.disk), err)
		}
		if d := s.blockSum(seed, fb, buf); d != e {
			sus = append(sus, suspect{fb, e, d, sumTerm(fb, d) - sumTerm(fb, e)})
		}
	}
	restore := func(set []suspect) (string, error) {
		for _, x := range set {
			if err := s.setSumsRaw(tx, seg, x.fb, []uint64{x.d}); err != nil {
				return "", err
			}
		}
		s.bump(seg) // cached reads of the file are stale
		blocks := make([]string, len(set))
		for i, x := range set {
			blocks[i] = fmt.Sprint(x.fb)
		}
		return fmt.Sprintf("restored the checksums of file block(s) %s (block size %d) from their data: the page's check proves their records, not the data, were damaged",
			strings.Join(blocks, ", "), s.bs), nil
	}
	var one []suspect
	var all uint64
	for _, x := range sus {
		if x.delta == r {
			one = append(one, x)
		}
		all += x.delta
	}
	if len(one) == 1 {
		return restore(one)
	}
	if len(sus) > 1 && all == r {
		return restore(sus)
	}
	var pair []suspect
	pairs := 0 // more than one explains nothing
	for i := range sus {
		for j := i + 1; j < len(sus); j++ {
			if sus[i].delta+sus[j].delta == r {
				pair, pairs = []suspect{sus[i], sus[j]}, pairs+1
			}
		}
	}
	if pairs == 1 {
		return restore(pair)
	}
	if len(sus) > 0 && !zeroUnknown {
		return "", fmt.Errorf("%w: inode %d: no checksum of file blocks [%d, %d) accounts for the page's check (%d blocks differ from their records; with --zero-bad-blocks the unwritten ones among them become holes)",
			ErrCorrupt, s.owner(seg), base, base+sumsPerPage, len(sus))
	}
	var holes []string
	for _, x := range sus {
		if x.e != 0 {
			continue
		}
		if err := s.PunchHole(tx, seg, int64(x.fb*s.bs), int64(s.bs)); err != nil {
			return "", err
		}
		holes = append(holes, fmt.Sprint(x.fb))
	}
	l := s.sums(seg)
	c, found, err := l.seekLE(base)
	if err != nil {
		return "", err
	}
	if found {
		if p, err = s.sumPageAt(l, c); err != nil {
			return "", err
		}
		if p.base == base {
			p.chk = s.pageTerms(p)
			if err := l.set(tx, c, p.rec()); err != nil {
				return "", err
			}
		}
	}
	if len(holes) == 0 {
		return "every checksum of the page agrees with its data: the check word was damaged, wrote it again", nil
	}
	return fmt.Sprintf("no damaged record explains the page's check: made file block(s) %s holes (block size %d; unwritten, or their checksums lost with their data), and wrote the check word again",
		strings.Join(holes, ", "), s.bs), nil
}

// sumBaseFits reports whether checksum page record r, its base taken to be
// base, passes its check word (the terms depend on the base): a base
// damaged into another page's base is told from the right one.
func (s *Store) sumBaseFits(r rec, base uint64) bool {
	p := sumPage{base, pram.Off(r[1]), r[2], r[3]}
	return base%sumsPerPage == 0 && s.sumPageSane(p) && s.pageTerms(p) == p.chk
}

// SumBaseError is a checksum page record whose base (its key) fails the
// page's check word where the one base a byte away that fits the list's
// order passes it: the base is damaged (its entries would otherwise be
// taken for checksums of blocks the file does not map, and cleared).
// Store.SetSumBase repairs it. It is ErrCorrupt.
type SumBaseError struct {
	Owner      uint64
	Seg        pram.Off
	Base, Want uint64
}

func (e *SumBaseError) Error() string {
	return fmt.Sprintf("%v: inode %d: the checksum page record for file blocks from %d fails its check word, which the base %d passes: its base is damaged",
		ErrCorrupt, e.Owner, e.Base, e.Want)
}

// Unwrap returns ErrCorrupt.
func (e *SumBaseError) Unwrap() error { return ErrCorrupt }

// findSumBase is the one base a byte away from record r's, in [lo, hi)
// (past its previous neighbour's base, before its next one's), that passes
// its check word.
func (s *Store) findSumBase(r rec, lo, hi uint64) (uint64, bool) {
	found, n := uint64(0), 0
	for at := 0; at < 64; at += 8 {
		for v := range uint64(256) {
			b := r[0]&^(0xff<<at) | v<<at
			if b == r[0] || b < lo || b >= hi {
				continue
			}
			if s.sumBaseFits(r, b) {
				found, n = b, n+1
			}
		}
	}
	return found, n == 1
}

// SetSumBase repairs a *SumBaseError: it sets the base of seg's checksum
// page record at base to want, once want still passes the page's check and
// keeps the list's order (else ErrCorrupt, nothing changed).
func (s *Store) SetSumBase(tx *pram.Tx, seg pram.Off, base, want uint64) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	l := s.sums(seg)
	c, ok, err := l.seekLE(base)
	if err != nil || !ok || l.get(c)[0] != base {
		return fmt.Errorf("%w: inode %d has no checksum page record at file block %d (%v)", ErrCorrupt, s.owner(seg), base, err)
	}
	r := l.get(c)
	lo, hi := uint64(0), uint64(math.MaxUint64)
	if pc, ok, err := l.prev(c); err == nil && ok {
		lo = l.get(pc)[0] + 1
	}
	if nc, ok, err := l.next(c); err == nil && ok {
		hi = l.get(nc)[0]
	}
	if want < lo || want >= hi || !s.sumBaseFits(r, want) {
		return fmt.Errorf("%w: inode %d: base %d no longer fits the checksum page record at %d", ErrCorrupt, s.owner(seg), want, base)
	}
	r[0] = want
	if err := l.set(tx, c, r); err != nil {
		return err
	}
	s.bump(seg)
	return nil
}
