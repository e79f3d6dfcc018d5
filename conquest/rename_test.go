package conquest

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestRename(t *testing.T) {
	fs, env := newTestFS(t)
	a := mkdir(t, fs, RootIno, "a")
	b := mkdir(t, fs, RootIno, "b")
	f := create(t, fs, a.Ino, "f", []byte("F"))
	g := create(t, fs, b.Ino, "g", []byte("G"))
	sub := mkdir(t, fs, a.Ino, "sub")
	deep := mkdir(t, fs, sub.Ino, "deep")
	empty := mkdir(t, fs, b.Ino, "empty")
	full := mkdir(t, fs, b.Ino, "full")
	create(t, fs, full.Ino, "x", nil)

	// Errors.
	mustErr(t, fs.Rename(a.Ino, "missing", b.Ino, "x", 0), ErrNotFound)
	mustErr(t, fs.Rename(a.Ino, "sub", deep.Ino, "x", 0), ErrInvalid)
	mustErr(t, fs.Rename(a.Ino, "sub", sub.Ino, "x", 0), ErrInvalid)
	mustErr(t, fs.Rename(RootIno, "a", deep.Ino, "x", 0), ErrInvalid)
	mustErr(t, fs.Rename(a.Ino, "sub", b.Ino, "g", 0), ErrNotDir)
	mustErr(t, fs.Rename(a.Ino, "f", b.Ino, "empty", 0), ErrIsDir)
	mustErr(t, fs.Rename(a.Ino, "sub", b.Ino, "full", 0), ErrNotEmpty)
	mustErr(t, fs.Rename(a.Ino, "f", b.Ino, "g", RenameNoReplace), ErrExists)
	mustErr(t, fs.Rename(a.Ino, "f", b.Ino, "nothing", RenameExchange), ErrNotFound)
	mustErr(t, fs.Rename(a.Ino, "f", b.Ino, "g", RenameExchange|RenameNoReplace), ErrInvalid)
	mustErr(t, fs.Rename(a.Ino, "f", b.Ino, "g", RenameWhiteout), ErrInvalid)
	mustErr(t, fs.Rename(a.Ino, "f", f.Ino, "g", 0), ErrNotDir)
	mustErr(t, fs.Rename(a.Ino, "f", b.Ino, "", 0), ErrInvalid)
	mustErr(t, fs.Rename(a.Ino, ".", b.Ino, "x", 0), ErrBusy)

	// Same name and other links of the same inode: no-op.
	must(t, fs.Rename(a.Ino, "f", a.Ino, "f", 0))
	_, err := fs.Link(f.Ino, a.Ino, "f2")
	must(t, err)
	must(t, fs.Rename(a.Ino, "f", a.Ino, "f2", 0))
	if n := names(t, fs, a.Ino); n["f"] != f.Ino || n["f2"] != f.Ino {
		t.Fatalf("rename onto a hard link of itself changed the names: %v", n)
	}
	must(t, fs.Unlink(a.Ino, "f2"))

	// File over file across directories: the old target is gone.
	must(t, fs.Rename(a.Ino, "f", b.Ino, "g", 0))
	if n := names(t, fs, a.Ino); n["f"] != 0 {
		t.Fatalf("source name still present")
	}
	if at := lookup(t, fs, b.Ino, "g"); at.Ino != f.Ino || string(readAll(t, fs, at.Ino)) != "F" {
		t.Fatalf("target is %+v", at)
	}
	fs.Forget(g.Ino, 1)
	if _, err := fs.GetAttr(g.Ino); err == nil {
		t.Fatalf("replaced file %d not freed after its last reference", g.Ino)
	}

	// Directory over an empty directory across parents: link counts move.
	must(t, fs.Rename(a.Ino, "sub", b.Ino, "empty", 0))
	if at, _ := fs.GetAttr(a.Ino); at.Nlink != 2 {
		t.Fatalf("old parent nlink %d", at.Nlink)
	}
	if at, _ := fs.GetAttr(b.Ino); at.Nlink != 4 { // empty replaced by sub, plus full
		t.Fatalf("new parent nlink %d", at.Nlink)
	}
	if at := lookup(t, fs, sub.Ino, ".."); at.Ino != b.Ino {
		t.Fatalf("moved dir's .. is %d", at.Ino)
	}
	if at, _ := fs.GetAttr(empty.Ino); at.Nlink != 0 {
		t.Fatalf("replaced dir nlink %d", at.Nlink)
	}
	fs.Forget(empty.Ino, 1)

	// Exchange a file and a directory across parents.
	h := create(t, fs, a.Ino, "h", []byte("H"))
	must(t, fs.Rename(a.Ino, "h", b.Ino, "empty", RenameExchange))
	if at := lookup(t, fs, a.Ino, "h"); at.Ino != sub.Ino {
		t.Fatalf("after exchange a/h is %d", at.Ino)
	}
	if at := lookup(t, fs, b.Ino, "empty"); at.Ino != h.Ino {
		t.Fatalf("after exchange b/empty is %d", at.Ino)
	}
	if at := lookup(t, fs, sub.Ino, ".."); at.Ino != a.Ino {
		t.Fatalf("exchanged dir's .. is %d", at.Ino)
	}
	if at, _ := fs.GetAttr(a.Ino); at.Nlink != 3 {
		t.Fatalf("a nlink %d after exchange", at.Nlink)
	}
	if at, _ := fs.GetAttr(b.Ino); at.Nlink != 3 {
		t.Fatalf("b nlink %d after exchange", at.Nlink)
	}
	// Exchange a directory with its own descendant's parent: EINVAL.
	mustErr(t, fs.Rename(a.Ino, "h", sub.Ino, "deep", RenameExchange), ErrInvalid)
	// Plain rename within a directory, and NOREPLACE to a free name.
	must(t, fs.Rename(a.Ino, "h", a.Ino, "renamed", RenameNoReplace))
	fs = env.reopen(fs)
	if at := lookup(t, fs, a.Ino, "renamed"); at.Ino != sub.Ino {
		t.Fatalf("renamed is %d", at.Ino)
	}
	if at := lookup(t, fs, sub.Ino, "deep"); at.Ino != deep.Ino {
		t.Fatalf("deep is %d", at.Ino)
	}
}

