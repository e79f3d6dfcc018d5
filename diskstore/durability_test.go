package diskstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"conquest/internal/racetest"
	"conquest/pram"
)

var errKill = errors.New("test: kill -9")

// doKill runs f in a transaction like env.do, except that with kill > 0 the
// process is "killed" at the kill-th journaled store if it gets that far:
// the store hook panics, nothing is aborted, and the caller must abandon the
// arena (env.crash).
func (e *env) doKill(kill int, f func(tx *pram.Tx) error) (killed bool, err error) {
	n := 0
	if kill > 0 {
		e.a.SetStoreHook(func() {
			if n++; n == kill {
				panic(errKill)
			}
		})
	}
	a := e.a
	defer a.SetStoreHook(nil)
	tx := e.a.Begin()
	defer func() {
		if r := recover(); r != nil {
			if r != errKill {
				panic(r)
			}
			killed = true
		}
	}()
	if err := f(tx); err != nil {
		e.s.Abort(tx)
		return false, err
	}
	e.s.Commit(tx)
	return false, nil
}

// randomOp is one operation of the random workloads: f runs it in a
// transaction, apply updates the contents model once it committed; kind,
// file, off, n and tag describe it for the crash model.
type randomOp struct {
	kind   string // create, write, fsync, truncate, punch, trim, destroy, none
	file   *modelFile
	off, n int64 // write, punch: range; truncate: off is the size
	tag    uint32
	f      func(tx *pram.Tx) error
	apply  func()
}

func (o randomOp) String() string { return fmt.Sprintf("%s [%d, +%d)", o.kind, o.off, o.n) }

// randomFileOp picks an operation on files (at most maxFiles, each below
// maxSize bytes). Offsets and lengths are multiples of align.
func randomFileOp(r *rand.Rand, e *env, files *[]*modelFile, step int, maxFiles int, maxSize, align int64) randomOp {
	fs := *files
	al := func(v int64) int64 { return v / align * align }
	none := randomOp{kind: "none", f: func(*pram.Tx) error { return nil }, apply: func() {}}
	op := r.IntN(100)
	if len(fs) < 2 || op < 4 {
		if len(fs) >= maxFiles {
			return none
		}
		f := &modelFile{}
		return randomOp{kind: "create", file: f, f: func(tx *pram.Tx) (err error) {
			f.seg, err = e.s.NewFile(tx, uint64(step+1))
			return err
		}, apply: func() { *files = append(*files, f) }}
	}
	f := fs[r.IntN(len(fs))]
	switch {
	case op < 60:
		off := int64(len(f.data))
		if r.IntN(3) == 0 {
			off = r.Int64N(maxSize)
		}
		off = al(off)
		n := max(al(1+r.Int64N(200<<10)), align)
		if off+n > maxSize {
			return none
		}
		tag := uint32(step + 1)
		data := pattern(tag, off, int(n))
		if r.IntN(10) == 0 {
			data, tag = make([]byte, n), 0
		}
		return randomOp{kind: "write", file: f, off: off, n: n, tag: tag, f: func(tx *pram.Tx) error {
			return e.s.Write(tx, f.seg, off, data)
		}, apply: func() {
			if end := off + n; end > int64(len(f.data)) {
				f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
			}
			copy(f.data[off:], data)
		}}
	case op < 70:
		return randomOp{kind: "fsync", file: f, f: func(tx *pram.Tx) error { return e.s.Fsync(tx, f.seg) }, apply: func() {}}
	case op < 78:
		size := al(r.Int64N(int64(len(f.data)) + 1))
		if r.IntN(4) == 0 {
			size = al(r.Int64N(maxSize))
		}
		return randomOp{kind: "truncate", file: f, off: size, f: func(tx *pram.Tx) error { return e.s.Truncate(tx, f.seg, size) }, apply: func() {
			if size <= int64(len(f.data)) {
				f.data = f.data[:size]
			} else {
				f.data = append(f.data, make([]byte, size-int64(len(f.data)))...)
			}
		}}
	case op < 85:
		if len(f.data) < int(align) {
			return none
		}
		off := al(r.Int64N(int64(len(f.data))))
		n := max(al(1+r.Int64N(int64(len(f.data))-off)), align)
		return randomOp{kind: "punch", file: f, off: off, n: n, f: func(tx *pram.Tx) error { return e.s.PunchHole(tx, f.seg, off, n) }, apply: func() {
			clear(f.data[off : off+n])
		}}
	case op < 88:
		return randomOp{kind: "trim", file: f, f: func(tx *pram.Tx) error { return e.s.Trim(tx, f.seg, int64(len(f.data))) }, apply: func() {}}
	case op < 90:
		return randomOp{kind: "dropPrealloc", file: f, f: func(tx *pram.Tx) error { return e.s.DropPrealloc(tx, f.seg, int64(len(f.data))) }, apply: func() {}}
	case op < 94:
		return randomOp{kind: "destroy", file: f, f: func(tx *pram.Tx) error { return e.s.Destroy(tx, f.seg) }, apply: func() {
			for i, x := range *files {
				if x == f {
					*files = append((*files)[:i:i], (*files)[i+1:]...)
					break
				}
			}
		}}
	}
	return none
}

