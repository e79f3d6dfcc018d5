package alloc

import (
	"bytes"
	"errors"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"conquest/internal/racetest"
	"conquest/pram"
)

var (
	simSeed  = flag.Uint64("alloc.seed", 0, "seed of TestSimulation (0: fixed seeds plus one from the clock)")
	simSteps = flag.Int("alloc.steps", 600, "steps per TestSimulation run")
)

// TestSimulation runs random allocate/free/abort/crash/reopen sequences
// against the plain Go model and compares after every step. Each run prints
// its seed; rerun one with -alloc.seed=N.
func TestSimulation(t *testing.T) {
	seeds := []uint64{1, 2, 3, uint64(time.Now().UnixNano())}
	if racetest.Reduced(t) {
		// One seed, from the clock: the runs are single-threaded, and
		// under the race detector each takes about 13 s (5 s without
		// it); `make test` runs them all in its second step, without it.
		seeds = seeds[3:]
	}
	if *simSeed != 0 {
		seeds = []uint64{*simSeed}
	}
	steps := *simSteps
	if testing.Short() {
		steps /= 4
	}
	for _, seed := range seeds {
		t.Run("", func(t *testing.T) {
			t.Logf("seed %d (rerun: go test ./alloc -run TestSimulation -alloc.seed=%d)", seed, seed)
			s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seed: seed}
			s.run(steps)
		})
	}
}

type sim struct {
	t    *testing.T
	rng  *rand.Rand
	seed uint64
	a    *pram.Arena
	h    *Heap
	path string
	m    *model
	fill byte
	grow int // percent of operations that allocate, changed in phases

	allocs, frees, aborts, crashes, reopens, nospace, txfull int
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d: "+format, append([]any{s.seed}, args...)...)
}

// size draws a request: mostly small, some pages, a few up to MaxAlloc.
func (s *sim) size() uint64 {
	switch r := s.rng.IntN(100); {
	case r < 40:
		return 1 + s.rng.Uint64N(300)
	case r < 60:
		return 1 + s.rng.Uint64N(MaxSmall)
	case r < 90:
		return MaxSmall + 1 + s.rng.Uint64N(64<<10)
	default:
		return 1 + s.rng.Uint64N(MaxAlloc)
	}
}

func (s *sim) pick() (pram.Off, bool) {
	if len(s.m.live) == 0 {
		return 0, false
	}
	k := s.rng.IntN(len(s.m.live))
	for off := range s.m.live {
		if k == 0 {
			return off, true
		}
		k--
	}
	return 0, false
}

// txOps applies n random operations in tx. The changes go to a copy of the
// model that the caller keeps on commit and drops on abort or crash.
func (s *sim) txOps(tx *pram.Tx, n int) *model {
	next := newModel()
	for off, o := range s.m.live {
		next.live[off] = o
	}
	for range n {
		if s.rng.IntN(100) < s.grow || len(next.live) == 0 {
			sz := s.size()
			off, err := s.h.Alloc(tx, sz)
			if errors.Is(err, ErrNoSpace) {
				s.nospace++
				continue
			}
			if err != nil {
				s.fatalf("Alloc(%d): %v", sz, err)
			}
			s.fill++
			o := obj{n: sz, size: ClassSize(sz), fill: s.fill}
			fillObj(s.a, off, o) // unlogged, like file data
			next.live[off] = o
			s.allocs++
		} else {
			k := s.rng.IntN(len(next.live))
			for off := range next.live {
				if k--; k < 0 {
					if err := s.h.Free(tx, off); err != nil {
						s.fatalf("Free(%#x): %v", off, err)
					}
					delete(next.live, off)
					s.frees++
					break
				}
			}
		}
	}
	return next
}

