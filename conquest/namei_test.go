package conquest

import (
	"bytes"
	"sort"
	"strings"
	"testing"

	"conquest/pram"
)

func TestNames(t *testing.T) {
	fs, _ := newTestFS(t)
	long := strings.Repeat("x", MaxName)
	create(t, fs, RootIno, long, nil)
	lookup(t, fs, RootIno, long)
	for _, c := range []struct {
		name string
		err  error
	}{{"", ErrInvalid}, {"a/b", ErrInvalid}, {long + "y", ErrNameTooLong}} {
		_, _, err := fs.Create(RootIno, c.name, 0o644, O_RDWR|O_CREAT, user)
		mustErr(t, err, c.err)
		_, err = fs.Mkdir(RootIno, c.name, 0o755, user)
		mustErr(t, err, c.err)
		_, err = fs.Lookup(RootIno, c.name)
		mustErr(t, err, c.err)
		_, err = fs.Symlink(RootIno, c.name, "t", user)
		mustErr(t, err, c.err)
	}
	_, err := fs.Lookup(RootIno, "missing")
	mustErr(t, err, ErrNotFound)
	f := create(t, fs, RootIno, "file", nil)
	_, err = fs.Lookup(f.Ino, "x")
	mustErr(t, err, ErrNotDir)
	_, err = fs.Mkdir(f.Ino, "x", 0o755, user)
	mustErr(t, err, ErrNotDir)
	_, err = fs.Mkdir(RootIno, "file", 0o755, user)
	mustErr(t, err, ErrExists)
	_, err = fs.Mknod(RootIno, "file", S_IFIFO|0o644, 0, user)
	mustErr(t, err, ErrExists)
}

func TestMkdirRmdirLinkCounts(t *testing.T) {
	fs, _ := newTestFS(t)
	a := mkdir(t, fs, RootIno, "a")
	if a.Nlink != 2 || a.Mode != S_IFDIR|0o755 || a.Uid != 1000 || a.Size != 4096 {
		t.Fatalf("new dir %+v", a)
	}
	mkdir(t, fs, a.Ino, "b")
	mkdir(t, fs, a.Ino, "c")
	create(t, fs, a.Ino, "f", nil)
	if at, _ := fs.GetAttr(a.Ino); at.Nlink != 4 {
		t.Fatalf("dir with two subdirs has nlink %d", at.Nlink)
	}
	if at, _ := fs.GetAttr(RootIno); at.Nlink != 3 {
		t.Fatalf("root nlink %d", at.Nlink)
	}
	mustErr(t, fs.Rmdir(RootIno, "a"), ErrNotEmpty)
	mustErr(t, fs.Rmdir(a.Ino, "f"), ErrNotDir)
	mustErr(t, fs.Unlink(a.Ino, "b"), ErrIsDir)
	mustErr(t, fs.Rmdir(a.Ino, "."), ErrInvalid)
	mustErr(t, fs.Rmdir(a.Ino, ".."), ErrNotEmpty)
	mustErr(t, fs.Rmdir(a.Ino, "zz"), ErrNotFound)
	must(t, fs.Rmdir(a.Ino, "b"))
	if at, _ := fs.GetAttr(a.Ino); at.Nlink != 3 {
		t.Fatalf("after rmdir nlink %d", at.Nlink)
	}
	// "." and ".." lookups.
	if at := lookup(t, fs, a.Ino, "."); at.Ino != a.Ino {
		t.Fatalf(". is %d", at.Ino)
	}
	if at := lookup(t, fs, a.Ino, ".."); at.Ino != RootIno {
		t.Fatalf(".. is %d", at.Ino)
	}
	if at := lookup(t, fs, RootIno, ".."); at.Ino != RootIno {
		t.Fatalf("root's .. is %d", at.Ino)
	}
	// A removed directory that is still referenced: empty, nothing can be created.
	c := lookup(t, fs, a.Ino, "c")
	h, err := fs.OpenDir(c.Ino)
	must(t, err)
	must(t, fs.Rmdir(a.Ino, "c"))
	at, err := fs.GetAttr(c.Ino)
	must(t, err)
	if at.Nlink != 0 {
		t.Fatalf("removed dir nlink %d", at.Nlink)
	}
	if n := names(t, fs, c.Ino); len(n) != 0 {
		t.Fatalf("removed dir lists %v", n)
	}
	_, _, err = fs.Create(c.Ino, "x", 0o644, O_CREAT, user)
	mustErr(t, err, ErrNotFound)
	_, err = fs.Lookup(c.Ino, "x")
	mustErr(t, err, ErrNotFound)
	fs.ReleaseDir(c.Ino, h)
	fs.Forget(c.Ino, 2)
	if _, err := fs.GetAttr(c.Ino); err == nil {
		t.Fatalf("removed dir still exists after the last reference")
	}
}

