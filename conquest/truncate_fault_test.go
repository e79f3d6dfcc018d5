package conquest

import (
	"bytes"
	"strings"
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
