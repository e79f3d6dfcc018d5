package conquest

import (
	"bytes"
	"strings"
	"testing"

	"conquest/internal/racetest"
	"conquest/pram"
)

// TestUnlinkWhileOpen: an unlinked file keeps its data while open and is
// freed at the last close and forget.
func TestUnlinkWhileOpen(t *testing.T) {
	fs, _ := newTestFS(t)
	base := fs.h.Stats()
	data := pattern(1<<20, 3)
	at, h, err := fs.Create(RootIno, "f", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	_, err = fs.Write(at.Ino, h, 0, data, false)
	must(t, err)
	must(t, fs.Unlink(RootIno, "f"))
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check with an open orphan: %v", errs)
	}
	got, err := fs.GetAttr(at.Ino)
	must(t, err)
	if got.Nlink != 0 || got.Size != 1<<20 {
		t.Fatalf("orphan attr %+v", got)
	}
	buf := make([]byte, 1<<20)
	n, err := fs.Read(at.Ino, h, 0, buf)
	if err != nil || n != len(buf) || !bytes.Equal(buf, data) {
		t.Fatalf("reading the orphan: %d, %v", n, err)
	}
	_, err = fs.Write(at.Ino, h, 1<<20, []byte("more"), false)
	must(t, err)
	if u := fs.Usage(); u.Orphans != 1 {
		t.Fatalf("usage reports %d orphans", u.Orphans)
	}
	fs.Release(at.Ino, h)
	if _, err := fs.GetAttr(at.Ino); err != nil {
		t.Fatalf("freed while the kernel still references it: %v", err)
	}
	fs.Forget(at.Ino, 1)
	if _, err := fs.GetAttr(at.Ino); err == nil {
		t.Fatalf("not freed after last close and forget")
	}
	if st := fs.h.Stats(); st.UsedBytes != base.UsedBytes || st.Objects != base.Objects {
		t.Fatalf("heap %d bytes / %d objects, was %d / %d", st.UsedBytes, st.Objects, base.UsedBytes, base.Objects)
	}
}