func modelSizes(files []*modelFile) map[pram.Off]int64 {
	m := map[pram.Off]int64{}
	for _, f := range files {
		m[f.seg] = int64(len(f.data))
	}
	return m
}

// TestProcessCrashKeepsWrites is the kill -9 model: random writes (partial
// blocks, overwrites, zeros), truncates, hole punches, trims, destroys and
// a few fsyncs, with the process killed between operations or in the middle
// of one (at a random journaled store). The device keeps every write that
// was issued (the page cache survives the death of the process), the arena
// rolls back only the transaction in flight. After reopening, every file
// reads exactly as the committed operations left it, whether fsynced or
// not; recovery verified the unsynced blocks and found them all intact; the
// consistency walk with data verification is clean.
func TestProcessCrashKeepsWrites(t *testing.T) {
	for _, bs := range []uint32{4096, 16 << 10} {
		seed := uint64(bs) * modelSeed()
		r := rand.New(rand.NewPCG(seed, 2))
		e := newEnv(t, envOpts{arenaSize: 8 << 20, blockSize: bs, dev: NewCrashDevice(24 << 20),
			o: Options{SyncBytes: 1 << 20, MaxExtent: 1 << 20}})
		var files []*modelFile
		kills, midOp := 0, 0
		var checked uint64
		for step := 0; step < 250; step++ {
			o := randomFileOp(r, e, &files, step, 4, 3<<20, 1)
			kill := 0
			if r.IntN(10) == 0 {
				kill = 1 + r.IntN(80)
			}
			killed, err := e.doKill(kill, o.f)
			if err != nil {
				t.Fatalf("bs %d seed %d step %d: %v: %v", bs, seed, step, o, err)
			}
			if !killed {
				o.apply()
			} else {
				midOp++
			}
			if !killed && r.IntN(12) != 0 {
				continue
			}
			// kill -9: all written data is in the page cache.
			kills++
			e.crash(e.dev.(*CrashDevice).Reopen())
			rep := e.s.Recovery()
			if rep.Restored+rep.Zeroed+rep.Unreadable != 0 || rep.Damaged != 0 || rep.Checked != rep.Intact {
				t.Fatalf("bs %d seed %d step %d (%v, killed %v): recovery after a process crash: %+v", bs, seed, step, o, killed, rep)
			}
			checked += rep.Checked
			for i, f := range files {
				got, err := e.read(f.seg, 0, len(f.data))
				if err != nil || !bytes.Equal(got, f.data) {
					t.Fatalf("bs %d seed %d step %d (%v, killed %v): file %d after kill -9: err %v, equal %v",
						bs, seed, step, o, killed, i, err, bytes.Equal(got, f.data))
				}
			}
			e.check(modelSizes(files))
			if st := e.s.Stats(); st.QuarantinedBlocks != 0 {
				t.Fatalf("after recovery %d blocks still quarantined", st.QuarantinedBlocks)
			}
		}
		undone := 0
		for _, l := range e.logs {
			if strings.Contains(l, "undid the appends") {
				undone++
			}
		}
		t.Logf("bs %d: %d kills (%d in the middle of an operation, %d undoing appends in place), %d unsynced blocks verified by recovery",
			bs, kills, midOp, undone, checked)
		if kills < 10 || midOp < 5 || checked == 0 {
			t.Fatalf("workload too weak: %d kills, %d mid-operation, %d blocks checked", kills, midOp, checked)
		}
	}
}

// TestPowerLossRandom is the power-failure model on a random workload (as
// in TestProcessCrashKeepsWrites, sector-aligned, with periodic syncs and a
// small disk so that the quarantine is reclaimed under pressure): at sampled
// device operations the disk loses, keeps part of, reorders or tears every
// write not yet synced, the arena loses the transaction in flight. After
// recovery every sector reads as zeros or as a version written there, every
// sector fsynced and not written since reads exactly as fsynced, and the
// consistency walk with data verification is clean.
func TestPowerLossRandom(t *testing.T) {
	for _, bg := range []bool{false, true} {
		t.Run(map[bool]string{false: "foreground", true: "background"}[bg], func(t *testing.T) {
			if racetest.Reduced(t) && !bg {
				t.Skip("under -race only the default mode (background syncs) runs")
			}
			testPowerLossRandom(t, bg)
		})
	}
}