// TestRenameAtomicForReaders: while one goroutine keeps renaming files over
// a name, readers looking the name up must always find it.
func TestRenameAtomicForReaders(t *testing.T) {
	fs, _ := newTestFS(t)
	create(t, fs, RootIno, "target", []byte("0"))
	var stop atomic.Bool
	var wg sync.WaitGroup
	var misses, lookups atomic.Int64
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				at, err := fs.Lookup(RootIno, "target")
				lookups.Add(1)
				if err != nil {
					misses.Add(1)
					continue
				}
				fs.Forget(at.Ino, 1)
			}
		}()
	}
	for i := 0; i < 300; i++ {
		at := create(t, fs, RootIno, "tmp", []byte(sprintf("%d", i)))
		fs.Forget(at.Ino, 1)
		must(t, fs.Rename(RootIno, "tmp", RootIno, "target", 0))
	}
	stop.Store(true)
	wg.Wait()
	if misses.Load() > 0 {
		t.Fatalf("%d of %d lookups found the target missing", misses.Load(), lookups.Load())
	}
}

func TestRenameWhiteout(t *testing.T) {
	fs, _ := newTestFS(t)
	a := mkdir(t, fs, RootIno, "a")
	b := mkdir(t, fs, RootIno, "b")
	f := create(t, fs, a.Ino, "f", []byte("F"))
	create(t, fs, b.Ino, "g", []byte("G"))
	d := mkdir(t, fs, a.Ino, "d")
	owner := Cred{Uid: 1000, Gid: 100}

	mustErr(t, fs.RenameWhiteout(a.Ino, "f", b.Ino, "g", RenameExchange, owner), ErrInvalid)
	mustErr(t, fs.RenameWhiteout(a.Ino, "f", b.Ino, "g", RenameNoReplace, owner), ErrExists)
	mustErr(t, fs.RenameWhiteout(a.Ino, "missing", b.Ino, "x", 0, owner), ErrNotFound)
	if n := names(t, fs, a.Ino); n["f"] != f.Ino {
		t.Fatalf("a failed whiteout rename changed the source: %v", n)
	}

	must(t, fs.RenameWhiteout(a.Ino, "f", b.Ino, "g", 0, owner))
	if at := lookup(t, fs, b.Ino, "g"); at.Ino != f.Ino {
		t.Fatalf("target is ino %d, want %d", at.Ino, f.Ino)
	}
	wo := lookup(t, fs, a.Ino, "f")
	if wo.Ino == f.Ino || wo.Mode != S_IFCHR || wo.Rdev != 0 || wo.Nlink != 1 || wo.Uid != 1000 || wo.Gid != 100 {
		t.Fatalf("whiteout: %+v", wo)
	}
	// A directory: parents' link counts move, the whiteout is no directory.
	na, nb := lookup(t, fs, RootIno, "a").Nlink, lookup(t, fs, RootIno, "b").Nlink
	must(t, fs.RenameWhiteout(a.Ino, "d", b.Ino, "d", 0, owner))
	if got := lookup(t, fs, RootIno, "a").Nlink; got != na-1 {
		t.Errorf("old parent nlink %d, want %d", got, na-1)
	}
	if got := lookup(t, fs, RootIno, "b").Nlink; got != nb+1 {
		t.Errorf("new parent nlink %d, want %d", got, nb+1)
	}
	if at := lookup(t, fs, b.Ino, "d"); at.Ino != d.Ino {
		t.Fatalf("moved directory is ino %d, want %d", at.Ino, d.Ino)
	}
	if wo := lookup(t, fs, a.Ino, "d"); wo.Mode != S_IFCHR {
		t.Fatalf("whiteout of the directory: %+v", wo)
	}
}

// TestRenameDirRaces: renames of two directories into each other in opposite
// directions, exchanges, mkdirs and rmdirs race; the tree must stay a tree.
func TestRenameDirRaces(t *testing.T) {
	fs, _ := newTestFS(t)
	a := mkdir(t, fs, RootIno, "a")
	b := mkdir(t, fs, RootIno, "b")
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 3000; i++ {
				switch (g + i) % 6 {
				case 0:
					fs.Rename(RootIno, "a", b.Ino, "a", 0)
				case 1:
					fs.Rename(RootIno, "b", a.Ino, "b", 0)
				case 2:
					fs.Rename(b.Ino, "a", RootIno, "a", 0)
				case 3:
					fs.Rename(a.Ino, "b", RootIno, "b", 0)
				case 4:
					fs.Mkdir(a.Ino, "x", 0o755, user)
					fs.Rename(a.Ino, "x", b.Ino, "x", RenameExchange)
					fs.Rename(a.Ino, "x", b.Ino, "x", 0)
				case 5:
					fs.Rmdir(b.Ino, "x")
					fs.Rmdir(a.Ino, "x")
				}
			}
		}(g)
	}
	wg.Wait()
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatal(errs)
	}
}
