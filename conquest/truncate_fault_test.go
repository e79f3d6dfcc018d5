package conquest

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"

	"conquest/diskstore"
)

// TestTruncateFaultFailsWhole: a cut of a large disk file, made in several
// transactions, either fails whole or takes effect whole. An outside review
// (a fault-injecting file system under the disk image) saw truncate(2) of a
// 30 MiB file fail with EIO in the cut's last step, which zeroes the tail of
// the new last block, and keep its new size: stat showed the old size
// (the kernel keeps it after a failed SETATTR) and reads ended at the new
// one. Now the tail is zeroed first, before the size is published, and a
// later step that fails leaves only storage to free, which the file's next
// change finishes first (finishCutLocked), so old bytes past the new size
// never show, not even through a write that grows the file again.
func TestTruncateFaultFailsWhole(t *testing.T) {
	for _, mode := range []diskstore.Durability{diskstore.DurableOnProcessCrash, diskstore.GatherInMemory} {
		t.Run(mode.String(), func(t *testing.T) { testTruncateFault(t, mode) })
	}
}

func testTruncateFault(t *testing.T, mode diskstore.Durability) {
	mem := diskstore.NewMemDevice(64 << 20)
	fs, env := newTestFSOpt(t, fsOpt{dev: mem, diskSize: 64 << 20, diskOpts: diskstore.Options{Durability: mode}})
	var fd *diskstore.FaultDevice
	env.wrap = func(d diskstore.Device) diskstore.Device { fd = diskstore.NewFaultDevice(d, nil); return fd }
	fs = env.reopen(fs)
	defer func() {
		if t.Failed() {
			t.Log(env.logs)
		}
	}()
	const size = 3 << 20
	data := pattern(size, 7)
	ino := makeFile(t, fs, "f", data)
	if !isLarge(t, fs, ino) {
		t.Fatal("not on disk")
	}
	if step := fs.diskStepBytes(); step*2 >= size {
		t.Fatalf("a step of %d bytes cuts the file in one transaction: the test needs several", step)
	}
	cut := uint64(300_001) // not a block boundary, and the file stays on disk
	if diskstore.ToArena(int64(cut), fs.threshold) {
		t.Fatalf("a cut to %d would move the file back into the arena", cut)
	}

	// The disk fails every write: the truncate fails and changes nothing.
	fd.SetInjector(diskstore.FromNth(diskstore.OpWrite, 1, diskstore.FaultEIO))
	_, err := fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: cut}, user)
	mustErr(t, err, ErrIO)
	fd.SetInjector(nil)
	if a, _ := fs.GetAttr(ino); a.Size != size {
		t.Fatalf("a failed truncate left the size %d, want %d", a.Size, size)
	}
	if !bytes.Equal(readAll(t, fs, ino), data) {
		t.Fatal("a failed truncate changed the data")
	}
	if u := fs.Usage(); u.Orphans != 0 {
		t.Fatalf("a failed truncate left %d orphans", u.Orphans)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after a failed truncate: %v", errs)
	}
	fs = env.reopen(fs)
	if a, _ := fs.GetAttr(ino); a.Size != size || !bytes.Equal(readAll(t, fs, ino), data) {
		t.Fatalf("after a remount: size %d, want %d and the same data", a.Size, size)
	}

	// The tail is written, the size published, and a later step fails
	// (an error of the arena's, or the last step's device write where the
	// store writes the same zeros again): the truncate has taken effect
	// and says so; what is left past the new size is freed before the
	// file's next change, and reads as zeros when the file grows over it.
	steps := 0
	fs.cutHook = func(Ino) error {
		if steps++; steps == 3 {
			return ErrIO
		}
		return nil
	}
	at, err := fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: cut}, user)
	fs.cutHook = nil
	must(t, err)
	if at.Size != cut {
		t.Fatalf("truncate returned size %d, want %d", at.Size, cut)
	}
	if !env.logged("freeing its storage past its size") {
		t.Fatal("the last step did not fail: the test did not reach the case")
	}
	if u := fs.Usage(); u.Orphans != 1 {
		t.Fatalf("%d orphans, want the cut file's", u.Orphans)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check with the cut unfinished: %v", errs)
	}
	h := openRW(t, fs, ino, O_RDWR)
	end := int64(size - 100)
	if _, err := fs.Write(ino, h, end, []byte("end"), false); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, end+3)
	copy(want, data[:cut])
	copy(want[end:], "end")
	if got := readFile(t, fs, ino, h); !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("after the grow: %d bytes, first difference at %d (want zeros past %d)", len(got), i, cut)
	}
	fs.Release(ino, h)
	if u := fs.Usage(); u.Orphans != 0 {
		t.Fatalf("%d orphans after the file's next change", u.Orphans)
	}
	fs = env.reopen(fs)
	if got := readAll(t, fs, ino); !bytes.Equal(got, want) {
		t.Fatal("differs after a remount")
	}
	for _, l := range env.logs {
		if strings.Contains(l, "damage") {
			t.Fatalf("logged: %s", l)
		}
	}
}

