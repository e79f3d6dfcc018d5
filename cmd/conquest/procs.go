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
// Two loads are exceptions, and run the daemon on every CPU until neither
// has been seen for procsHold:
//   - Streaming a large file from the disk: there the daemon itself is the
//     bottleneck (reading the disk, verifying every block's checksum,
//     copying the replies), and the prefetch goroutines need a P beside
//     the one serving requests (measured on two cores, a cold 1 GiB read:
//     0.70-0.81 GB/s with one P, 1.0-1.2 GB/s with the switch). The store
//     signals each readahead (diskstore.Options.OnReadahead).
//   - Many callers at once: with one P every request waits for the one
//     before it to leave the P, and behind a request blocked in a system
//     call until the runtime hands its P on. With dbench's load (session
//     48) 16 clients saw requests served in up to 100 ms and a longest
//     operation of 108-215 ms on one P, 7 ms on two (ext4: 24 ms), for the
//     same throughput; one and two clients were faster on one P, four on
//     two. The server counts each request read while fusefs.BusyCallers
//     requests that callers wait for are in service (fusefs.Options.OnBusy,
//     Server.Busy); procsBusy of them within one tick boost. (On two
//     cores, one P: `conquest bench postmark` about 400 a second, dbench
//     with 2 clients 3,200, with 4 6,800, with 16 17,000.)
// An idle daemon does not poll. $GOMAXPROCS, when set, turns both off.

const (
	procsTick = 20 * time.Millisecond  // how often the governor looks while boosted
	procsHold = 200 * time.Millisecond // how long it stays up after the load stops
	procsBusy = 100                    // busy requests within a tick that boost (5,000 a second)
)

// procsGovernor decides the number of Ps from two counters: one that
// grows while large files are streamed (diskstore.Store.ReadaheadBytes),
// any growth of which boosts, and the server's busy requests
// (fusefs.Server.Busy), which boost when they grow by busyStep in a tick.
type procsGovernor struct {
	base, boost int
	hold, every time.Duration
	busyStep    int64
	set         func(int)     // runtime.GOMAXPROCS, or a test's recorder
	wake        chan struct{} // the signal of a readahead or a busy request (capacity 1)

	cur      int
	lastBusy int64     // the busy counter at the previous tick
	last     int64     // the counter at the previous tick
	active   time.Time // the last tick that saw it grow
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
	return &procsGovernor{base: base, boost: n, hold: procsHold, every: procsTick, busyStep: procsBusy,
		cur: base, set: func(p int) { runtime.GOMAXPROCS(p) }, wake: make(chan struct{}, 1)}
}

// notify tells the governor that a readahead was issued or a busy request
// read; it never blocks (diskstore.Options.OnReadahead,
// fusefs.Options.OnBusy).
func (g *procsGovernor) notify() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// tick looks at the counters' values at time now and changes the Ps if
// due.
func (g *procsGovernor) tick(now time.Time, counter, busy int64) {
	streaming := counter != g.last
	crowded := busy-g.lastBusy >= g.busyStep
	g.last, g.lastBusy = counter, busy
	if streaming || crowded {
		g.active = now
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

// run waits for a signal, then watches the counters (readahead bytes and
// busy requests) every tick until neither has boosted for the hold, and
// waits again; it returns when done is closed. The busy rate is measured
// from the signal on: a woken governor looks for at least one tick.
func (g *procsGovernor) run(counters func() (readahead, busy int64), done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-g.wake:
		}
		ra, busy := counters()
		g.lastBusy = busy - 1 // the request that signalled counts
		g.tick(time.Now(), ra, busy)
		t := time.NewTicker(g.every)
		for first := true; first || g.cur != g.base; first = false {
			select {
			case <-done:
				t.Stop()
				return
			case now := <-t.C:
				ra, busy := counters()
				g.tick(now, ra, busy)
			}
		}
		t.Stop()
		// The signals that came while watching were seen by the ticks; a
		// stale one would cost an idle governor a needless look. The
		// readahead counter is read after the drain: growth from before
		// it, its signal drained, must not boost at the next wake.
		select {
		case <-g.wake:
		default:
		}
		g.last, _ = counters()
	}
}
