package diskstore

import (
	"bytes"
	"math/rand"
	"testing"

	"conquest/pram"
)

// seekSegments lists the data segments NextData and NextHole report in
// [0, size), clipped to size, as the core does.
func seekSegments(t *testing.T, s *Store, seg pram.Off, size int64) [][2]int64 {
	t.Helper()
	var segs [][2]int64
	for off := int64(0); off < size; {
		d, err := s.NextData(seg, off)
		if err != nil {
			t.Fatal(err)
		}
		if d < off {
			t.Fatalf("NextData(%d) = %d, before the offset", off, d)
		}
		if d >= size {
			break
		}
		h, err := s.NextHole(seg, d)
		if err != nil {
			t.Fatal(err)
		}
		if h <= d {
			t.Fatalf("NextHole(%d) = %d at data", d, h)
		}
		h = min(h, size)
		segs = append(segs, [2]int64{d, h})
		off = h
	}
	return segs
}

// TestSeekExact: data and holes of a sparse file, at block granularity, in
// both durability modes (buffered runs count as data before they reach
// the disk), and after a punch.
func TestSeekExact(t *testing.T) {
	for _, mode := range []Durability{DurableOnProcessCrash, GatherInMemory} {
		e := newEnv(t, envOpts{blockSize: 4096, o: Options{Durability: mode}})
		seg := e.newFile(1)
		bs := int64(4096)
		for _, w := range []struct{ off, n int64 }{{10, 100}, {40 * bs, 2 * bs}, {100*bs + 7, 1}} {
			if err := e.write(seg, w.off, bytes.Repeat([]byte{1}, int(w.n))); err != nil {
				t.Fatal(err)
			}
		}
		size := 200 * bs
		want := [][2]int64{{0, bs}, {40 * bs, 42 * bs}, {100 * bs, 101 * bs}}
		if mode == GatherInMemory {
			// Buffered: the runs themselves, to the byte.
			want = [][2]int64{{10, 110}, {40 * bs, 42 * bs}, {100*bs + 7, 100*bs + 8}}
		}
		if got := seekSegments(t, e.s, seg, size); !equalSegs(got, want) {
			t.Fatalf("mode %d: segments %v, want %v", mode, got, want)
		}
		if mode == GatherInMemory {
			if err := e.flush(seg); err != nil {
				t.Fatal(err)
			}
			want = [][2]int64{{0, bs}, {40 * bs, 42 * bs}, {100 * bs, 101 * bs}}
			if got := seekSegments(t, e.s, seg, size); !equalSegs(got, want) {
				t.Fatalf("flushed: segments %v, want %v", got, want)
			}
		}
		e.must(func(tx *pram.Tx) error { return e.s.PunchHole(tx, seg, 40*bs, bs) })
		want = [][2]int64{{0, bs}, {41 * bs, 42 * bs}, {100 * bs, 101 * bs}}
		if got := seekSegments(t, e.s, seg, size); !equalSegs(got, want) {
			t.Fatalf("punched: segments %v, want %v", got, want)
		}
		// From inside data, NextData is the offset itself; from inside a
		// hole, NextHole is.
		if d, _ := e.s.NextData(seg, 41*bs+5); d != 41*bs+5 {
			t.Fatalf("NextData inside data = %d", d)
		}
		if h, _ := e.s.NextHole(seg, 50*bs+5); h != 50*bs+5 {
			t.Fatalf("NextHole inside a hole = %d", h)
		}
		// Past the last data: none (MaxFileSize).
		if d, _ := e.s.NextData(seg, 101*bs); d != MaxFileSize {
			t.Fatalf("NextData past the data = %d", d)
		}
		e.check(map[pram.Off]int64{seg: size})
	}
}

func equalSegs(a, b [][2]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSeekNeverHidesData: after random writes and punches, every nonzero
// byte of the model lies in a data segment (a hole reported over data would
// make `cp --sparse` drop it), and each segment starts and ends on block or
// run boundaries inside [0, size).
func TestSeekNeverHidesData(t *testing.T) {
	for _, mode := range []Durability{DurableOnProcessCrash, GatherInMemory} {
		e := newEnv(t, envOpts{blockSize: 4096, o: Options{Durability: mode}})
		seg := e.newFile(1)
		const size = 4 << 20
		model := make([]byte, size)
		rng := rand.New(rand.NewSource(int64(mode) + 7))
		for round := 0; round < 200; round++ {
			off := rng.Int63n(size)
			n := min(rng.Int63n(64<<10)+1, size-off)
			if rng.Intn(4) == 0 {
				e.must(func(tx *pram.Tx) error { return e.s.PunchHole(tx, seg, off, n) })
				clear(model[off : off+n])
			} else {
				data := make([]byte, n)
				for i := range data {
					data[i] = byte(rng.Intn(255) + 1)
				}
				if err := e.write(seg, off, data); err != nil {
					t.Fatal(err)
				}
				copy(model[off:], data)
			}
			if round%20 != 19 {
				continue
			}
			segs := seekSegments(t, e.s, seg, size)
			covered := make([]bool, size)
			for _, sg := range segs {
				for i := sg[0]; i < sg[1]; i++ {
					covered[i] = true
				}
			}
			for i, b := range model {
				if b != 0 && !covered[i] {
					t.Fatalf("mode %d round %d: byte %d is %d but lies in a reported hole (segments %v)", mode, round, i, b, segs)
				}
			}
			got, err := e.read(seg, 0, size)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, model) {
				t.Fatalf("mode %d round %d: contents differ from the model", mode, round)
			}
		}
		if err := e.flush(seg); err != nil {
			t.Fatal(err)
		}
		e.check(map[pram.Off]int64{seg: size})
	}
}

// MappedRuns: the written blocks, the ones fallocate reserved and the
// buffered runs, merged and clipped to the size; holes left out.
func TestMappedRuns(t *testing.T) {
	for _, mode := range []Durability{DurableOnProcessCrash, GatherInMemory} {
		e := newEnv(t, envOpts{blockSize: 4096, o: Options{Durability: mode}})
		seg := e.newFile(1)
		bs := int64(4096)
		if err := e.write(seg, 10, []byte{1}); err != nil {
			t.Fatal(err)
		}
		e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, seg, 11) })
		e.must(func(tx *pram.Tx) error { return e.s.Allocate(tx, seg, 10*bs, 3*bs) })
		if err := e.write(seg, 13*bs, []byte{2}); err != nil { // touches the reservation
			t.Fatal(err)
		}
		if err := e.write(seg, 50*bs+5, []byte{3}); err != nil {
			t.Fatal(err)
		}
		got, err := e.s.MappedRuns(seg, 50*bs+6)
		if err != nil {
			t.Fatal(err)
		}
		// (Buffered bytes, GatherInMemory, count to the byte.)
		if len(got) != 3 || got[0][0] > 10 || got[0][1] < 11 || got[0][1] > bs || got[1][0] != 10*bs || got[1][1] < 13*bs+1 || got[2][0] > 50*bs+5 || got[2][1] != 50*bs+6 {
			t.Fatalf("mode %d: mapped runs %v", mode, got)
		}
		if err := e.flush(seg); err != nil {
			t.Fatal(err)
		}
	}
}
