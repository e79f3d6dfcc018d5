package main

import (
	"os"
	"runtime"
	"time"

	"conquest/conquest"
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
// 0.70-0.81 GB/s with one P, 1.0-1.2 GB/s with the switch). $GOMAXPROCS,
// when set, turns both off.

const (
	procsTick = 20 * time.Millisecond  // how often the governor looks
	procsHold = 200 * time.Millisecond // how long it stays up after streaming stops
)

// procsGovernor decides the number of Ps from a counter that grows while
// large files are streamed (diskstore.Store.ReadaheadBytes).
type procsGovernor struct {
	base, boost int
	hold        time.Duration
	set         func(int) // runtime.GOMAXPROCS, or a test's recorder

	cur    int
	last   int64     // the counter at the previous tick
	active time.Time // the last tick that saw it grow
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

// daemonProcs sets the daemon's base number of Ps and, for a file system
// with a disk, starts the governor that raises it while large files stream;
// it stops when done is closed. With $GOMAXPROCS set it does nothing.
func daemonProcs(fsys *conquest.FS, done <-chan struct{}) {
	if os.Getenv("GOMAXPROCS") != "" {
		return
	}
	n := runtime.NumCPU()
	base := max(1, n/2)
	runtime.GOMAXPROCS(base)
	ds := fsys.Disk()
	if ds == nil || n <= base {
		return
	}
	g := &procsGovernor{base: base, boost: n, hold: procsHold, cur: base,
		set: func(p int) { runtime.GOMAXPROCS(p) }, last: ds.ReadaheadBytes()}
	go func() {
		t := time.NewTicker(procsTick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				g.tick(now, ds.ReadaheadBytes())
			}
		}
	}()
}