// testPowerLossRandom: with bg, the periodic syncs run in the background
// (bgsync.go) and crash points come in them too.
func testPowerLossRandom(t *testing.T, bg bool) {
	seed := 77 * modelSeed()
	if bg {
		seed++
	}
	r := rand.New(rand.NewPCG(seed, 3))
	cd := NewCrashDevice(12 << 20)
	hd := &hookDevice{Device: cd, hook: func(string) {}}
	o := Options{SyncBytes: 512 << 10, MaxExtent: 512 << 10, ForegroundSync: !bg}
	var w bgWorld
	if bg {
		w.options(&o)
		o.testSyncBG = hd.syncBG(&w)
	}
	e := newEnv(t, envOpts{arenaSize: 4 << 20, blockSize: 4096, dev: hd, o: o})
	bgPoints := 0
	m := newCrashModel(t)
	names := map[*modelFile]string{}
	var files []*modelFile
	sync := func() { // the model follows the files
		m.seg, m.size = map[string]pram.Off{}, map[string]int64{}
		for _, f := range files {
			m.seg[names[f]], m.size[names[f]] = f.seg, int64(len(f.data))
		}
	}
	points, ops := 0, 0
	hd.hook = func(point string) {
		inBG := strings.Contains(point, "background")
		if ops++; ops%5 != 0 && !inBG {
			return
		}
		points++
		if inBG {
			bgPoints++
		}
		saved := m.allowed
		if m.pending != nil {
			m.allowed = cloneAllowed(saved)
			m.pending()
		}
		arena, err := os.ReadFile(e.path)
		if err != nil {
			t.Fatal(err)
		}
		m.verify(fmt.Sprintf("seed %d crash %d (%s)", seed, points, point), arena, cd.Crash(CrashMode(points%3), uint64(points)))
		m.allowed = saved
	}
	for step := 0; step < 220; step++ {
		o := randomFileOp(r, e, &files, step, 4, 2<<20, sector)
		if o.kind == "create" {
			names[o.file] = fmt.Sprintf("f%d", step)
		}
		name := names[o.file]
		// allow: versions the operation may put on disk (also while it
		// runs); commit: what it changes in the model once committed.
		var allow, commit func()
		switch o.kind {
		case "write":
			allow = func() { m.allow(name, o.tag, o.off, int(o.n)) }
			commit = func() { m.unfix(name, o.off, o.n) }
		case "punch":
			commit = func() { m.unfix(name, o.off, o.n); m.allow(name, 0, o.off, int(o.n)) }
		case "truncate":
			commit = func() {
				end := (o.off + sector - 1) / sector
				a := m.allowed[name]
				for s := end; s < int64(len(a)); s++ {
					a[s] = nil
				}
				for s := range m.fixed[name] {
					if s >= end {
						delete(m.fixed[name], s)
					}
				}
			}
		case "fsync":
			commit = func() { m.fsynced(name) }
		case "destroy":
			commit = func() { delete(m.allowed, name); delete(m.fixed, name) }
		}
		var err error
		w.run(func() {
			m.pending = allow
			if err = e.do(o.f); err != nil {
				return
			}
			m.pending = nil
			o.apply()
			if allow != nil {
				allow()
			}
			sync()
			if commit != nil {
				commit()
			}
		})
		if err != nil {
			t.Fatalf("seed %d step %d: %v: %v", seed, step, o, err)
		}
	}
	w.run(func() {
		e.must(func(tx *pram.Tx) error { return e.s.settle(true) })
		hd.hook = func(string) {}
	})
	t.Logf("seed %d: %d crash points verified (%d in background syncs, %d waits for one); recovery: %+v", seed, points, bgPoints, w.waits, m.rec)
	if points < 20 || m.rec.Restored == 0 || m.rec.Zeroed == 0 || bg && bgPoints < 4 {
		t.Fatalf("workload too weak: %d points (%d in background syncs), recovery %+v", points, bgPoints, m.rec)
	}
	e.check(modelSizes(files))
}

