package diskstore

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"conquest/internal/racetest"
	"conquest/pram"
)

// modelFile is the expected contents of one file.
type modelFile struct {
	seg  pram.Off
	data []byte
}

// TestModelRandomOps runs random writes, flushes, truncates, trims, reads,
// destroys and restarts against an in-memory model and runs the full
// consistency walk along the way: 4 KiB blocks in both durability modes,
// 16 KiB (the default) and 64 KiB blocks in the default one.
func TestModelRandomOps(t *testing.T) {
	for _, c := range []struct {
		bsz uint32
		d   Durability
	}{{4096, DurableOnProcessCrash}, {16 << 10, DurableOnProcessCrash}, {64 << 10, DurableOnProcessCrash}, {4096, GatherInMemory}} {
		steps := 600
		if racetest.Reduced(t) {
			if c.d == GatherInMemory {
				t.Logf("block size %d, %v: runs without -race only (see skipGatherUnderRace)", c.bsz, c.d)
				continue
			}
			steps = 300
		}
		bsz := c.bsz
		seed := uint64(bsz) * 7919 * modelSeed()
		t.Logf("block size %d, %v, seed %d", bsz, c.d, seed)
		r := rand.New(rand.NewPCG(seed, 1))
		e := newEnv(t, envOpts{blockSize: bsz, o: Options{Durability: c.d, FileBuffer: 256 << 10, TotalBuffer: 1 << 20, MaxExtent: 1 << 20}})
		var files []*modelFile
		sizes := func() map[pram.Off]int64 {
			m := map[pram.Off]int64{}
			for _, f := range files {
				m[f.seg] = int64(len(f.data))
			}
			return m
		}
		const maxSize = 6 << 20
		for step := 0; step < steps; step++ {
			if os.Getenv("DISKSTORE_CHECK_EVERY_STEP") != "" {
				if errs := e.checkErrs(sizes(), false); len(errs) > 0 {
					t.Fatalf("before step %d: %v", step, errs)
				}
			}
			op := r.IntN(100)
			switch {
			case len(files) < 2 || op < 3:
				if len(files) < 5 {
					files = append(files, &modelFile{seg: e.newFile(uint64(step))})
				}
			case op < 55: // write: mostly appends, sometimes random
				f := files[r.IntN(len(files))]
				off := int64(len(f.data))
				if r.IntN(3) == 0 {
					off = r.Int64N(maxSize)
				}
				n := 1 + r.IntN(300<<10)
				if off+int64(n) > maxSize {
					continue
				}
				data := pattern(uint32(step), off, n)
				if r.IntN(8) == 0 {
					data = make([]byte, n) // zeros: holes stay holes
				}
				if err := e.write(f.seg, off, data); err != nil {
					t.Fatalf("step %d: write [%d, +%d): %v", step, off, n, err)
				}
				if end := off + int64(n); end > int64(len(f.data)) {
					f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
				}
				copy(f.data[off:], data)
			case op < 65:
				f := files[r.IntN(len(files))]
				if err := e.flush(f.seg); err != nil {
					t.Fatalf("step %d: flush: %v", step, err)
				}
			case op < 72:
				f := files[r.IntN(len(files))]
				size := r.Int64N(int64(len(f.data)) + 1)
				if r.IntN(3) == 0 {
					size = r.Int64N(maxSize)
				}
				if err := e.do(func(tx *pram.Tx) error { return e.s.Truncate(tx, f.seg, size) }); err != nil {
					t.Fatalf("step %d: truncate %d: %v", step, size, err)
				}
				if size <= int64(len(f.data)) {
					f.data = f.data[:size]
				} else {
					f.data = append(f.data, make([]byte, size-int64(len(f.data)))...)
				}
			case op < 75:
				f := files[r.IntN(len(files))]
				if err := e.do(func(tx *pram.Tx) error { return e.s.Trim(tx, f.seg, int64(len(f.data))) }); err != nil {
					t.Fatalf("step %d: trim: %v", step, err)
				}
			case op < 78:
				f := files[r.IntN(len(files))]
				if len(f.data) == 0 {
					continue
				}
				off := r.Int64N(int64(len(f.data)))
				n := 1 + r.Int64N(int64(len(f.data))-off)
				if err := e.do(func(tx *pram.Tx) error { return e.s.PunchHole(tx, f.seg, off, n) }); err != nil {
					t.Fatalf("step %d: punch [%d, +%d): %v", step, off, n, err)
				}
				clear(f.data[off : off+n])
			case op < 90:
				f := files[r.IntN(len(files))]
				if len(f.data) == 0 {
					continue
				}
				off := r.Int64N(int64(len(f.data)))
				n := 1 + r.IntN(min(len(f.data)-int(off), 1<<20))
				got, err := e.read(f.seg, off, n)
				if err != nil {
					t.Fatalf("step %d: read: %v", step, err)
				}
				if !bytes.Equal(got, f.data[off:off+int64(n)]) {
					t.Fatalf("step %d: read [%d, +%d) differs from model", step, off, n)
				}
			case op < 93:
				i := r.IntN(len(files))
				f := files[i]
				if err := e.do(func(tx *pram.Tx) error { return e.s.Destroy(tx, f.seg) }); err != nil {
					t.Fatalf("step %d: destroy: %v", step, err)
				}
				files = append(files[:i], files[i+1:]...)
			case op < 96:
				e.must(func(tx *pram.Tx) error { return e.s.FlushAll(tx) })
				e.check(sizes())
				e.restart()
				for _, f := range files {
					got, err := e.read(f.seg, 0, len(f.data))
					if err != nil || !bytes.Equal(got, f.data) {
						t.Fatalf("step %d: after restart: err %v, equal %v", step, err, bytes.Equal(got, f.data))
					}
				}
			default:
				e.must(func(tx *pram.Tx) error { return e.s.FlushAll(tx) })
				e.check(sizes())
			}
		}
		e.must(func(tx *pram.Tx) error { return e.s.FlushAll(tx) })
		e.check(sizes())
		st := e.s.Stats()
		t.Logf("bs %d: %d files, used %d free %d blocks, %d free extents", bsz, st.Files, st.UsedBlocks, st.FreeBlocks, st.FreeExtents)
	}
}

// modelSeed multiplies the model test's seeds: DISKSTORE_SEED=n reruns it
// with other random operations.
func modelSeed() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("DISKSTORE_SEED"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 1
}
