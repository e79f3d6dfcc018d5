package main

import (
	"os"
	"runtime"
	"time"
)

// The daemon's processors (Go Ps).
//
// By default the daemon runs on half the CPUs (at least one): its own work
// per request is a few µs next to the kernel's, and on two cores one P
// instead of two doubled PostMark's small-file throughput and made 8 KiB
// writes to a large file 1.5x faster (see README, "Caching"), most likely
// because with a P per CPU the Go scheduler spins idle threads looking for
// work after each hand-off, on the cores the application needs. Readers
// blocked in the FUSE device hold no P.
//
// Streaming a large file from the disk is the exception: there the daemon
// itself is the bottleneck (reading the disk, verifying every block's
// checksum, copying 128 KiB replies), and the prefetch goroutines need a P
// beside the one serving requests. So while the disk store reads ahead, the
// daemon runs on every CPU, and it returns to its base once no readahead
// has been issued for procsHold (measured on two cores, a cold 1 GiB read:
// 0.70-0.81 GB/s with one P, 1.0-1.2 GB/s with the switch). The store
// wakes the governor (diskstore.Options.OnReadahead); an idle daemon does
// not poll. $GOMAXPROCS, when set, turns both off.

const (
	procsTick = 20 * time.Millisecond  // how often the governor looks while streaming
	procsHold = 200 * time.Millisecond // how long it stays up after streaming stops
)

// procsGovernor decides the number of Ps from a counter that grows while
// large files are streamed (diskstore.Store.ReadaheadBytes).
type procsGovernor struct {
	base, boost int
	hold, every time.Duration
	set         func(int)     // runtime.GOMAXPROCS, or a test's recorder
	wake        chan struct{} // the store's readahead signal (capacity 1)

	cur    int
	last   int64     // the counter at the previous tick
	active time.Time // the last tick that saw it grow
}

// newProcsGovernor sets the daemon's base number of Ps and returns the
// governor that raises it while large files stream, or nil when there is
// nothing to govern ($GOMAXPROCS set, or a single CPU).
func newProcsGovernor() *procsGovernor {
	if os.Getenv("GOMAXPROCS") != "" {
		return nil
	}
	n := runtime.NumCPU()
	base := max(1, n/2)
	runtime.GOMAXPROCS(base)
	if n <= base {
		return nil
	}
	return &procsGovernor{base: base, boost: n, hold: procsHold, every: procsTick, cur: base,
		set: func(p int) { runtime.GOMAXPROCS(p) }, wake: make(chan struct{}, 1)}
}

// notify tells the governor that a readahead was issued; it never blocks
// (diskstore.Options.OnReadahead).
func (g *procsGovernor) notify() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// tick looks at the counter's value at time now and changes the Ps if due.
func (g *procsGovernor) tick(now time.Time, counter int64) {
	if counter != g.last {
		g.last, g.active = counter, now
		if g.cur != g.boost {
			g.cur = g.boost
			g.set(g.boost)
		}
		return
	}
	if g.cur != g.base && now.Sub(g.active) >= g.hold {
		g.cur = g.base
		g.set(g.base)
	}
}

// run waits for the store's signal, then watches counter every tick until
// streaming has stopped for the hold, and waits again; it returns when
// done is closed.
func (g *procsGovernor) run(counter func() int64, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-g.wake:
		}
		g.tick(time.Now(), counter())
		t := time.NewTicker(g.every)
		for g.cur != g.base {
			select {
			case <-done:
				t.Stop()
				return
			case now := <-t.C:
				g.tick(now, counter())
			}
		}
		t.Stop()
		// The signals that came while watching were seen by the ticks; a
		// stale one would cost an idle governor a needless look.
		select {
		case <-g.wake:
		default:
		}
	}
}
