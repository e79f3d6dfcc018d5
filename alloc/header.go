package alloc

import (
	"encoding/binary"
	"fmt"

	"github.com/dgryski/go-farm"

	"conquest/pram"
)

// The static part of the heap header (what Format writes once: magic,
// version, shape, layout and their checksum) and the heap's root slot
// follow from the arena's geometry, which the arena's own checksummed
// superblock holds. When damage hits them, RewriteStatic writes them again.

// StaticHeaderError is the ErrCorrupt Open and OpenForRepair report when
// the heap's root slot or the static part of its header is not what the
// arena's geometry gives: RewriteStatic repairs it. Callers get it with
// errors.As.
type StaticHeaderError struct {
	What string
}

func (e *StaticHeaderError) Error() string { return fmt.Sprintf("%v: %s", ErrCorrupt, e.What) }

// Unwrap returns ErrCorrupt.
func (e *StaticHeaderError) Unwrap() error { return ErrCorrupt }

func staticErr(format string, args ...any) error {
	return &StaticHeaderError{What: fmt.Sprintf(format, args...)}
}

// staticHeader is the static part of the header Format writes for g,
// checksum included.
func staticHeader(g geometry) []byte {
	b := make([]byte, hdrChecksum+8)
	le := binary.LittleEndian
	copy(b[hdrMagic:], HeapMagic)
	le.PutUint32(b[hdrVersion:], HeapVersion)
	le.PutUint32(b[hdrEntrySize:], EntrySize)
	le.PutUint64(b[hdrMapOff:], uint64(g.mapOff))
	le.PutUint64(b[hdrDataOff:], uint64(g.dataOff))
	le.PutUint64(b[hdrNPages:], g.npages)
	le.PutUint32(b[hdrClasses:], uint32(NumClasses))
	le.PutUint32(b[hdrMaxOrder:], MaxOrder)
	le.PutUint64(b[hdrChecksum:], farm.Hash64(b[:hdrChecksum]))
	return b
}

// RewriteStatic writes the heap's root slot and the static part of its
// header as Format wrote them for this arena's geometry, and returns how
// many bytes differed. It refuses (ErrCorrupt, nothing written) an arena
// with no heap (root slot 0 empty: mkfs never finished) and a header whose
// checksum matches its contents but not this build's: that is a heap of
// another version or build, not damage. The writes bypass the journal, as
// RebuildLists' do; running it again completes an interrupted one. Only
// for repair of an image no one else has open.
func RewriteStatic(a *pram.Arena) (int, error) {
	g, ok := layoutFor(a.Geometry())
	if !ok {
		return 0, fmt.Errorf("%w: arena of %d bytes leaves no room for a heap", ErrCorrupt, a.Size())
	}
	r := a.Root(0)
	if r == 0 && unformatted(a.Root, string(a.Bytes(g.hdr, uint64(len(HeapMagic))))) {
		return 0, errUnformatted
	}
	cur := a.Bytes(g.hdr, hdrChecksum+8)
	want := staticHeader(g)
	le := binary.LittleEndian
	if le.Uint64(cur[hdrChecksum:]) == farm.Hash64(cur[:hdrChecksum]) && string(cur) != string(want) {
		return 0, fmt.Errorf("%w: heap header is intact but not this build's (version %d): not rewriting it", ErrCorrupt, le.Uint32(cur[hdrVersion:]))
	}
	n := 0
	if r != uint64(g.hdr) {
		a.PutU64(pram.RootOff(0), uint64(g.hdr))
		n += 8
	}
	for i := range want {
		if cur[i] != want[i] {
			n++
		}
	}
	if n > 0 {
		copy(cur, want)
		if err := a.Persist(g.hdr, uint64(len(want))); err != nil {
			return n, err
		}
		if err := a.Persist(pram.RootOff(0), 8); err != nil {
			return n, err
		}
	}
	return n, nil
}
