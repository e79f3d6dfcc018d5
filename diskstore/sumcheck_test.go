package diskstore

import (
	"bytes"
	"errors"
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