// TestRecoveryRestoresSyncedContents: after a power failure that loses
// every unsynced write, a rewritten synced block reads as at the last sync
// (also the bytes the rewrite did not touch), a block written into a hole
// reads as zeros, a block truncated into reads as at the last sync up to the
// new end and as zeros after it; each is logged with inode, offset and disk
// block, and the quarantine is released.
func TestRecoveryRestoresSyncedContents(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd})
	a, b := e.newFile(7), e.newFile(8)
	oldA, oldB := pattern(1, 0, 64<<10), pattern(2, 0, 3*4096)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, oldA) })
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, b, 0, oldB) })
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, a, 64<<10) })
	spA1, _ := e.s.lookup(a, 1)
	e.must(func(tx *pram.Tx) error { return e.s.Write(tx, a, 4096+10, pattern(3, 4096+10, 100)) })
	spA1new, _ := e.s.lookup(a, 1)
	e.must(func(tx *pram.Tx) error { return e.s.Write(tx, a, 64<<10, pattern(4, 64<<10, 8192)) })
	e.must(func(tx *pram.Tx) error { return e.s.Truncate(tx, b, 4096+100) })
	spA16, _ := e.s.lookup(a, 16)
	if st := e.s.Stats(); st.QuarantinedBlocks != 2 || st.UnsyncedBytes == 0 {
		t.Fatalf("before the crash: %+v", st)
	}
	// Before the crash the new data is there.
	if got, _ := e.read(a, 4096+10, 100); !bytes.Equal(got, pattern(3, 4096+10, 100)) {
		t.Fatal("unsynced write not visible")
	}
	e.crash(cd.Crash(CrashLoseAll, 1))
	rep := e.s.Recovery()
	if rep.Checked != 4 || rep.Restored != 2 || rep.Zeroed != 2 || rep.Intact != 0 || rep.Files != 2 {
		t.Fatalf("recovery %+v", rep)
	}
	wantA := append(append([]byte(nil), oldA...), make([]byte, 8192)...)
	if got, err := e.read(a, 0, len(wantA)); err != nil || !bytes.Equal(got, wantA) {
		t.Fatalf("file a after power loss: %v", err)
	}
	if got, err := e.read(b, 0, 2*4096); err != nil || !bytes.Equal(got[:4096+100], oldB[:4096+100]) ||
		!bytes.Equal(got[4096+100:], make([]byte, 4096-100)) {
		t.Fatalf("file b after power loss: %v", err)
	}
	for _, want := range []string{
		fmt.Sprintf("inode 7, offset 4096, disk block %d: data written before the crash did not reach the disk: "+
			"restored its contents at the last sync (from disk block %d)", spA1new.disk, spA1.disk),
		fmt.Sprintf("inode 7, offsets [65536, 73728), disk blocks [%d, %d)", spA16.disk, spA16.disk+2),
		"inode 8, offset 4096",
		"up to byte 100",
	} {
		if !e.logged(want) {
			t.Errorf("log lacks %q: %q", want, e.logs)
		}
	}
	if st := e.s.Stats(); st.QuarantinedBlocks != 0 {
		t.Fatalf("after recovery: %+v", st)
	}
	e.check(map[pram.Off]int64{a: int64(len(wantA)), b: 2 * 4096})
	// A second crash finds nothing to do.
	e.crash(e.dev.(*CrashDevice).Crash(CrashLoseAll, 2))
	if rep := e.s.Recovery(); rep.Checked != 0 {
		t.Fatalf("second recovery %+v", rep)
	}
	e.check(map[pram.Off]int64{a: int64(len(wantA)), b: 2 * 4096})
}

// TestRecoveryCatchesLyingDisk: a disk that acknowledges an unsynced write
// but never stores it is caught at recovery after a mere process crash: the
// block goes back to its synced contents.
func TestRecoveryCatchesLyingDisk(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd})
	a := e.newFile(3)
	old := pattern(1, 0, 256<<10)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, old) })
	dropped := false
	cd.SetDropFilter(func(off int64, n int) bool {
		if dropped {
			return false
		}
		dropped = true
		return true
	})
	e.must(func(tx *pram.Tx) error { return e.s.Write(tx, a, 5*4096+1, []byte("lost")) })
	cd.SetDropFilter(nil)
	e.crash(cd.Reopen())
	if rep := e.s.Recovery(); rep.Restored != 1 || rep.Intact != 0 {
		t.Fatalf("recovery %+v", rep)
	}
	if got, err := e.read(a, 0, len(old)); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("after recovery: %v", err)
	}
	e.check(map[pram.Off]int64{a: int64(len(old))})
}

