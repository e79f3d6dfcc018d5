package conquest

import (
	"testing"
)

func TestChmodChownUtimens(t *testing.T) {
	fs, env := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	at, err := fs.SetAttr(f.Ino, SetAttr{Valid: SetMode, Mode: S_IFDIR | 0o4751}, root)
	must(t, err)
	if at.Mode != S_IFREG|0o4751 {
		t.Fatalf("chmod kept the type? %#o", at.Mode)
	}
	if at.Ctime == f.Ctime || at.Mtime != f.Mtime {
		t.Fatalf("chmod: ctime %v mtime %v (was %v %v)", at.Ctime, at.Mtime, f.Ctime, f.Mtime)
	}
	at, err = fs.SetAttr(f.Ino, SetAttr{Valid: SetUID | SetGID, Uid: 7, Gid: 8}, root)
	must(t, err)
	if at.Uid != 7 || at.Gid != 8 {
		t.Fatalf("chown: %+v", at)
	}
	at, err = fs.SetAttr(f.Ino, SetAttr{Valid: SetKillSUIDGID}, root)
	must(t, err)
	if at.Mode != S_IFREG|0o751 {
		t.Fatalf("kill suid: %#o", at.Mode)
	}
	ts := Timespec{Sec: 123456789, Nsec: 987654321}
	at, err = fs.SetAttr(f.Ino, SetAttr{Valid: SetAtime | SetMtime, Atime: ts, Mtime: Timespec{Sec: -5, Nsec: 1}}, root)
	must(t, err)
	if at.Atime != ts || at.Mtime != (Timespec{Sec: -5, Nsec: 1}) {
		t.Fatalf("utimens: %v %v", at.Atime, at.Mtime)
	}
	before := at.Ctime
	at, err = fs.SetAttr(f.Ino, SetAttr{Valid: SetAtimeNow | SetMtimeNow}, root)
	must(t, err)
	if at.Atime != at.Mtime || at.Ctime != at.Atime || !at.Ctime.after(before) {
		t.Fatalf("utimens now: a %v m %v c %v", at.Atime, at.Mtime, at.Ctime)
	}
	ct := Timespec{Sec: 42, Nsec: 7}
	at, err = fs.SetAttr(f.Ino, SetAttr{Valid: SetCtime, Ctime: ct}, root)
	must(t, err)
	if at.Ctime != ct {
		t.Fatalf("explicit ctime %v", at.Ctime)
	}
	// An empty SetAttr changes nothing; SetTouch (chown(-1, -1)) marks
	// ctime and nothing else.
	same, err := fs.SetAttr(f.Ino, SetAttr{}, root)
	must(t, err)
	if same != at {
		t.Fatalf("empty SetAttr changed %+v to %+v", at, same)
	}
	touched, err := fs.SetAttr(f.Ino, SetAttr{Valid: SetTouch}, root)
	must(t, err)
	if !touched.Ctime.after(ct) || touched.Mtime != at.Mtime || touched.Atime != at.Atime || touched.Mode != at.Mode {
		t.Fatalf("SetTouch: %+v, was %+v", touched, at)
	}
	at = touched
	// Nanoseconds survive a remount.
	fs = env.reopen(fs)
	got, _ := fs.GetAttr(f.Ino)
	if got != at {
		t.Fatalf("after reopen %+v, want %+v", got, at)
	}
	_, err = fs.SetAttr(12345, SetAttr{Valid: SetMode}, root)
	mustErr(t, err, ErrStale)
}