// tryOps is txOps that reports a pram.ErrTxFull panic instead of passing
// it on: a Tx that reuses much memory it freed can outgrow the journal.
func (s *sim) tryOps(tx *pram.Tx, n int) (next *model, full bool) {
	defer func() {
		if r := recover(); r != nil {
			if err, ok := r.(error); ok && errors.Is(err, pram.ErrTxFull) {
				full = true
				return
			}
			panic(r)
		}
	}()
	return s.txOps(tx, n), false
}

// badFree tries an offset that is not a live allocation: it must fail and
// change nothing.
func (s *sim) badFree() {
	start, end := s.h.DataRange()
	var off pram.Off
	switch s.rng.IntN(3) {
	case 0:
		off = start + pram.Off(s.rng.Uint64N(uint64(end-start))&^15)
	case 1:
		if o, ok := s.pick(); ok {
			off = o + pram.Off(16*(1+s.rng.Uint64N(8)))
		}
	default:
		off = pram.Off(s.rng.Uint64N(s.a.Size() * 2))
	}
	if _, live := s.m.live[off]; live {
		return
	}
	before := metaSnapshot(s.h)
	tx := s.a.Begin()
	err := s.h.Free(tx, off)
	tx.Commit()
	if err == nil || !(errors.Is(err, ErrNotAllocated) || errors.Is(err, ErrDoubleFree) || errors.Is(err, ErrOutOfRange)) {
		s.fatalf("Free(%#x) of a non-allocation = %v", off, err)
	}
	if !bytes.Equal(before, metaSnapshot(s.h)) {
		s.fatalf("rejected Free(%#x) changed the heap", off)
	}
}

func (s *sim) reopen(crash bool) {
	s.a, s.h = reopen(s.t, s.a, s.path, crash)
}

func (s *sim) run(steps int) {
	size := uint64(4+s.rng.IntN(5)) << 20
	s.a, s.h, s.path = newArena(s.t, size)
	s.m = newModel()
	for step := range steps {
		if step%100 == 0 { // alternate filling and draining phases
			s.grow = []int{75, 50, 30}[s.rng.IntN(3)]
		}
		switch r := s.rng.IntN(100); {
		case r < 78:
			before := metaSnapshot(s.h)
			tx := s.a.Begin()
			next, full := s.tryOps(tx, 1+s.rng.IntN(6))
			switch {
			case full: // as the core does: recover ErrTxFull, abort
				tx.Abort()
				s.txfull++
				if !bytes.Equal(before, metaSnapshot(s.h)) {
					s.fatalf("step %d: Abort after ErrTxFull did not restore the heap", step)
				}
			case r < 55: // commit
				tx.Commit()
				s.m = next
			case r < 70: // abort: the heap must be exactly as before
				tx.Abort()
				s.aborts++
				if !bytes.Equal(before, metaSnapshot(s.h)) {
					s.fatalf("step %d: Abort did not restore the heap", step)
				}
			default: // crash mid-transaction, reopen: recovery rolls back
				used := tx.Used()
				s.reopen(true)
				s.crashes++
				if used > 0 && s.a.Recovered() == 0 {
					s.fatalf("step %d: crash with %d journal bytes, nothing recovered", step, used)
				}
				if !bytes.Equal(before, metaSnapshot(s.h)) {
					s.fatalf("step %d: recovery did not restore the heap", step)
				}
			}
		case r < 84:
			s.reopen(false)
			s.reopens++
			if s.a.Recovered() != 0 {
				s.fatalf("clean reopen recovered %d records", s.a.Recovered())
			}
		default:
			s.badFree()
		}
		if step%5 == 0 || step == steps-1 {
			if err := s.m.verify(s.h); err != nil {
				s.fatalf("step %d: %v", step, err)
			}
		}
	}
	st := s.h.Stats()
	s.t.Logf("%d steps: %d allocs, %d frees, %d aborts, %d crashes, %d reopens, %d ErrNoSpace, %d ErrTxFull; live %d objects, %d/%d pages free",
		steps, s.allocs, s.frees, s.aborts, s.crashes, s.reopens, s.nospace, s.txfull, st.Objects, st.FreePages, st.Pages)
}