// TestQuarantineUntilSync: the blocks a rewrite of synced data replaces
// are held (not free, not reused by other files) until a sync; an
// allocation that finds no free block syncs and reuses them.
func TestQuarantineUntilSync(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096, dev: NewMemDevice(2 << 20)})
	a, b := e.newFile(1), e.newFile(2)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, pattern(1, 0, 256<<10)) })
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, a, 256<<10) })
	newA := pattern(2, 0, 256<<10)
	e.must(func(tx *pram.Tx) error { return e.s.Write(tx, a, 0, newA) })
	st := e.s.Stats()
	if st.QuarantinedBlocks != 64 {
		t.Fatalf("after rewriting 64 synced blocks: %+v", st)
	}
	var held []extent
	if err := e.s.quarantineList().walk(func(r rec) bool { held = append(held, extent{Block(r[0]), Block(r[1])}); return true }); err != nil {
		t.Fatal(err)
	}
	e.check(map[pram.Off]int64{a: 256 << 10, b: 0})
	syncs := st.Syncs
	// Fill the disk with b: the free blocks first, then the quarantine
	// after a sync.
	var size int64
	for off := int64(0); ; off += 64 << 10 {
		err := e.do(func(tx *pram.Tx) error { return e.s.Write(tx, b, off, pattern(3, off, 64<<10)) })
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		size = off + 64<<10
		if e.s.Stats().Syncs == syncs { // not reclaimed yet: b never uses held blocks
			for fb := uint64(0); fb < uint64(size)/4096; fb++ {
				sp, _ := e.s.lookup(b, fb)
				for _, h := range held {
					if sp.disk >= h.b && sp.disk < h.e {
						t.Fatalf("quarantined block %d reused before a sync", sp.disk)
					}
				}
			}
		}
	}
	st = e.s.Stats()
	da, _ := e.s.DiskBytes(a)
	db, _ := e.s.DiskBytes(b)
	// Full: fewer blocks available than the next write takes (preallocation
	// leaves some: it takes at most a quarter of what is free; the
	// overwrite reserve stays free).
	if st.Syncs == syncs || st.QuarantinedBlocks != 0 || st.AvailBlocks >= 16 || st.FreeBlocks > e.s.overwriteReserve()+16 || uint64(da+db)/4096+st.FreeBlocks != st.DataBlocks {
		t.Fatalf("disk full at %d bytes of b, files hold %d+%d bytes: %+v (syncs before %d)", size, da, db, st, syncs)
	}
	if got, err := e.read(a, 0, 256<<10); err != nil || !bytes.Equal(got, newA) {
		t.Fatalf("a: %v", err)
	}
	e.check(map[pram.Off]int64{a: 256 << 10, b: size})
}

// TestPeriodicSync: Options.SyncBytes bounds what is written but unsynced,
// and with it the unsynced list: SyncBytes itself when the writer syncs
// (ForegroundSync), twice that with the syncs in the background (one in
// flight, and as much again written before the writer waits for it).
func TestPeriodicSync(t *testing.T) {
	for _, fg := range []bool{true, false} {
		t.Run(fmt.Sprintf("foreground=%v", fg), func(t *testing.T) {
			cd := NewCrashDevice(32 << 20)
			e := newEnv(t, envOpts{blockSize: 4096, dev: cd, o: Options{SyncBytes: 1 << 20, ForegroundSync: fg}})
			bound := uint64(1 << 20)
			if !fg {
				bound *= 2
			}
			a := e.newFile(1)
			const size = 10 << 20
			maxList := uint64(0)
			for off := int64(0); off < size; off += 128 << 10 {
				if err := e.write(a, off, pattern(1, off, 128<<10)); err != nil {
					t.Fatal(err)
				}
				st := e.s.Stats()
				if st.UnsyncedBytes >= bound {
					t.Fatalf("%d bytes unsynced", st.UnsyncedBytes)
				}
				n, _ := e.s.unsyncedOf(a).length()
				maxList = max(maxList, n)
			}
			e.must(func(tx *pram.Tx) error { return e.s.settle(true) })
			syncs, _, _, pending := cd.Stats()
			if syncs < 9 || maxList > bound/4096 || uint64(pending) > bound/(128<<10) {
				t.Fatalf("%d syncs, %d records at most, %d writes pending", syncs, maxList, pending)
			}
			e.check(map[pram.Off]int64{a: size})
		})
	}
}

// TestFsyncSyncsWhatIsNeeded: Fsync syncs the device only for a file with
// data written since the last sync; Writeback never syncs in this mode;
// FlushAll syncs whatever was written.
func TestFsyncSyncsWhatIsNeeded(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd})
	a, b := e.newFile(1), e.newFile(2)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, b, 0, pattern(2, 0, 100000)) })
	syncs := func() int64 { n, _, _, _ := cd.Stats(); return n }
	pending := func() int { _, _, _, p := cd.Stats(); return p }
	if err := e.write(a, 0, pattern(1, 0, 200000)); err != nil {
		t.Fatal(err)
	}
	s0 := syncs()
	if pending() == 0 || e.s.Buffered(a) != 0 || e.s.Stats().UnsyncedBytes == 0 {
		t.Fatal("Write did not put the data on the device, or synced it")
	}
	e.must(func(tx *pram.Tx) error { return e.s.Fsync(tx, b) })
	e.must(func(tx *pram.Tx) error { return e.s.Writeback(tx, a) })
	if syncs() != s0 {
		t.Fatal("Fsync of a synced file or Writeback synced the device")
	}
	e.must(func(tx *pram.Tx) error { return e.s.Fsync(tx, a) })
	if syncs() != s0+1 || pending() != 0 || e.s.Stats().UnsyncedBytes != 0 {
		t.Fatalf("Fsync: %d syncs, %d writes pending", syncs()-s0, pending())
	}
	if n, _ := e.s.unsyncedOf(a).length(); n != 0 {
		t.Fatalf("%d unsynced records left after Fsync", n)
	}
	e.must(func(tx *pram.Tx) error { return e.s.FlushAll(tx) })
	if syncs() != s0+1 {
		t.Fatal("FlushAll synced with nothing written")
	}
	if err := e.write(b, 5, []byte("x")); err != nil {
		t.Fatal(err)
	}
	e.must(func(tx *pram.Tx) error { return e.s.FlushAll(tx) })
	if syncs() != s0+2 || pending() != 0 {
		t.Fatal("FlushAll did not sync")
	}
	e.check(map[pram.Off]int64{a: 200000, b: 100000})
}

