package pram

import (
	"bytes"
	"fmt"
	"os"
	"time"
)

// Verification mode: the test suite's check that every store to a shadowed
// arena is marked for a checkpoint. A store that is not (written through a
// View, or through a slice kept across transactions) would be missing from
// the image after a power loss, and nothing else would notice until then.
//
// With it on, a checkpoint compares every page it does not write with the
// image (at most every 100 ms per arena, it reads the whole arena), and
// Close compares the whole image with the RAM copy after its last
// checkpoint; a difference makes Close fail, naming the first pages.
// $CONQUEST_VERIFY_CHECKPOINTS turns it on (the Makefile's test target and
// the test mains set it).
var verifyCheckpoints = os.Getenv("CONQUEST_VERIFY_CHECKPOINTS") != ""

// VerifyCheckpoints turns verification mode on or off (tests).
func VerifyCheckpoints(on bool) { verifyCheckpoints = on }

// verifyLocked compares the pages not in dirty (sorted) with the image,
// which holds the previous checkpoint, and records the first mismatch.
// Preconditions: txMu and loose held (nothing changes the arena).
func (a *Arena) verifyLocked(dirty []uint64, always bool) {
	sh := a.sh
	if sh.verifyErr != nil || (!always && time.Since(sh.verifiedAt) < 100*time.Millisecond) {
		return
	}
	sh.verifiedAt = time.Now()
	if err := a.compareImage(dirty); err != nil {
		sh.verifyErr = err
		sh.logf("pram: %s: %v", a.path, err)
	}
}

// compareImage compares the RAM copy with the image, but for the pages in
// skip (sorted).
func (a *Arena) compareImage(skip []uint64) error {
	const chunk = 1 << 20
	buf := make([]byte, chunk)
	zero := make([]byte, PageSize)
	// Holes of the RAM copy read as zeros: compare them without touching
	// them (a read fault on tmpfs would allocate the page).
	data := dataRanges(int(a.sh.f.Fd()), int64(a.geo.Size))
	var bad []uint64
	for off := uint64(0); off < a.geo.Size; off += chunk {
		n := min(chunk, a.geo.Size-off)
		if _, err := a.sh.img.ReadAt(buf[:n], int64(off)); err != nil {
			return fmt.Errorf("verifying checkpoints: reading the image: %w", err)
		}
		for p := off; p < off+n; p += PageSize {
			pg := p / PageSize
			for len(skip) > 0 && skip[0] < pg {
				skip = skip[1:]
			}
			if len(skip) > 0 && skip[0] == pg {
				continue
			}
			for len(data) > 0 && uint64(data[0][1]) <= p {
				data = data[1:]
			}
			ram := zero
			if len(data) > 0 && uint64(data[0][0]) <= p {
				ram = a.m[p : p+PageSize]
			}
			if !bytes.Equal(buf[p-off:p-off+PageSize], ram) {
				bad = append(bad, p)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("verifying checkpoints: %d pages of the RAM copy differ from the image without being marked, at offsets %v", len(bad), bad[:min(len(bad), 8)])
}

// verifyImage is Close's check, after the last checkpoint.
func (a *Arena) verifyImage() error {
	sh := a.sh
	if sh.verifyErr != nil {
		return sh.verifyErr
	}
	a.txMu.Lock()
	defer a.txMu.Unlock()
	return a.compareImage(nil)
}