func TestReadDirCursors(t *testing.T) {
	fs, _ := newTestFS(t)
	d := mkdir(t, fs, RootIno, "d")
	want := []string{".", ".."}
	for i := 0; i < 300; i++ {
		n := sprintf("entry-%03d", i)
		create(t, fs, d.Ino, n, nil)
		want = append(want, n)
	}
	// Read in pieces of 7, resuming from each piece's last cursor.
	var got []string
	var first []uint64
	cursor := uint64(0)
	for {
		k := 0
		must(t, fs.ReadDir(d.Ino, cursor, func(name string, ino Ino, typ uint8, next uint64) bool {
			if k == 7 {
				return false
			}
			if name == "." && (ino != d.Ino || next != 1) || name == ".." && (ino != RootIno || next != 2) {
				t.Errorf("%s: ino %d next %d", name, ino, next)
			}
			if !strings.HasPrefix(name, ".") && typ != DT_REG {
				t.Errorf("%s: type %d", name, typ)
			}
			got = append(got, name)
			first = append(first, next)
			cursor = next
			k++
			return true
		}))
		if k == 0 {
			break
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("readdir in pieces: %d names, want %d", len(got), len(want))
	}
	// Entries removed and added during a scan: every entry present
	// throughout is returned exactly once.
	seen := map[string]int{}
	cursor = 0
	k := 0
	must(t, fs.ReadDir(d.Ino, 0, func(name string, ino Ino, typ uint8, next uint64) bool {
		seen[name]++
		cursor = next
		k++
		return k < 100
	}))
	for j := 0; j < 300; j += 2 {
		must(t, fs.Unlink(d.Ino, sprintf("entry-%03d", j)))
	}
	for j := 0; j < 200; j++ {
		create(t, fs, d.Ino, sprintf("new-%03d", j), nil)
	}
	must(t, fs.ReadDir(d.Ino, cursor, func(name string, ino Ino, typ uint8, next uint64) bool {
		seen[name]++
		return true
	}))
	for j := 1; j < 300; j += 2 {
		if n := seen[sprintf("entry-%03d", j)]; n != 1 {
			t.Errorf("surviving entry-%03d seen %d times", j, n)
		}
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("%s seen %d times", name, n)
		}
	}
}

func TestHardLinks(t *testing.T) {
	fs, env := newTestFS(t)
	f := create(t, fs, RootIno, "f", []byte("shared"))
	d := mkdir(t, fs, RootIno, "d")
	l, err := fs.Link(f.Ino, d.Ino, "g")
	must(t, err)
	if l.Ino != f.Ino || l.Nlink != 2 {
		t.Fatalf("link attr %+v", l)
	}
	if at := lookup(t, fs, d.Ino, "g"); at.Ino != f.Ino {
		t.Fatalf("link resolves to %d", at.Ino)
	}
	_, err = fs.Link(d.Ino, RootIno, "dl")
	mustErr(t, err, ErrPerm)
	_, err = fs.Link(f.Ino, RootIno, "d")
	mustErr(t, err, ErrExists)
	_, err = fs.Link(f.Ino, f.Ino, "x")
	mustErr(t, err, ErrNotDir)
	must(t, fs.Unlink(RootIno, "f"))
	fs = env.reopen(fs)
	at := lookup(t, fs, d.Ino, "g")
	if at.Nlink != 1 || string(readAll(t, fs, at.Ino)) != "shared" {
		t.Fatalf("after unlinking one name: %+v", at)
	}
	must(t, fs.Unlink(d.Ino, "g"))
}

func TestTooManyLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("65000 links")
	}
	fs, _ := newTestFSOpt(t, fsOpt{size: 64 << 20})
	f := create(t, fs, RootIno, "f", nil)
	d := mkdir(t, fs, RootIno, "d")
	for i := 1; i < MaxLinks; i++ {
		if _, err := fs.Link(f.Ino, d.Ino, sprintf("%d", i)); err != nil {
			t.Fatalf("link %d: %v", i, err)
		}
	}
	_, err := fs.Link(f.Ino, d.Ino, "one-too-many")
	mustErr(t, err, ErrTooManyLinks)
	if at, _ := fs.GetAttr(f.Ino); at.Nlink != MaxLinks {
		t.Fatalf("nlink %d", at.Nlink)
	}
	fs.Forget(f.Ino, MaxLinks)
}

// A directory takes more than MaxLinks subdirectories, by mkdir and by
// rename, as on ext4 (dir_nlink): its st_nlink then reads 1, and the true
// count again once it is back under the limit.
func TestManySubdirectories(t *testing.T) {
	if testing.Short() {
		t.Skip("65000 directories")
	}
	fs, _ := newTestFSOpt(t, fsOpt{size: 256 << 20})
	d := mkdir(t, fs, RootIno, "d")
	other := mkdir(t, fs, RootIno, "other")
	n := MaxLinks - 2 // d's nlink reaches MaxLinks
	for i := range n {
		mkdir(t, fs, d.Ino, sprintf("%d", i))
	}
	nlink := func() uint32 {
		t.Helper()
		at, err := fs.GetAttr(d.Ino)
		must(t, err)
		return at.Nlink
	}
	if got := nlink(); got != MaxLinks {
		t.Fatalf("nlink %d with %d subdirectories, want %d", got, n, MaxLinks)
	}
	mkdir(t, fs, d.Ino, "past")
	mkdir(t, fs, other.Ino, "moved")
	must(t, fs.Rename(other.Ino, "moved", d.Ino, "moved", 0))
	if got := nlink(); got != 1 {
		t.Fatalf("nlink %d with %d subdirectories, want 1", got, n+2)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("check with %d subdirectories: %v", n+2, errs)
	}
	must(t, fs.Rmdir(d.Ino, "past"))
	if got := nlink(); got != 1 {
		t.Fatalf("nlink %d with %d subdirectories, want 1", got, n+1)
	}
	must(t, fs.Rmdir(d.Ino, "moved"))
	if got := nlink(); got != MaxLinks {
		t.Fatalf("nlink %d back at %d subdirectories, want %d", got, n, MaxLinks)
	}
	if at, _ := fs.GetAttr(other.Ino); at.Nlink != 2 {
		t.Fatalf("the source directory's nlink %d, want 2", at.Nlink)
	}
}

func TestMknodAndSymlink(t *testing.T) {
	fs, env := newTestFS(t)
	for _, c := range []struct {
		name string
		mode uint32
		rdev uint32
		typ  uint8
	}{
		{"fifo", S_IFIFO | 0o600, 0, DT_FIFO}, {"sock", S_IFSOCK | 0o600, 0, DT_SOCK},
		{"chr", S_IFCHR | 0o600, 0x0501, DT_CHR}, {"blk", S_IFBLK | 0o600, 0x0801, DT_BLK},
		{"reg", 0o600, 0, DT_REG},
	} {
		at, err := fs.Mknod(RootIno, c.name, c.mode, c.rdev, user)
		must(t, err)
		wantMode := c.mode
		if wantMode&S_IFMT == 0 {
			wantMode |= S_IFREG
		}
		if at.Mode != wantMode || at.Rdev != c.rdev || at.Nlink != 1 {
			t.Errorf("%s: %+v", c.name, at)
		}
		if n := names(t, fs, RootIno); n[c.name] != at.Ino {
			t.Errorf("%s not listed", c.name)
		}
		typ := uint8(0)
		must(t, fs.ReadDir(RootIno, 0, func(name string, ino Ino, ty uint8, next uint64) bool {
			if name == c.name {
				typ = ty
			}
			return true
		}))
		if typ != c.typ {
			t.Errorf("%s: dirent type %d, want %d", c.name, typ, c.typ)
		}
	}
	_, err := fs.Mknod(RootIno, "dir", S_IFDIR|0o755, 0, user)
	mustErr(t, err, ErrInvalid)

	target := strings.Repeat("t/", MaxSymlink/2) + "x"
	s, err := fs.Symlink(RootIno, "s", target, user)
	must(t, err)
	if s.Mode != S_IFLNK|0o777 || s.Size != uint64(len(target)) {
		t.Fatalf("symlink attr %+v", s)
	}
	_, err = fs.Symlink(RootIno, "s2", target+"y", user)
	mustErr(t, err, ErrNameTooLong)
	_, err = fs.Symlink(RootIno, "s3", "", user)
	mustErr(t, err, ErrNotFound)
	short, err := fs.Symlink(RootIno, "short", "../a b", user)
	must(t, err)
	fs = env.reopen(fs)
	got, err := fs.Readlink(s.Ino)
	must(t, err)
	if got != target {
		t.Fatalf("readlink: %d bytes", len(got))
	}
	if got, _ := fs.Readlink(short.Ino); got != "../a b" {
		t.Fatalf("readlink short: %q", got)
	}
	_, err = fs.Readlink(RootIno)
	mustErr(t, err, ErrInvalid)
	must(t, fs.Unlink(RootIno, "s"))
	must(t, fs.Unlink(RootIno, "chr"))
}

