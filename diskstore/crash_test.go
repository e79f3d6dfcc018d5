package diskstore

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"conquest/alloc"
	"conquest/internal/racetest"
	"conquest/pram"
)

// hookDevice calls hook before every write and sync and after every sync of
// the device it wraps: the points where a crash can happen.
type hookDevice struct {
	Device
	hook func(point string)
}

func (d *hookDevice) WriteAt(p []byte, off int64) (int, error) {
	d.hook(fmt.Sprintf("before write [%d, +%d)", off, len(p)))
	return d.Device.WriteAt(p, off)
}

func (d *hookDevice) Sync() error {
	d.hook("before sync")
	err := d.Device.Sync()
	d.hook("after sync")
	return err
}

// syncBG is bgWorld's testSyncBG for a hookDevice: the hooks name the
// background sync.
func (d *hookDevice) syncBG(w *bgWorld) func(func() error) error {
	return func(func() error) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		d.hook("before background sync")
		err := d.Device.Sync()
		d.hook("after background sync")
		return err
	}
}

const sector = 512

// bgWorld lets a crash test take its crash points in background syncs
// (bgsync.go), which run on their own goroutine, at moments when the arena
// and the model are at rest: an operation holds it from its start to the end
// of its model update, except while the store waits for a background sync;
// a background sync runs holding it, crash hooks included.
type bgWorld struct {
	mu    sync.Mutex
	held  bool // by the test's goroutine, in an operation (only it reads this)
	waits int  // times a writer waited for a background sync
}

func (w *bgWorld) options(o *Options) {
	o.testSyncBG = func(sync func() error) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		return sync()
	}
	o.testWait = func(waiting bool) {
		if !w.held {
			return
		}
		if waiting {
			w.waits++
			w.mu.Unlock()
		} else {
			w.mu.Lock()
		}
	}
}

// run runs one operation and its model update.
func (w *bgWorld) run(f func()) {
	w.mu.Lock()
	w.held = true
	defer func() {
		w.held = false
		w.mu.Unlock()
	}()
	f()
}

// crashModel knows, for every file, which versions each sector may show
// after a crash: zeros, or any version written there and not truncated
// away by a committed truncate. Sectors in fixed were synced by an fsync
// and not written since: they must read exactly as that version (tag 0:
// zeros), whatever happened to the rest of their block.
type crashModel struct {
	t       *testing.T
	seg     map[string]pram.Off // committed files
	size    map[string]int64    // committed sizes
	allowed map[string][][]uint32
	fixed   map[string]map[int64]uint32
	pending func()         // applies the in-flight operation's effect to the model
	rec     RecoveryReport // sums of what recovery did at the crash points
}

func newCrashModel(t *testing.T) *crashModel {
	return &crashModel{t: t, seg: map[string]pram.Off{}, size: map[string]int64{},
		allowed: map[string][][]uint32{}, fixed: map[string]map[int64]uint32{}}
}

// fsynced fixes every sector of name below its size at its latest version.
func (m *crashModel) fsynced(name string) {
	f := map[int64]uint32{}
	a := m.allowed[name]
	for s := int64(0); s < (m.size[name]+sector-1)/sector; s++ {
		if s < int64(len(a)) && len(a[s]) > 0 {
			f[s] = a[s][len(a[s])-1]
		} else {
			f[s] = 0
		}
	}
	m.fixed[name] = f
}

// unfix forgets the fixed versions of the sectors of [off, off+n).
func (m *crashModel) unfix(name string, off, n int64) {
	for s := off / sector; s < (off+n+sector-1)/sector; s++ {
		delete(m.fixed[name], s)
	}
}

func (m *crashModel) allow(name string, tag uint32, off int64, n int) {
	a := m.allowed[name]
	for s := off / sector; s < (off+int64(n)+sector-1)/sector; s++ {
		for int64(len(a)) <= s {
			a = append(a, nil)
		}
		a[s] = append(a[s], tag)
	}
	m.allowed[name] = a
}