// TestTimestampRules checks which operation touches which time, as ext4.
func TestTimestampRules(t *testing.T) {
	fs, env := newTestFS(t)
	d := mkdir(t, fs, RootIno, "d")
	get := func(ino Ino) Attr {
		at, err := fs.GetAttr(ino)
		must(t, err)
		return at
	}
	type changed struct{ a, m, c bool }
	check := func(what string, before, after Attr, want changed) {
		t.Helper()
		got := changed{before.Atime != after.Atime, before.Mtime != after.Mtime, before.Ctime != after.Ctime}
		if got != want {
			t.Errorf("%s: changed (a,m,c) = %v, want %v", what, got, want)
		}
	}
	d0 := get(d.Ino)
	f := create(t, fs, d.Ino, "f", nil)
	if f.Atime != f.Mtime || f.Mtime != f.Ctime || f.Ctime != f.Crtime {
		t.Errorf("new file times differ: %+v", f)
	}
	d1 := get(d.Ino)
	check("create: parent", d0, d1, changed{false, true, true})

	f0 := get(f.Ino)
	write(t, fs, f.Ino, 0, []byte("data"))
	f1 := get(f.Ino)
	check("write", f0, f1, changed{false, true, true})

	setSize(t, fs, f.Ino, 2)
	f2 := get(f.Ino)
	check("truncate down", f1, f2, changed{false, true, true})
	_, err := fs.SetAttr(f.Ino, SetAttr{Valid: SetSize, Size: 2}, user)
	must(t, err)
	f2s := get(f.Ino)
	check("truncate to the same size (as ext4; also open(O_TRUNC) of an empty file)", f2, f2s, changed{false, true, true})
	f2 = f2s

	// relatime: the first read after a modification updates atime, the
	// next does not, until a day has passed.
	buf := make([]byte, 10)
	_, err = fs.Read(f.Ino, 0, 0, buf)
	must(t, err)
	f3 := get(f.Ino)
	check("first read", f2, f3, changed{true, false, false})
	_, err = fs.Read(f.Ino, 0, 0, buf)
	must(t, err)
	check("second read", f3, get(f.Ino), changed{})
	env.clock.Advance(25 * 3600)
	_, err = fs.Read(f.Ino, 0, 0, buf)
	must(t, err)
	check("read a day later", f3, get(f.Ino), changed{true, false, false})

	d2 := get(d.Ino)
	_ = names(t, fs, d.Ino)
	d3 := get(d.Ino)
	check("readdir after change", d2, d3, changed{true, false, false})
	_ = names(t, fs, d.Ino)
	check("second readdir", d3, get(d.Ino), changed{})

	f4 := get(f.Ino)
	_, err = fs.Link(f.Ino, RootIno, "link")
	must(t, err)
	f5 := get(f.Ino)
	check("link: inode", f4, f5, changed{false, false, true})
	d4 := get(d.Ino)
	must(t, fs.Rename(d.Ino, "f", RootIno, "moved", 0))
	check("rename: moved inode", f5, get(f.Ino), changed{false, false, true})
	check("rename: old parent", d4, get(d.Ino), changed{false, true, true})
	r0 := get(RootIno)
	f6 := get(f.Ino)
	must(t, fs.Unlink(RootIno, "link"))
	check("unlink: inode", f6, get(f.Ino), changed{false, false, true})
	check("unlink: parent", r0, get(RootIno), changed{false, true, true})
	f7 := get(f.Ino)
	must(t, fs.SetXattr(f.Ino, "user.x", []byte("v"), 0))
	check("setxattr", f7, get(f.Ino), changed{false, false, true})
	f8 := get(f.Ino)
	must(t, fs.Fallocate(f.Ino, 0, 8192, FallocKeepSize))
	check("fallocate keep size", f8, get(f.Ino), changed{false, true, true}) // mtime too, as ext4 (file_modified)

	// NoAtime switches atime updates off.
	must(t, fs.Close())
	fs2, err := Open(env.path, "", Options{Now: env.clock.Now, NoAtime: true})
	must(t, err)
	env.current = fs2
	fs = fs2
	write(t, fs, f.Ino, 0, []byte("x"))
	g0 := get(f.Ino)
	_, err = fs.Read(f.Ino, 0, 0, buf)
	must(t, err)
	check("read with NoAtime", g0, get(f.Ino), changed{})
}
