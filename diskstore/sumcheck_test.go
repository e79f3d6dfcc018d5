package diskstore

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"conquest/pram"
)

// An arena formatted before check words (sum format 1, page sums) keeps
// three-word lists of checksum pages and no check: writes, a rewrite, a
// hole punched, reads and fsck work as before; a checksum zeroed there
// reads as zeros (what the check words are for). A store of this format
// (2) has four-word lists whose check words every change keeps, and the
// same zeroed checksum fails the read and fsck.
func TestSumCheckFormats(t *testing.T) {
	for _, format := range []uint64{sumFormatPages, sumFormatChecked} {
		e := newEnv(t, envOpts{blockSize: 4096})
		if format != sumFormatChecked {
			e.a.PutU64(e.s.st+stOffSumFormat, format)
			e.restart()
		}
		if e.s.sumChecks != (format == sumFormatChecked) {
			t.Fatalf("format %d: sumChecks %v", format, e.s.sumChecks)
		}
		seg := e.newFile(7)
		model := pattern(3, 0, 600<<10)
		if err := e.write(seg, 0, model); err != nil {
			t.Fatal(err)
		}
		more := pattern(4, 100<<10, 50<<10)
		if err := e.write(seg, 100<<10, more); err != nil {
			t.Fatal(err)
		}
		copy(model[100<<10:], more)
		e.must(func(tx *pram.Tx) error { return e.s.PunchHole(tx, seg, 200<<10, 64<<10) })
		clear(model[200<<10 : 264<<10])
		if got, err := e.read(seg, 0, len(model)); err != nil || !bytes.Equal(got, model) {
			t.Fatalf("format %d: read back: %v", format, err)
		}
		e.check(map[pram.Off]int64{seg: int64(len(model))})
		if w := e.a.U32(seg + slOffSums + xhWords); w != uint32(e.s.sumWords()) {
			t.Fatalf("format %d: list of checksum pages %d words wide", format, w)
		}
		// Damage zeroes the checksum of file block 3.
		l := e.s.sums(seg)
		c, _, err := l.seekLE(0)
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.s.sumPageAt(l, c)
		if err != nil {
			t.Fatal(err)
		}
		e.a.PutU64(p.page+3*8, 0)
		got, err := e.read(seg, 3<<12, 4096)
		if format != sumFormatChecked {
			if err != nil || !bytes.Equal(got, make([]byte, 4096)) {
				t.Fatalf("format %d: read of the zeroed checksum's block: %v", format, err)
			}
			continue
		}
		if !errors.Is(err, ErrDataChecksum) || !errors.Is(err, ErrIO) {
			t.Fatalf("read of the zeroed checksum's block: %v, want EIO", err)
		}
		errs := e.checkErrs(map[pram.Off]int64{seg: int64(len(model))}, true)
		var sc *SumCheckError
		if len(errs) != 1 || !errors.As(errs[0], &sc) || sc.Base != 0 {
			t.Fatalf("fsck: %v; want one SumCheckError", errs)
		}
		var what string
		e.must(func(tx *pram.Tx) error {
			var err error
			what, err = e.s.ReconcileSums(tx, seg, 0, false)
			return err
		})
		if !bytes.Contains([]byte(what), []byte("restored the checksums of file block(s) 3 ")) {
			t.Fatalf("ReconcileSums: %q", what)
		}
		if got, err := e.read(seg, 0, len(model)); err != nil || !bytes.Equal(got, model) {
			t.Fatalf("read back after the repair: %v", err)
		}
		e.check(map[pram.Off]int64{seg: int64(len(model))})
	}
}

// TestMendSumPageBase: a checksum page record whose base (its key) is
// damaged in a byte is a *BadSumPageError when the base is no longer a
// page's; MendSumPage finds the one base a byte away, between its
// neighbours', under which the file's data verifies the page's checksums
// (it used to try only the page pointer and the capacity, and a second
// corruption review saw the checksums of intact blocks dropped).
func TestMendSumPageBase(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096})
	seg := e.newFile(9)
	size := int64(3 * sumsPerPage * 4096) // three checksum pages
	data := pattern(1, 0, int(size))
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, data) })
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, seg, size) })
	l := e.s.sums(seg)
	e.must(func(tx *pram.Tx) error {
		c, ok, err := l.seekLE(sumsPerPage)
		if err != nil || !ok {
			return fmt.Errorf("no second page: %v", err)
		}
		r := l.get(c)
		r[0] ^= 0x40 // 512 → 576: not a page's base
		return l.set(tx, c, r)
	})
	errs := e.checkErrs(map[pram.Off]int64{seg: int64(size)}, false)
	var bp *BadSumPageError
	for _, err := range errs {
		if b, ok := errors.AsType[*BadSumPageError](err); ok {
			bp = b
		}
	}
	if bp == nil || bp.Base != sumsPerPage^0x40 {
		t.Fatalf("fsck: %v; want a BadSumPageError for the second page", errs)
	}
	var what string
	e.must(func(tx *pram.Tx) error {
		var err error
		what, err = e.s.MendSumPage(tx, seg, bp.Base)
		return err
	})
	if !strings.Contains(what, "base 576→512") {
		t.Fatalf("MendSumPage: %q", what)
	}
	e.check(map[pram.Off]int64{seg: int64(size)})
	if got, err := e.read(seg, 0, int(size)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
}
