package conquest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestTmpfile: an O_TMPFILE file has no links, is an orphan in use, keeps
// its data, and gets a name through Link; until then no directory lists it.
func TestTmpfile(t *testing.T) {
	fs, _ := newTestFS(t)
	d := mkdir(t, fs, RootIno, "d")
	before, err := fs.GetAttr(d.Ino)
	must(t, err)
	at, h, err := fs.CreateTmpfile(d.Ino, 0o640, O_RDWR, user)
	must(t, err)
	if at.Nlink != 0 || at.Mode != S_IFREG|0o640 || at.Uid != user.Uid || at.Gid != user.Gid {
		t.Fatalf("tmpfile attr %+v", at)
	}
	data := pattern(3<<20, 7) // crosses the threshold: moves to disk
	_, err = fs.Write(at.Ino, h, 0, data, false)
	must(t, err)
	if u := fs.Usage(); u.Orphans != 1 {
		t.Fatalf("usage reports %d orphans", u.Orphans)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check with an open tmpfile: %v", errs)
	}
	after, err := fs.GetAttr(d.Ino)
	must(t, err)
	if after.Mtime != before.Mtime || after.Nlink != 2 {
		t.Fatalf("directory changed by O_TMPFILE: %+v, was %+v", after, before)
	}

	linked, err := fs.Link(at.Ino, d.Ino, "named")
	must(t, err)
	if linked.Nlink != 1 {
		t.Fatalf("nlink %d after linking a tmpfile", linked.Nlink)
	}
	if got := lookup(t, fs, d.Ino, "named"); got.Ino != at.Ino {
		t.Fatalf("lookup found inode %d, want %d", got.Ino, at.Ino)
	}
	if u := fs.Usage(); u.Orphans != 0 {
		t.Fatalf("linked tmpfile still counted as an orphan (%d)", u.Orphans)
	}
	fs.Release(at.Ino, h)
	fs.Forget(at.Ino, 2) // the tmpfile's reference and the link's
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after linking: %v", errs)
	}
	buf := make([]byte, len(data))
	h2, err := fs.Open(at.Ino, 0)
	must(t, err)
	n, err := fs.Read(at.Ino, h2, 0, buf)
	if err != nil || n != len(data) || !bytes.Equal(buf, data) {
		t.Fatalf("reading the linked tmpfile: %d, %v", n, err)
	}
	fs.Release(at.Ino, h2)
}

// TestTmpfileFreed: a tmpfile never linked is freed at its last close and
// forget, and leaves the heap as it was.
func TestTmpfileFreed(t *testing.T) {
	fs, _ := newTestFS(t)
	base := fs.h.Stats()
	at, h, err := fs.CreateTmpfile(RootIno, 0o600, O_RDWR, user)
	must(t, err)
	_, err = fs.Write(at.Ino, h, 0, pattern(100000, 2), false)
	must(t, err)
	fs.Release(at.Ino, h)
	fs.Forget(at.Ino, 1)
	if _, err := fs.GetAttr(at.Ino); err == nil {
		t.Fatal("tmpfile not freed after its last close and forget")
	}
	if _, err := fs.Link(at.Ino, RootIno, "late"); err == nil {
		t.Fatal("a freed tmpfile was linked")
	}
	if st := fs.h.Stats(); st.UsedBytes != base.UsedBytes || st.Objects != base.Objects {
		t.Fatalf("heap %d bytes / %d objects, was %d / %d", st.UsedBytes, st.Objects, base.UsedBytes, base.Objects)
	}
}

// TestTmpfileCrash: a tmpfile open at a crash is freed by the next Open.
func TestTmpfileCrash(t *testing.T) {
	fs, env := newTestFS(t)
	base := fs.h.Stats()
	at, h, err := fs.CreateTmpfile(RootIno, 0o600, O_RDWR, user)
	must(t, err)
	_, err = fs.Write(at.Ino, h, 0, pattern(2<<20, 3), false)
	must(t, err)
	must(t, fs.a.Abandon()) // kill -9
	env.current = nil
	fs = env.open()
	if _, err := fs.GetAttr(at.Ino); err == nil {
		t.Fatal("tmpfile survived the restart")
	}
	found := false
	for _, l := range env.logs {
		found = found || strings.Contains(l, "freed 1 orphan")
	}
	if !found {
		t.Fatalf("no orphan message in %q", env.logs)
	}
	if st := fs.h.Stats(); st.UsedBytes != base.UsedBytes {
		t.Fatalf("heap used %d, was %d", st.UsedBytes, base.UsedBytes)
	}
}

// TestTmpfileInRemovedDir: O_TMPFILE in a removed directory is EPERM (as on
// ext4), and in a file ENOTDIR.
func TestTmpfileInRemovedDir(t *testing.T) {
	fs, _ := newTestFS(t)
	d := mkdir(t, fs, RootIno, "d")
	must(t, fs.Rmdir(RootIno, "d"))
	if _, _, err := fs.CreateTmpfile(d.Ino, 0o600, O_RDWR, user); !errors.Is(err, ErrPerm) {
		t.Fatalf("in a removed directory: %v", err)
	}
	f := create(t, fs, RootIno, "f", nil)
	if _, _, err := fs.CreateTmpfile(f.Ino, 0o600, O_RDWR, user); !errors.Is(err, ErrNotDir) {
		t.Fatalf("in a file: %v", err)
	}
}

// TestTmpfileLinkedSurvivesCrash: an O_TMPFILE file given a name by
// linkat survives kill -9 with its data; one never linked is freed.
func TestTmpfileLinkedSurvivesCrash(t *testing.T) {
	fs, env := newTestFS(t)
	base := fs.h.Stats()
	at, h, err := fs.CreateTmpfile(RootIno, 0o600, O_RDWR, user)
	must(t, err)
	data := pattern(10000, 3)
	_, err = fs.Write(at.Ino, h, 0, data, false)
	must(t, err)
	_, err = fs.Link(at.Ino, RootIno, "t")
	must(t, err)
	at2, h2, err := fs.CreateTmpfile(RootIno, 0o600, O_RDWR, user)
	must(t, err)
	_, err = fs.Write(at2.Ino, h2, 0, data, false)
	must(t, err)
	must(t, fs.a.Abandon())
	env.current = nil
	fs = env.open()
	got := lookup(t, fs, RootIno, "t")
	if got.Nlink != 1 || !bytes.Equal(readAll(t, fs, got.Ino), data) {
		t.Fatalf("linked tmpfile after crash: nlink %d", got.Nlink)
	}
	if _, err := fs.GetAttr(at2.Ino); err == nil {
		t.Fatalf("unlinked tmpfile survived the crash")
	}
	must(t, fs.Unlink(RootIno, "t"))
	fs.Forget(got.Ino, 1)
	if st := fs.h.Stats(); st.UsedBytes != base.UsedBytes {
		t.Fatalf("heap used %d, was %d", st.UsedBytes, base.UsedBytes)
	}
}