func TestSetgidDirectory(t *testing.T) {
	fs, _ := newTestFS(t)
	d := mkdir(t, fs, RootIno, "d")
	_, err := fs.SetAttr(d.Ino, SetAttr{Valid: SetMode | SetGID, Mode: 0o2775, Gid: 500}, root)
	must(t, err)
	f := create(t, fs, d.Ino, "f", nil)
	if f.Gid != 500 || f.Uid != 1000 {
		t.Fatalf("file in setgid dir: uid %d gid %d", f.Uid, f.Gid)
	}
	sub := mkdir(t, fs, d.Ino, "sub")
	if sub.Gid != 500 || sub.Mode&S_ISGID == 0 {
		t.Fatalf("subdir of setgid dir: gid %d mode %#o", sub.Gid, sub.Mode)
	}
	// A non-member creating a setgid+group-exec file loses S_ISGID.
	at, h, err := fs.Create(d.Ino, "g", 0o2755, O_CREAT|O_RDWR, user)
	must(t, err)
	fs.Release(at.Ino, h)
	if at.Mode&S_ISGID != 0 {
		t.Fatalf("non-member kept S_ISGID: %#o", at.Mode)
	}
	at, h, err = fs.Create(d.Ino, "h", 0o2755, O_CREAT|O_RDWR, Cred{Uid: 1000, Gid: 500})
	must(t, err)
	fs.Release(at.Ino, h)
	if at.Mode&S_ISGID == 0 {
		t.Fatalf("group member lost S_ISGID: %#o", at.Mode)
	}
	// Outside a setgid directory the caller's gid is used.
	g := create(t, fs, RootIno, "g", nil)
	if g.Gid != 1000 {
		t.Fatalf("gid %d", g.Gid)
	}
}

// TestSymlinkBlocks: st_blocks of a symlink is 0 for a target ext4 keeps in
// the inode (fast symlink: up to 59 bytes, NUL included it fills the 60-byte
// i_block) and one 4-KiB block beyond. On the host's ext4, `ln -s` of 59
// bytes gives 0 blocks, of 60 bytes 8.
func TestSymlinkBlocks(t *testing.T) {
	fs, env := newTestFS(t)
	want := map[int]uint64{1: 0, 59: 0, 60: 8, 61: 8, 4095: 8}
	for n, blocks := range want {
		at, err := fs.Symlink(RootIno, sprintf("l%d", n), strings.Repeat("t", n), user)
		must(t, err)
		if at.Blocks != blocks {
			t.Errorf("symlink of %d bytes: %d blocks, want %d", n, at.Blocks, blocks)
		}
	}
	fs = env.reopen(fs)
	for n, blocks := range want {
		if at := lookup(t, fs, RootIno, sprintf("l%d", n)); at.Blocks != blocks {
			t.Errorf("after reopen, symlink of %d bytes: %d blocks, want %d", n, at.Blocks, blocks)
		}
	}
}