// TestAbortAfterSync: a transaction that synced (and so released the
// quarantine and reused it) and then aborts leaves a consistent store: the
// files read as before it, the records it brought back are stale and
// harmless, also across a power failure.
func TestAbortAfterSync(t *testing.T) {
	cd := NewCrashDevice(4 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd})
	a, b := e.newFile(1), e.newFile(2)
	oldA, newA := pattern(1, 0, 512<<10), pattern(2, 0, 512<<10)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, oldA) })
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, a, 512<<10) })
	e.must(func(tx *pram.Tx) error { return e.s.Write(tx, a, 0, newA) }) // 128 blocks quarantined
	err := e.do(func(tx *pram.Tx) error {
		if err := e.s.Fsync(tx, a); err != nil { // sync: the quarantine is free again
			return err
		}
		for off := int64(0); off < 3<<20; off += 256 << 10 { // reuses it
			if err := e.s.Write(tx, b, off, pattern(3, off, 256<<10)); err != nil {
				return err
			}
		}
		return errTest
	})
	if err != errTest {
		t.Fatal(err)
	}
	files := map[pram.Off]int64{a: 512 << 10, b: 0}
	if got, err := e.read(a, 0, 512<<10); err != nil || !bytes.Equal(got, newA) {
		t.Fatalf("a after abort: %v", err)
	}
	e.check(files)
	e.crash(cd.Crash(CrashRandom, 5))
	if rep := e.s.Recovery(); rep.Checked != 0 {
		t.Fatalf("recovery checked stale records: %+v", rep)
	}
	if got, err := e.read(a, 0, 512<<10); err != nil || !bytes.Equal(got, newA) {
		t.Fatalf("a after power loss: %v", err)
	}
	e.check(files)
	if st := e.s.Stats(); st.QuarantinedBlocks != 0 {
		t.Fatalf("quarantine not released at Open: %+v", st)
	}
}

// TestOldArenaFormat: an arena formatted before the unsynced lists,
// quarantine and epoch existed (zeros in their place) opens and works.
func TestOldArenaFormat(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd})
	a := e.newFile(1)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, pattern(1, 0, 300<<10)) })
	e.must(func(tx *pram.Tx) error { return e.h.Free(tx, e.s.intentArea()) })
	for off := pram.Off(fmOffUnsynced); off < freeMapSize; off += 8 {
		e.a.PutU64(e.s.fm+off, 0)
	}
	for off := pram.Off(stOffEpoch); off < stOffSumFormat; off += 8 { // the checksums stay page sums
		e.a.PutU64(e.s.st+off, 0)
	}
	for off := pram.Off(slOffUnsynced); off < segListSize; off += 8 {
		e.a.PutU64(a+off, 0)
	}
	e.restart()
	if e.s.intentArea() == 0 {
		t.Fatal("Open made no intent area")
	}
	e.check(map[pram.Off]int64{a: 300 << 10})
	e.must(func(tx *pram.Tx) error { return e.s.Write(tx, a, 1000, pattern(2, 1000, 5000)) })
	want := pattern(1, 0, 300<<10)
	copy(want[1000:], pattern(2, 1000, 5000))
	e.check(map[pram.Off]int64{a: 300 << 10})
	e.crash(cd.Crash(CrashLoseAll, 1))
	if rep := e.s.Recovery(); rep.Restored != 2 {
		t.Fatalf("recovery %+v", rep)
	}
	if got, err := e.read(a, 0, 300<<10); err != nil || !bytes.Equal(got, pattern(1, 0, 300<<10)) {
		t.Fatalf("after power loss: %v", err)
	}
	e.check(map[pram.Off]int64{a: 300 << 10})
}

// writeLog records the writes of the device it wraps.
type writeLog struct {
	Device
	writes [][2]int64 // offset, length
}

func (w *writeLog) WriteAt(p []byte, off int64) (int, error) {
	w.writes = append(w.writes, [2]int64{off, int64(len(p))})
	return w.Device.WriteAt(p, off)
}

