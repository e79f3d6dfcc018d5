package diskstore

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"conquest/alloc"
	"conquest/pram"
)

// updatedSum, from a block's checksum and the old and new contents of a
// page range, gives exactly blockSum of the new block, for random blocks
// (holes of zero pages included) and random page ranges; it declines only
// the ambiguous cases.
func TestPageSumUpdate(t *testing.T) {
	e := newEnv(t, envOpts{})
	s := e.s
	if !s.pageSums {
		t.Fatal("a new store does not use page sums")
	}
	bs := s.bs
	r := rand.New(rand.NewPCG(7, 8))
	block := func() []byte {
		b := make([]byte, bs)
		for pg := uint64(0); pg < bs/hashPage; pg++ {
			if r.IntN(3) > 0 {
				for i := pg * hashPage; i < (pg+1)*hashPage; i += 8 {
					b[i] = byte(r.Uint32())
				}
			}
		}
		return b
	}
	declined := 0
	for i := 0; i < 2000; i++ {
		seed, fb := r.Uint64(), uint64(r.IntN(1000))
		old := block()
		sum := s.blockSum(seed, fb, old)
		p0 := uint64(r.IntN(int(bs / hashPage)))
		p1 := p0 + 1 + uint64(r.IntN(int(bs/hashPage-p0)))
		nw := append([]byte(nil), old...)
		for j := p0 * hashPage; j < p1*hashPage; j++ {
			if r.IntN(4) == 0 {
				nw[j] = byte(r.Uint32())
			}
		}
		if r.IntN(5) == 0 {
			clear(nw[p0*hashPage : p1*hashPage]) // pages become zeros
		}
		want := s.blockSum(seed, fb, nw)
		got, ok := s.updatedSum(seed, fb, sum, p0*hashPage, old[p0*hashPage:p1*hashPage], nw[p0*hashPage:p1*hashPage])
		if !ok {
			if sum > 1 && want > 1 {
				t.Fatalf("declined an unambiguous update: %d -> %d", sum, want)
			}
			declined++
			continue
		}
		if got != want {
			t.Fatalf("case %d: pages [%d, %d): updated sum %x, block sum %x", i, p0, p1, got, want)
		}
	}
	if declined > 100 {
		t.Errorf("declined %d of 2000 updates", declined)
	}
	// The sum depends on every page, on the page's place and on the seed.
	b := block()
	b[5] = 1
	sum := s.blockSum(1, 3, b)
	if sum == 0 || s.blockSum(2, 3, b) == sum || s.blockSum(1, 4, b) == sum {
		t.Fatal("the sum ignores the seed or the block number")
	}
	sw := append([]byte(nil), b...)
	copy(sw[:hashPage], b[hashPage:2*hashPage])
	copy(sw[hashPage:2*hashPage], b[:hashPage])
	if !bytes.Equal(sw, b) && s.blockSum(1, 3, sw) == sum {
		t.Fatal("swapping two pages keeps the sum")
	}
	if s.blockSum(1, 3, make([]byte, bs)) != 0 {
		t.Fatal("a zero block's sum is not 0")
	}
	if _, ok := s.updatedSum(1, 3, 1, 0, b[:hashPage], sw[:hashPage]); ok {
		t.Fatal("updated the ambiguous sum 1")
	}
}

// An arena whose store was formatted before page sums (sum format 0) keeps
// whole-block hashes: writes, small appends (the general way: no fast
// path), reads, a power failure and its recovery, and fsck all work with
// them, and a format this build does not know is refused at Open.
func TestWholeBlockSumFormat(t *testing.T) {
	e := newEnv(t, envOpts{dev: NewCrashDevice(16 << 20)})
	e.a.PutU64(e.s.st+stOffSumFormat, sumFormatWhole)
	e.restart()
	if e.s.pageSums {
		t.Fatal("sum format 0 opened with page sums")
	}
	a := e.newFile(1)
	model := pattern(1, 0, 200<<10)
	if err := e.write(a, 0, model); err != nil {
		t.Fatal(err)
	}
	for off := int64(len(model)); off < 300<<10; off += 8 << 10 {
		d := pattern(2, off, 8<<10)
		if err := e.write(a, off, d); err != nil {
			t.Fatal(err)
		}
		model = append(model, d...)
	}
	if st := e.s.Stats(); st.FastAppends != 0 {
		t.Fatalf("%d fast appends with whole-block sums", st.FastAppends)
	}
	e.must(func(tx *pram.Tx) error { return e.s.Fsync(tx, a) })
	synced := append([]byte(nil), model...)
	if err := e.write(a, 1000, pattern(3, 1000, 5000)); err != nil {
		t.Fatal(err)
	}
	copy(model[1000:], pattern(3, 1000, 5000))
	if got, err := e.read(a, 0, len(model)); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("read back: %v", err)
	}
	e.check(map[pram.Off]int64{a: int64(len(model))})
	e.crash(e.dev.(*CrashDevice).Crash(CrashLoseAll, 1))
	if got, err := e.read(a, 0, len(synced)); err != nil || !bytes.Equal(got, synced) {
		t.Fatalf("after power loss: %v %+v", err, e.s.Recovery())
	}
	e.check(map[pram.Off]int64{a: int64(len(synced))})

	e.a.PutU64(e.s.st+stOffSumFormat, 3)
	if err := e.s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.a.Close(); err != nil {
		t.Fatal(err)
	}
	a2, err := pram.Open(e.path)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	h, err := alloc.Open(a2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(h, reopenDev(t, e.dev), Options{}); !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "checksum format 3") {
		t.Fatalf("Open of an unknown checksum format: %v", err)
	}
}
