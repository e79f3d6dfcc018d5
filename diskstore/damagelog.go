package diskstore

import (
	"sync"
	"time"

	"conquest/pram"
)

// damageLogEvery is how often one damaged block is logged again: a reader
// retrying it (and the kernel retries each failed read) would otherwise
// log without end, a line per try (an outside review saw ten per read).
// Every failure is still counted (the stats record) and returned as EIO.
const damageLogEvery = time.Minute

// damageLogMax bounds the blocks remembered; past it the memory starts
// afresh (a block may then be logged again early).
const damageLogMax = 4096

// damageLog remembers when each damaged block was last logged.
type damageLog struct {
	mu   sync.Mutex
	last map[[2]uint64]time.Time // by segment list and file block
}

// due reports whether block fb of seg's damage should be logged now, and
// if so notes that it is.
func (d *damageLog) due(seg pram.Off, fb uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	k, now := [2]uint64{uint64(seg), fb}, time.Now()
	if t, ok := d.last[k]; ok && now.Sub(t) < damageLogEvery {
		return false
	}
	if d.last == nil || len(d.last) >= damageLogMax {
		d.last = make(map[[2]uint64]time.Time)
	}
	d.last[k] = now
	return true
}