// TestAppendInPlace: small appends to a block written since the last sync
// go in place, as aligned writes of the range they cover; the first append
// to a block after a sync, and any write over non-zero bytes, go to a new
// block (copy-on-write).
func TestAppendInPlace(t *testing.T) {
	wl := &writeLog{Device: NewCrashDevice(16 << 20)}
	e := newEnv(t, envOpts{dev: wl, blockSize: 64 << 10})
	a := e.newFile(1)
	model := pattern(1, 0, 100)
	if err := e.write(a, 0, model); err != nil { // into a new block
		t.Fatal(err)
	}
	sp0, _ := e.s.lookup(a, 0)
	wl.writes = nil
	for off := int64(100); off < 20000; off += 300 {
		d := pattern(2, off, 300)
		if err := e.write(a, off, d); err != nil {
			t.Fatal(err)
		}
		model = append(model, d...)
	}
	if sp, _ := e.s.lookup(a, 0); sp.disk != sp0.disk {
		t.Fatalf("appends moved the block from %d to %d", sp0.disk, sp.disk)
	}
	for _, w := range wl.writes {
		if w[1] > 2*Alignment || w[0]/int64(e.s.bs) != int64(sp0.disk) || w[0]%Alignment != 0 {
			t.Fatalf("append wrote [%d, +%d), block %d", w[0], w[1], sp0.disk)
		}
	}
	// All but the first append found the block cached and took the fast
	// path (only the pages under the write copied and hashed).
	if fast, n := e.s.Stats().FastAppends, uint64(len(wl.writes)); fast+1 < n {
		t.Fatalf("%d of %d appends took the fast path", fast, n)
	}
	if got, err := e.read(a, 0, len(model)); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("after appends: %v", err)
	}
	e.check(map[pram.Off]int64{a: int64(len(model))})
	// Synced: the block's contents must survive a power failure during the
	// next append, which therefore goes elsewhere.
	e.must(func(tx *pram.Tx) error { return e.s.Fsync(tx, a) })
	synced := append([]byte(nil), model...)
	d := pattern(3, int64(len(model)), 300)
	if err := e.write(a, int64(len(model)), d); err != nil {
		t.Fatal(err)
	}
	model = append(model, d...)
	sp1, _ := e.s.lookup(a, 0)
	if sp1.disk == sp0.disk || e.s.Stats().QuarantinedBlocks != 1 {
		t.Fatalf("first append after a sync: block %d (was %d), %+v", sp1.disk, sp0.disk, e.s.Stats())
	}
	d = pattern(4, int64(len(model)), 300)
	if err := e.write(a, int64(len(model)), d); err != nil {
		t.Fatal(err)
	}
	model = append(model, d...)
	if sp, _ := e.s.lookup(a, 0); sp.disk != sp1.disk {
		t.Fatal("second append after a sync not in place")
	}
	// Over non-zero bytes: copy-on-write.
	if err := e.write(a, 50, []byte("over")); err != nil {
		t.Fatal(err)
	}
	copy(model[50:], "over")
	if sp, _ := e.s.lookup(a, 0); sp.disk == sp1.disk {
		t.Fatal("overwrite of data in place")
	}
	if got, err := e.read(a, 0, len(model)); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("after overwrite: %v", err)
	}
	e.check(map[pram.Off]int64{a: int64(len(model))})
	e.crash(e.dev.(*writeLog).Device.(*CrashDevice).Crash(CrashLoseAll, 1))
	// Power failure: back to the fsynced contents.
	want := append(synced, make([]byte, len(model)-len(synced))...)
	if got, err := e.read(a, 0, len(model)); err != nil || !bytes.Equal(got, want) || e.s.Recovery().Restored != 1 {
		t.Fatalf("after power loss: %v, %+v", err, e.s.Recovery())
	}
}

// TestAppendInPlaceRollback: appends written in place by a transaction
// that aborts, or that a kill -9 interrupts before its commit, are undone
// on the device (by Abort, or by Open), so that the block matches its
// checksum again; the other blocks are untouched.
func TestAppendInPlaceRollback(t *testing.T) {
	for _, kill := range []bool{false, true} {
		cd := NewCrashDevice(16 << 20)
		e := newEnv(t, envOpts{blockSize: 4096, dev: cd})
		a := e.newFile(1)
		model := pattern(1, 0, 10000) // blocks 0, 1 full, 2 partial
		if err := e.write(a, 0, model); err != nil {
			t.Fatal(err)
		}
		spBefore, _ := e.s.lookup(a, 2)
		tx := e.a.Begin()
		for off := int64(10000); off < 12000; off += 500 { // four appends to block 2 in place
			if err := e.s.Write(tx, a, off, pattern(2, off, 500)); err != nil {
				t.Fatal(err)
			}
		}
		if sp, _ := e.s.lookup(a, 2); sp.disk != spBefore.disk || len(e.s.intents) != 4 {
			t.Fatalf("not in place: block %d (was %d), %d intents", sp.disk, spBefore.disk, len(e.s.intents))
		}
		if kill {
			e.crash(cd.Reopen())
			if !e.logged("undid the appends of 1 blocks") {
				t.Errorf("no message: %q", e.logs)
			}
		} else {
			e.s.Abort(tx)
		}
		if e.s.intentArea() == 0 || len(e.s.readIntents()) != 0 {
			t.Fatal("intent slots left")
		}
		if got, err := e.read(a, 0, len(model)); err != nil || !bytes.Equal(got, model) {
			t.Fatalf("kill %v: after rollback: %v", kill, err)
		}
		e.check(map[pram.Off]int64{a: int64(len(model))})
		// And the block takes appends again.
		if err := e.write(a, 10000, pattern(3, 10000, 3000)); err != nil {
			t.Fatal(err)
		}
		model = append(model, pattern(3, 10000, 3000)...)
		if got, err := e.read(a, 0, len(model)); err != nil || !bytes.Equal(got, model) {
			t.Fatalf("kill %v: append after rollback: %v", kill, err)
		}
		e.check(map[pram.Off]int64{a: int64(len(model))})
	}
}