// TestSetgidSupplementaryGroup: a caller in a setgid directory's group
// only through a supplementary group (Cred.InGroup) keeps the S_ISGID it
// asks for on a new file, as inode_init_owner's in_group_or_capable.
func TestSetgidSupplementaryGroup(t *testing.T) {
	fs, _ := newTestFS(t)
	d := mkdir(t, fs, RootIno, "d")
	_, err := fs.SetAttr(d.Ino, SetAttr{Valid: SetMode | SetGID, Mode: 0o2777, Gid: 500}, root)
	must(t, err)
	asked := 0
	member := Cred{Uid: 1000, Gid: 1000, InGroup: func(gid uint32) bool { asked++; return gid == 500 }}
	other := Cred{Uid: 1000, Gid: 1000, InGroup: func(gid uint32) bool { asked++; return false }}
	for _, c := range []struct {
		name string
		c    Cred
		want uint32
	}{{"member", member, 0o2755}, {"other", other, 0o755}} {
		at, h, err := fs.Create(d.Ino, c.name, 0o2755, O_CREAT|O_RDWR, c.c)
		must(t, err)
		fs.Release(at.Ino, h)
		if at.Mode&0o7777 != c.want || at.Gid != 500 {
			t.Errorf("%s: mode %#o gid %d, want %#o gid 500", c.name, at.Mode&0o7777, at.Gid, c.want)
		}
		at, err = fs.Mknod(d.Ino, c.name+"-fifo", S_IFIFO|0o2755, 0, c.c)
		must(t, err)
		if at.Mode&0o7777 != c.want {
			t.Errorf("%s fifo: mode %#o, want %#o", c.name, at.Mode&0o7777, c.want)
		}
	}
	if asked != 4 {
		t.Errorf("InGroup asked %d times, want 4", asked)
	}
	// Not asked where it cannot matter: no group-exec, or outside a
	// setgid directory.
	at, h, err := fs.Create(d.Ino, "noexec", 0o2644, O_CREAT|O_RDWR, member)
	must(t, err)
	fs.Release(at.Ino, h)
	at, h, err = fs.Create(RootIno, "plain", 0o2755, O_CREAT|O_RDWR, member)
	must(t, err)
	fs.Release(at.Ino, h)
	if asked != 4 {
		t.Errorf("InGroup asked %d times, want 4", asked)
	}
}

// TestReadDirLeavesOutDamagedNames: an entry whose stored name was damaged
// to hold a NUL byte reached the kernel as it was, and programs read it as
// a shorter name: one that does not exist, or "", which a walker joins to
// the directory's own path and descends into again and again (a damaged
// image made a Python tree walk run forever). ReadDir leaves such entries
// out, logs them, and keeps listing the others; fsck reports and removes
// them.
func TestReadDirLeavesOutDamagedNames(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{noCheck: true}) // damaged on purpose
	d := mkdir(t, fs, RootIno, "d")
	for _, n := range []string{"victim-one-xxxx", "victim-two-yyyy", "keep-a", "keep-b"} {
		create(t, fs, d.Ino, n, nil)
	}
	damage := map[string][]byte{"victim-one-xxxx": []byte("victim\x00"), "victim-two-yyyy": {0, 0}}
	g := fs.a.Geometry()
	for name, with := range damage {
		found := false
		for off := g.HeapOff; off+pram.Off(len(name)) <= pram.Off(g.Size) && !found; off += 1 << 16 {
			n := min(uint64(1<<16+len(name)), g.Size-uint64(off))
			if i := bytes.Index(fs.a.View(off, n), []byte(name)); i >= 0 {
				corrupt(fs, func(tx *pram.Tx) { tx.SetBytes(off+pram.Off(i), with) })
				found = true
			}
		}
		if !found {
			t.Fatalf("name %q not found in the arena", name)
		}
	}
	got := names(t, fs, d.Ino)
	for name := range got {
		if name != "." && name != ".." && checkName(name) != nil {
			t.Errorf("ReadDir returned the damaged name %q", name)
		}
	}
	for _, n := range []string{".", "..", "keep-a", "keep-b"} {
		if _, ok := got[n]; !ok {
			t.Errorf("ReadDir lost %q: %v", n, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("ReadDir returned %d names, want 4: %v", len(got), got)
	}
	if !env.logged("damaged name") {
		t.Error("the damaged entries were not logged")
	}
}