// TestOrphanAfterCrash: unlink while open, crash, reopen: Open frees the
// orphan, says so, and Check is clean.
func TestOrphanAfterCrash(t *testing.T) {
	fs, env := newTestFS(t)
	base := fs.h.Stats()
	at, h, err := fs.Create(RootIno, "f", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	_, err = fs.Write(at.Ino, h, 0, pattern(3<<20, 1), false)
	must(t, err)
	d := mkdir(t, fs, RootIno, "d")
	must(t, fs.Rmdir(RootIno, "d")) // a removed directory still referenced
	must(t, fs.Unlink(RootIno, "f"))
	must(t, fs.a.Abandon()) // kill -9
	env.current = nil
	fs = env.open()
	found := false
	for _, l := range env.logs {
		if strings.Contains(l, "freed 2 orphans") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no orphan message in %q", env.logs)
	}
	if _, err := fs.GetAttr(at.Ino); err == nil {
		t.Fatalf("orphan file survived the restart")
	}
	if _, err := fs.GetAttr(d.Ino); err == nil {
		t.Fatalf("orphan directory survived the restart")
	}
	if st := fs.h.Stats(); st.UsedBytes != base.UsedBytes {
		t.Fatalf("heap used %d, was %d", st.UsedBytes, base.UsedBytes)
	}
	_ = h
}

// TestCloseFreesOrphans: a clean unmount frees orphans too.
func TestCloseFreesOrphans(t *testing.T) {
	fs, env := newTestFS(t)
	at := create(t, fs, RootIno, "f", pattern(10000, 1))
	must(t, fs.Unlink(RootIno, "f"))
	fs = env.reopen(fs)
	if _, err := fs.GetAttr(at.Ino); err == nil {
		t.Fatalf("orphan survived a clean close")
	}
	for _, l := range env.logs {
		if strings.Contains(l, "orphans") {
			t.Fatalf("clean reopen reported orphans: %q", l)
		}
	}
}

// TestLargeUnlinkAndTruncateCrash crashes at every journaled store of the
// multi-Tx free of a large file (unlink, then truncate), and checks that
// after reopen the operation happened entirely or not at all, with nothing
// leaked.
func TestLargeUnlinkAndTruncateCrash(t *testing.T) {
	_, env := newTestFSOpt(t, fsOpt{size: 8 << 20, noCheck: true})
	fs := env.current
	const size = 3 << 20 // 768 blocks: several free batches
	f := create(t, fs, RootIno, "f", pattern(size, 7))
	fs.Forget(f.Ino, 1)
	must(t, fs.Close())
	env.current = nil
	img := readImage(t, env.path)

	ops := []struct {
		name  string
		run   func(fs *FS) error
		after func(t *testing.T, fs *FS)
	}{
		{"unlink", func(fs *FS) error { return fs.Unlink(RootIno, "f") }, func(t *testing.T, fs *FS) {
			if _, err := fs.Lookup(RootIno, "f"); err == nil {
				t.Fatal("file still there")
			}
		}},
		{"truncate", func(fs *FS) error {
			_, err := fs.SetAttr(f.Ino, SetAttr{Valid: SetSize, Size: 5000}, user)
			return err
		}, func(t *testing.T, fs *FS) {
			at, err := fs.GetAttr(f.Ino)
			must(t, err)
			if at.Size != 5000 || at.Blocks != 16 {
				t.Fatalf("after truncate: size %d blocks %d", at.Size, at.Blocks)
			}
		}},
	}
	for _, op := range ops {
		restoreImage(t, env.path, img)
		fs := env.open()
		k := countStores(fs, func() { must(t, op.run(fs)) })
		must(t, fs.Close())
		if k < 3*freeBatch {
			t.Fatalf("%s: only %d stores", op.name, k)
		}
		// The crash points thin out along the free: every store at
		// first, then steps of 1+n/12 (1+n/6 under -race, where this
		// test took 41 s).
		step := 12
		if racetest.Reduced(t) {
			step = 6
		}
		for n := 1; n <= k; n += 1 + n/step {
			restoreImage(t, env.path, img)
			fs := env.open()
			if !crashDuring(fs, n, func() { _ = op.run(fs) }) {
				t.Fatalf("%s: no crash at %d/%d", op.name, n, k)
			}
			fs = env.open()
			if errs := fs.Check(); len(errs) > 0 {
				t.Fatalf("%s, crash at %d/%d: %v", op.name, n, k, errs[:min(len(errs), 5)])
			}
			at, err := fs.GetAttr(f.Ino)
			switch {
			case err == nil && at.Size == size && at.Nlink == 1 && at.Blocks == size/512:
				// before
			case err == nil && op.name == "truncate" && at.Size == 5000 && at.Blocks == 16:
				// after
			case err != nil && op.name == "unlink":
				// after
			default:
				t.Fatalf("%s, crash at %d/%d: %+v, %v", op.name, n, k, at, err)
			}
			if err == nil && at.Size == size {
				if got := readAll(t, fs, f.Ino); !bytes.Equal(got, pattern(size, 7)) {
					t.Fatalf("%s, crash at %d/%d: contents changed", op.name, n, k)
				}
			}
			must(t, fs.a.Abandon())
			env.current = nil
		}
		restoreImage(t, env.path, img)
		fs = env.open()
		must(t, op.run(fs))
		op.after(t, fs)
		if errs := fs.Check(); len(errs) > 0 {
			t.Fatal(errs)
		}
		must(t, fs.Close())
		env.current = nil
	}
}

// TestRecoveryMessage: a crash inside a transaction is rolled back by the
// next Open, which says so through Logf.
func TestRecoveryMessage(t *testing.T) {
	fs, env := newTestFS(t)
	mkdir(t, fs, RootIno, "before")
	if !crashDuring(fs, 5, func() { _, _ = fs.Mkdir(RootIno, "during", 0o755, user) }) {
		t.Fatal("no crash")
	}
	env.current = nil
	fs = env.open()
	found := false
	for _, l := range env.logs {
		found = found || strings.Contains(l, "recovered 4 journal records")
	}
	if !found {
		t.Fatalf("no recovery message in %q", env.logs)
	}
	lookup(t, fs, RootIno, "before")
	if _, err := fs.Lookup(RootIno, "during"); err == nil {
		t.Fatal("the interrupted mkdir happened")
	}
}

// TestStuckOrphanDoesNotBlockOpen: an unlinked file whose storage cannot
// be freed (a damaged xattr pointer) stays on the orphan list at a crash;
// the next Open frees the other orphans, logs it and mounts, and Repair
// then frees it.
func TestStuckOrphanDoesNotBlockOpen(t *testing.T) {
	fs, env := newTestFS(t)
	stuck, h1, err := fs.Create(RootIno, "stuck", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	must(t, fs.SetXattr(stuck.Ino, "user.y", []byte("v"), 0))
	other, h2, err := fs.Create(RootIno, "other", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	_, err = fs.Write(other.Ino, h2, 0, pattern(50000, 5), false)
	must(t, err)
	must(t, fs.Unlink(RootIno, "stuck"))
	must(t, fs.Unlink(RootIno, "other"))
	in, _ := fs.inode(stuck.Ino)
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iXattr, 0xff0000) })
	_, _ = h1, h2
	must(t, fs.a.Abandon()) // kill -9 with both open
	env.current = nil
	fs = env.open()
	if _, err := fs.GetAttr(other.Ino); err == nil {
		t.Fatal("the undamaged orphan survived the restart")
	}
	if _, err := fs.GetAttr(stuck.Ino); err != nil {
		t.Fatalf("the damaged orphan is gone: %v", err)
	}
	logged := false
	for _, l := range env.logs {
		logged = logged || strings.Contains(l, "could not be freed")
	}
	if !logged {
		t.Fatalf("Open did not report the orphan it could not free: %q", env.logs)
	}
	rep, err := fs.Repair(RepairOptions{})
	must(t, err)
	if len(rep.Remaining) > 0 || !strings.Contains(fixesText(rep), "unlinked file that was never freed: freed it") {
		t.Fatalf("repair made %s and left %v", fixesText(rep), rep.Remaining)
	}
	if _, err := fs.GetAttr(stuck.Ino); err == nil {
		t.Fatal("repair did not free the damaged orphan")
	}
}