// verify opens a crash image (arena bytes and disk) and checks it against
// the committed model: full consistency walk with data verification, no
// sector with bytes other than zeros or an allowed version of the file,
// exact files intact.
func (m *crashModel) verify(what string, arena []byte, disk Device) {
	t := m.t
	path := filepath.Join(t.TempDir(), "snap")
	if err := os.WriteFile(path, arena, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := pram.Open(path)
	if err != nil {
		t.Fatalf("%s: open arena: %v", what, err)
	}
	defer a.Close()
	h, err := alloc.Open(a)
	if err != nil {
		t.Fatalf("%s: open heap: %v", what, err)
	}
	s, err := Open(h, disk, Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatalf("%s: open store: %v", what, err)
	}
	defer s.Close()
	r := s.Recovery()
	m.rec.Checked += r.Checked
	m.rec.Intact += r.Intact
	m.rec.Restored += r.Restored
	m.rec.Zeroed += r.Zeroed
	m.rec.Unreadable += r.Unreadable
	m.rec.Damaged += r.Damaged
	if r.Checked != r.Intact+r.Restored+r.Zeroed+r.Unreadable || r.Unreadable != 0 || r.Damaged != 0 {
		t.Fatalf("%s: recovery %+v", what, r)
	}
	c := h.NewChecker()
	k := s.NewChecker(c, CheckOptions{VerifyData: true})
	for name, seg := range m.seg {
		k.File(seg, m.size[name])
	}
	errs := append(k.Finish(), c.Finish()...)
	for _, err := range errs {
		t.Errorf("%s: check: %v", what, err)
	}
	for name, seg := range m.seg {
		size := m.size[name]
		got := make([]byte, size)
		if _, err := s.ReadAt(seg, got, 0, nil); err != nil {
			t.Fatalf("%s: file %s: read: %v", what, name, err)
		}
		for sn, tag := range m.fixed[name] {
			off := sn * sector
			if off >= size {
				continue
			}
			sec := got[off:min(off+sector, size)]
			if tag == 0 && !bytes.Equal(sec, make([]byte, len(sec))) || tag != 0 && !isPattern(sec, tag, off) {
				t.Fatalf("%s: file %s: fsynced sector at %d, not written since, changed (want version %d)", what, name, off, tag)
			}
		}
		a := m.allowed[name]
		for off := int64(0); off < size; off += sector {
			if _, ok := m.fixed[name][off/sector]; ok {
				continue // checked exactly above
			}
			sec := got[off:min(off+sector, size)]
			if bytes.Equal(sec, make([]byte, len(sec))) {
				continue
			}
			ok := false
			if s := off / sector; s < int64(len(a)) {
				for _, tag := range a[s] {
					if isPattern(sec, tag, off) {
						ok = true
						break
					}
				}
			}
			if !ok {
				t.Fatalf("%s: file %s: sector at %d holds bytes that are neither zeros nor a version written there", what, name, off)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// TestCrashAtEveryDeviceOp runs a workload (sequential writes gathered into
// flushes, copy-on-write overwrites, a delete whose blocks are reused, a
// move to disk, a truncate, fsyncs) and simulates a power failure at every
// device write and sync: the arena as a crash of the daemon leaves it (the
// transaction in flight rolls back) and the disk with only synced writes, or
// also a random subset of unsynced ones, reordered and torn. Every image
// must pass the consistency walk with data verification (no checksum error,
// no leaked or shared block), the fsynced file must be intact, and no file
// may show bytes that were never written to it (another file's, a deleted
// file's, or stale ones).
// TestCrashAtEveryDeviceOp takes a power failure at every write and sync
// of a scripted workload, in both modes; DurableOnProcessCrash once with
// the writer making its periodic syncs itself (ForegroundSync), and once
// with them in the background every 256 KiB, where the crash points of a
// background sync come while the writer goes on or waits for it.
func TestCrashAtEveryDeviceOp(t *testing.T) {
	for _, c := range []struct {
		name string
		d    Durability
		bg   bool
	}{{"foreground", DurableOnProcessCrash, false}, {"background", DurableOnProcessCrash, true}, {"gather", GatherInMemory, false}} {
		t.Run(c.name, func(t *testing.T) {
			if racetest.Reduced(t) && c.name == "foreground" {
				t.Skip("under -race only the default mode (background syncs) runs")
			}
			skipGatherUnderRace(t, c.d)
			testCrashAtEveryDeviceOp(t, c.d, c.bg)
		})
	}
}

func testCrashAtEveryDeviceOp(t *testing.T, d Durability, bg bool) {
	cd := NewCrashDevice(12 << 20)
	hd := &hookDevice{Device: cd, hook: func(string) {}}
	o := Options{Durability: d, FileBuffer: 512 << 10, MaxExtent: 1 << 20, ForegroundSync: !bg}
	var w bgWorld
	if bg {
		o.SyncBytes = 256 << 10
		w.options(&o)
		o.testSyncBG = hd.syncBG(&w)
	}
	e := newEnv(t, envOpts{arenaSize: 4 << 20, blockSize: 4096, dev: hd, o: o})
	bgPoints := 0
	m := newCrashModel(t)
	points := 0
	// The gather-in-memory path is the previous default and cheap to cover:
	// every third crash point there keeps the test short.
	every := map[Durability]int{DurableOnProcessCrash: 1, GatherInMemory: 3}[d]
	if racetest.Reduced(t) {
		every *= 2 // every point in make test's second step
	}
	seen := 0
	hd.hook = func(point string) {
		if seen++; seen%every != 0 {
			return
		}
		points++
		if strings.Contains(point, "background") {
			bgPoints++
		}
		mode := CrashMode(points % 3)
		// The in-flight operation's data may be on disk already.
		saved := m.allowed
		if m.pending != nil {
			m.allowed = cloneAllowed(saved)
			m.pending()
		}
		arena, err := os.ReadFile(e.path)
		if err != nil {
			t.Fatal(err)
		}
		m.verify(fmt.Sprintf("crash %d (%s, mode %d)", points, point, mode), arena, cd.Crash(mode, uint64(points)))
		m.allowed = saved
	}
	tag := uint32(0)
	// op runs f in a transaction. allow adds the versions f writes to the
	// model: while f runs (its data may reach the disk before a crash) and
	// for good once it commits; commit changes sizes, which only a committed
	// transaction does.
	op := func(f func(tx *pram.Tx) error, allow, commit func()) {
		t.Helper()
		var err error
		w.run(func() {
			m.pending = allow
			if err = e.do(f); err != nil {
				return
			}
			m.pending = nil
			if allow != nil {
				allow()
			}
			if commit != nil {
				commit()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	create := func(name string) {
		var seg pram.Off
		// The model changes in commit, under the bgWorld lock that a
		// background sync's crash points take.
		op(func(tx *pram.Tx) (err error) { seg, err = e.s.NewFile(tx, uint64(len(m.seg)+1)); return err }, nil,
			func() { m.seg[name], m.size[name] = seg, 0 })
	}
	write := func(name string, off int64, n int, through bool) {
		tag++
		tg := tag
		data := pattern(tg, off, n)
		seg := m.seg[name]
		op(func(tx *pram.Tx) error {
			if through {
				return e.s.WriteThrough(tx, seg, off, data)
			}
			return e.s.Write(tx, seg, off, data)
		}, func() { m.allow(name, tg, off, n) }, func() {
			m.size[name] = max(m.size[name], off+int64(n))
			m.unfix(name, off, int64(n))
		})
	}
	flush := func(name string) {
		op(func(tx *pram.Tx) error { return e.s.Fsync(tx, m.seg[name]) }, nil, func() { m.fsynced(name) })
	}
	destroy := func(name string) {
		seg := m.seg[name]
		op(func(tx *pram.Tx) error { return e.s.Destroy(tx, seg) }, nil, func() { delete(m.seg, name) })
	}

	create("F")
	write("F", 0, 3<<20+sector, false)
	flush("F")

	create("D")
	write("D", 0, 2<<20, false)
	flush("D")

	create("A")
	for i := 0; i < 24; i++ {
		write("A", int64(i)*128<<10, 128<<10, false)
	}
	destroy("D") // its blocks go back to the free map and get reused
	for i, o := range []int64{7, 900, 3000, 64, 2048, 5000, 11, 4000} {
		write("A", o*sector, (i+1)*9*sector, false)
		if i%3 == 2 {
			flush("A")
		}
	}
	// Move to disk: created and written through in one transaction.
	tag++
	mt := tag
	var mseg pram.Off
	mdata := pattern(mt, 0, 1536<<10)
	op(func(tx *pram.Tx) (err error) {
		if mseg, err = e.s.NewFile(tx, 99); err != nil {
			return err
		}
		return e.s.WriteThrough(tx, mseg, 0, mdata)
	}, func() { m.allow("M", mt, 0, len(mdata)) }, func() { m.seg["M"], m.size["M"] = mseg, int64(len(mdata)) })

	size := int64(1<<20 + 3*sector) // inside a 4 KiB block: its tail is zeroed by copy-on-write
	op(func(tx *pram.Tx) error { return e.s.Truncate(tx, m.seg["A"], size) }, nil, func() {
		m.size["A"] = size
		a := m.allowed["A"]
		for s := (size + sector - 1) / sector; s < int64(len(a)); s++ {
			a[s] = nil
		}
		for s := range m.fixed["A"] {
			if s >= (size+sector-1)/sector {
				delete(m.fixed["A"], s)
			}
		}
	})
	write("A", size+10*sector, 300<<10, false)
	flush("A")
	// Rewrite parts of blocks of the fsynced F without fsync: its other
	// sectors must survive whatever happens to the rewritten blocks.
	write("F", 64<<10+3*sector, 2*sector, false)
	write("F", 2<<20-sector, 3*sector, false)
	punch := func(name string, off, n int64) {
		op(func(tx *pram.Tx) error { return e.s.PunchHole(tx, m.seg[name], off, n) }, nil, func() { m.unfix(name, off, n); m.allow(name, 0, off, int(n)) })
	}
	punch("F", 1<<20+5*sector, 20<<10)
	destroy("M")
	write("A", 0, 6*sector, false) // reuses M's blocks
	// A log: small appends, most of them into a block written since the
	// last sync and cached (in place, page sums updated: appendFast), a
	// crash point before each.
	create("L")
	fast := e.s.Stats().FastAppends
	write("L", 0, 2*sector, false) // the model tracks whole sectors
	for i := int64(0); i < 12; i++ {
		write("L", (2+3*i)*sector, 3*sector, false)
		if i == 5 {
			flush("L")
		}
	}
	// Let a background sync still in flight land, then take no more crash
	// points: what follows reads the counters and the model.
	w.run(func() {
		e.must(func(tx *pram.Tx) error { return e.s.settle(true) })
		hd.hook = func(string) {}
	})
	if d == DurableOnProcessCrash && e.s.Stats().FastAppends-fast < 6 {
		t.Fatalf("only %d of 12 small appends took the fast path", e.s.Stats().FastAppends-fast)
	}
	if bg && bgPoints < 4 {
		t.Fatalf("only %d crash points in background syncs", bgPoints)
	}
	if points < 20 {
		t.Fatalf("only %d crash points", points)
	}
	t.Logf("%d crash points verified (%d in background syncs, %d waits for one); recovery: %+v", points, bgPoints, w.waits, m.rec)
	if d == DurableOnProcessCrash && (m.rec.Restored == 0 || m.rec.Zeroed == 0 || m.rec.Intact == 0) {
		t.Fatalf("recovery never restored, zeroed or kept a block: %+v", m.rec)
	}
	final := map[pram.Off]int64{}
	for name, seg := range m.seg {
		final[seg] = m.size[name]
	}
	e.check(final)
}

func cloneAllowed(a map[string][][]uint32) map[string][][]uint32 {
	n := make(map[string][][]uint32, len(a))
	for k, v := range a {
		c := make([][]uint32, len(v))
		for i := range v {
			c[i] = append([]uint32(nil), v[i]...)
		}
		n[k] = c
	}
	return n
}