// errLaterStep stands for a later step of an operation that fails.
var errLaterStep = errors.New("a later step of the operation failed")

// TestAbortAfterSyncUndoesAppendsDurably (found by review; Abort now syncs
// the undone appends, as Open's recovery does): a transaction appends in
// place to a block written since the last sync (an intent), then syncs the
// device (a later Write of the same operation passes SyncBytes), then
// aborts (a later step fails, e.g. ENOSPC). The sync made the appended
// bytes durable and ended the epoch, so the block's unsynced record is now
// stale. Abort's revertInPlace writes the block back without the append but
// does not sync, and clears the intent. After a power loss that keeps the
// arena (a checkpoint made after the abort, e.g. by an fsync that needed no
// device sync) but loses the unsynced revert, the block holds the appended
// bytes, its checksum is the one before the append, and no live record or
// intent repairs it: the read fails with EIO, although the file's bytes were
// synced.
func TestAbortAfterSyncUndoesAppendsDurably(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd, o: Options{ForegroundSync: true, SyncBytes: 256 << 10}})
	a, b := e.newFile(1), e.newFile(2)
	model := pattern(1, 0, 1000) // block 0, partly
	if err := e.write(a, 0, model); err != nil {
		t.Fatal(err)
	}
	err := e.do(func(tx *pram.Tx) error {
		if err := e.s.Write(tx, a, 1000, pattern(2, 1000, 500)); err != nil { // in place
			return err
		}
		if len(e.s.intents) != 1 {
			t.Fatalf("append not in place: %d intents", len(e.s.intents))
		}
		syncs, _, _, _ := cd.Stats()
		if err := e.s.Write(tx, b, 0, pattern(3, 0, 512<<10)); err != nil { // passes SyncBytes
			return err
		}
		if s2, _, _, _ := cd.Stats(); s2 == syncs {
			t.Fatal("no sync")
		}
		return errLaterStep
	})
	if err != errLaterStep {
		t.Fatal(err)
	}
	if got, err := e.read(a, 0, len(model)); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("after abort: %v", err)
	}
	// The power fails; the arena is as after the abort.
	e.crash(cd.Crash(CrashLoseAll, 1))
	if got, err := e.read(a, 0, len(model)); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("after power loss: %v (recovery %+v)", err, e.s.Recovery())
	}
	e.check(map[pram.Off]int64{a: int64(len(model)), b: 0})
}

// TestRecoveryUnreadableBlockRestored: a block written since the last sync
// that recovery cannot read back (a device read error, after retries) goes
// back to its contents at the last sync, still intact in the quarantine.
// Before, it was left as it was and the next epoch freed the synced copy:
// the block read EIO for good, though its contents at the last sync were
// on the disk.
func TestRecoveryUnreadableBlockRestored(t *testing.T) {
	cd := NewCrashDevice(4 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd})
	a := e.newFile(1)
	old := pattern(1, 0, 8*4096)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, 0, old) })
	if err := e.write(a, 4096, pattern(2, 4096, 4096)); err != nil { // copy-on-write of block 1
		t.Fatal(err)
	}
	sp, err := e.s.lookup(a, 1)
	if err != nil || sp.disk == 0 {
		t.Fatalf("block 1: %+v %v", sp, err)
	}
	at := int64(sp.disk) * 4096
	fd := NewFaultDevice(cd.Reopen(), InRange(OpRead, at, at+4096, FaultEIO))
	e.crash(fd)
	if rep := e.s.Recovery(); rep.Checked != 1 || rep.Restored != 1 {
		t.Fatalf("recovery %+v, want the unreadable block restored", rep)
	}
	if !e.logged("cannot read it back") {
		t.Fatalf("the read error is not logged: %q", e.logs)
	}
	if got, err := e.read(a, 0, len(old)); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("after recovery: %v (want the contents of the last sync)", err)
	}
	e.check(map[pram.Off]int64{a: int64(len(old))})
}