// An unlinked file whose freeing fails for lack of space (freeing a large
// file can take an arena page for the disk's free map) stays on the orphan
// list, and the next free that succeeds, which may have made the room it
// needed, frees it. Close passes over the orphan list until a pass frees
// nothing, so an orphan that needs the room another one holds is freed
// there too, in either order.
func TestFreeRetriedAfterNoSpace(t *testing.T) {
	fs, env := newTestFS(t)
	a := create(t, fs, RootIno, "a", pattern(5000, 1))
	b := create(t, fs, RootIno, "b", pattern(5000, 2))
	room := false
	fs.freeHook = func(ino Ino) error {
		if ino == a.Ino && !room {
			return ErrNoSpace
		}
		return nil
	}
	must(t, fs.Unlink(RootIno, "a"))
	fs.Forget(a.Ino, 1)
	if !fs.stuck {
		t.Fatal("a free that failed with ENOSPC left no note to retry it")
	}
	if _, err := fs.GetAttr(a.Ino); err != nil {
		t.Fatalf("the orphan that could not be freed is gone: %v", err)
	}
	room = true
	must(t, fs.Unlink(RootIno, "b"))
	fs.Forget(b.Ino, 1)
	if fs.stuck {
		t.Error("still stuck after a free made room")
	}
	if _, err := fs.GetAttr(a.Ino); err == nil {
		t.Error("the stuck orphan was not freed after a free made room")
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check: %v", errs)
	}

	for _, order := range [][2]string{{"c", "d"}, {"d", "c"}} {
		c := create(t, fs, RootIno, "c", pattern(5000, 3))
		d := create(t, fs, RootIno, "d", pattern(5000, 4))
		dFreed := false
		fs.freeHook = func(ino Ino) error {
			switch {
			case ino == d.Ino:
				dFreed = true
			case ino == c.Ino && !dFreed:
				return ErrNoSpace
			}
			return nil
		}
		// Unlinked while the kernel still holds them: freed at Close.
		must(t, fs.Unlink(RootIno, order[0]))
		must(t, fs.Unlink(RootIno, order[1]))
		fs = env.reopen(fs)
		if env.logged("freeing orphans at close") || env.logged("freed") {
			t.Errorf("unlinked %v: Close left orphans for Open: %q", order, env.logs)
		}
		if _, err := fs.GetAttr(c.Ino); err == nil {
			t.Errorf("unlinked %v: c survived Close", order)
		}
	}
}