// TestTruncateCutWritesOnce: a cut in several transactions writes the new
// last block once (its tail zeroed before the size is published), and a
// shrink does not first write out the gathered bytes it cuts away: a
// review counted 3 writes of 532,480 bytes and 3 syncs in GatherInMemory
// mode where 1 write of 4 KiB had done, and a shrink that failed with
// ENOSPC on a full disk for it.
func TestTruncateCutWritesOnce(t *testing.T) {
	for _, mode := range []diskstore.Durability{diskstore.DurableOnProcessCrash, diskstore.GatherInMemory} {
		t.Run(mode.String(), func(t *testing.T) {
			mem := diskstore.NewMemDevice(64 << 20)
			fs, env := newTestFSOpt(t, fsOpt{dev: mem, diskSize: 64 << 20, diskOpts: diskstore.Options{Durability: mode}})
			var fd *diskstore.FaultDevice
			env.wrap = func(d diskstore.Device) diskstore.Device { fd = diskstore.NewFaultDevice(d, nil); return fd }
			fs = env.reopen(fs)
			const size = 3 << 20
			data := pattern(size, 7)
			ino := makeFile(t, fs, "f", data)
			h := openRW(t, fs, ino, O_RDWR)
			if n, err := fs.Write(ino, h, size, pattern(512<<10, 9), false); err != nil || n != 512<<10 {
				t.Fatal(n, err)
			}
			var writes, bytesW, syncs atomic.Int64
			fd.SetInjector(diskstore.InjectorFunc(func(op diskstore.Op, off int64, n int) diskstore.FaultKind {
				switch op {
				case diskstore.OpWrite:
					writes.Add(1)
					bytesW.Add(int64(n))
				case diskstore.OpSync:
					syncs.Add(1)
				}
				return diskstore.FaultNone
			}))
			cut := uint64(300_001)
			if _, err := fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: cut}, user); err != nil {
				t.Fatal(err)
			}
			fd.SetInjector(nil)
			if w := writes.Load(); w != 1 || bytesW.Load() > int64(fs.ds.BlockSize()) {
				t.Errorf("the cut wrote %d times, %d bytes (%d syncs); want one block", w, bytesW.Load(), syncs.Load())
			}
			if got := readFile(t, fs, ino, h); !bytes.Equal(got, data[:cut]) {
				t.Fatal("wrong contents after the cut")
			}
			fs.Release(ino, h)
		})
	}
}

// TestTruncateGatheredOnFullDisk: a shrink of a file with gathered bytes
// past its new end succeeds on a full disk (it wrote them out first, and
// failed with ENOSPC, in a first version of the tail-first cut).
func TestTruncateGatheredOnFullDisk(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true, diskSize: 8 << 20, diskOpts: diskstore.Options{Durability: diskstore.GatherInMemory}})
	const size = 3 << 20
	data := pattern(size, 7)
	ino := makeFile(t, fs, "f", data)
	at, h, err := fs.Create(RootIno, "huge", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	var off int64
	for _, step := range []int64{64 << 10, 4 << 10} {
		for err = nil; err == nil; {
			if err = fs.Fallocate(at.Ino, off, step, 0); err == nil {
				off += step
			}
		}
		mustErr(t, err, ErrNoSpace)
	}
	fs.Release(at.Ino, h)
	hf := openRW(t, fs, ino, O_RDWR)
	if n, err := fs.Write(ino, hf, size, pattern(8<<10, 9), false); err != nil || n != 8<<10 {
		t.Fatal(n, err)
	}
	cut := uint64(300_001)
	a, err := fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: cut}, user)
	if err != nil {
		t.Fatalf("a shrinking truncate on a full disk: %v", err)
	}
	if a.Size != cut || !bytes.Equal(readFile(t, fs, ino, hf), data[:cut]) {
		t.Fatal("wrong contents")
	}
	fs.Release(ino, hf)
}

// TestCreateTruncFinishesCut: open(O_CREAT|O_TRUNC) of a file whose cut an
// error left unfinished (the kernel sends it as CREATE when the name is not
// cached) finishes the cut first, as every other change does; it left an
// arena file with a shrink cursor, which Check reported even after a
// remount (a review's test). The finished cut leaves no excuse in cutsLeft.
func TestCreateTruncFinishesCut(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true, diskSize: 64 << 20})
	defer func() {
		if t.Failed() {
			t.Log(env.logs)
		}
	}()
	ino := makeFile(t, fs, "f", pattern(3<<20, 7))
	// The last step fails, leaving less than a step to free: the O_TRUNC
	// then cuts in one transaction (moving the file back into the arena),
	// which is where the cursor was left behind.
	const cut = 40_001
	fs.cutHook = func(ino Ino) error {
		in, err := fs.inode(ino)
		if err == nil && in.u64(iDiskCur) <= fs.roundUp(cut)+fs.diskStepBytes() {
			return ErrIO
		}
		return err
	}
	_, err := fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: cut}, user)
	fs.cutHook = nil
	must(t, err)
	if _, left := fs.cutsLeft[ino]; !left {
		t.Fatal("the cut did not stop: the test did not reach the case")
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check with the cut pending: %v", errs)
	}
	_, h, err := fs.Create(RootIno, "f", 0o644, O_CREAT|O_RDWR|O_TRUNC, user)
	must(t, err)
	fs.Release(ino, h)
	if _, left := fs.cutsLeft[ino]; left {
		t.Error("cutsLeft still excuses the finished cut")
	}
	if u := fs.Usage(); u.Orphans != 0 {
		t.Errorf("%d orphans after the O_TRUNC", u.Orphans)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after the O_TRUNC: %v", errs)
	}
	fs = env.reopen(fs)
	if a, _ := fs.GetAttr(ino); a.Size != 0 {
		t.Fatalf("size %d after the O_TRUNC and a remount", a.Size)
	}
}
