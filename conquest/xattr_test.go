package conquest

import (
	"bytes"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"conquest/pram"
)

func TestXattrs(t *testing.T) {
	fs, env := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	must(t, fs.SetXattr(f.Ino, "user.a", []byte("1"), 0))
	must(t, fs.SetXattr(f.Ino, "trusted.b", []byte{}, XattrCreate))
	must(t, fs.SetXattr(f.Ino, "security.c", bytes.Repeat([]byte{9}, 1000), 0))
	mustErr(t, fs.SetXattr(f.Ino, "user.a", []byte("2"), XattrCreate), ErrExists)
	mustErr(t, fs.SetXattr(f.Ino, "user.zz", []byte("2"), XattrReplace), ErrNoData)
	must(t, fs.SetXattr(f.Ino, "user.a", []byte("22"), XattrReplace))
	mustErr(t, fs.SetXattr(f.Ino, "system.posix_acl_access", []byte("x"), 0), ErrNotSupported)
	mustErr(t, fs.SetXattr(f.Ino, "other.x", []byte("x"), 0), ErrNotSupported)
	mustErr(t, fs.SetXattr(f.Ino, "user.", []byte("x"), 0), ErrInvalid)
	mustErr(t, fs.SetXattr(f.Ino, "", []byte("x"), 0), ErrRange)
	mustErr(t, fs.SetXattr(f.Ino, "user."+strings.Repeat("n", 251), []byte("x"), 0), ErrRange)
	must(t, fs.SetXattr(f.Ino, "user."+strings.Repeat("n", 250), []byte("x"), 0))
	mustErr(t, fs.SetXattr(f.Ino, "user.big", make([]byte, MaxXattrValue+1), 0), ErrXattr2Big)
	must(t, fs.SetXattr(f.Ino, "user.big", make([]byte, MaxXattrValue), 0))
	mustErr(t, fs.SetXattr(f.Ino, "user.big2", make([]byte, MaxXattrValue), 0), ErrNoSpace)
	must(t, fs.RemoveXattr(f.Ino, "user.big"))

	fs = env.reopen(fs)
	v, err := fs.GetXattr(f.Ino, "user.a")
	must(t, err)
	if string(v) != "22" {
		t.Fatalf("user.a = %q", v)
	}
	v, err = fs.GetXattr(f.Ino, "trusted.b")
	must(t, err)
	if len(v) != 0 {
		t.Fatalf("empty value came back as %q", v)
	}
	_, err = fs.GetXattr(f.Ino, "user.missing")
	mustErr(t, err, ErrNoData)
	_, err = fs.GetXattr(f.Ino, "system.posix_acl_access")
	mustErr(t, err, ErrNotSupported)
	list, err := fs.ListXattr(f.Ino)
	must(t, err)
	sort.Strings(list)
	want := []string{"security.c", "trusted.b", "user.a", "user." + strings.Repeat("n", 250)}
	if strings.Join(list, ",") != strings.Join(want, ",") {
		t.Fatalf("list %v", list)
	}
	mustErr(t, fs.RemoveXattr(f.Ino, "user.missing"), ErrNoData)
	for _, n := range want {
		must(t, fs.RemoveXattr(f.Ino, n))
	}
	list, err = fs.ListXattr(f.Ino)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("list after removing all: %v", list)
	}
	in, _ := fs.inode(f.Ino)
	if in.xattr() != 0 {
		t.Fatalf("blob not freed")
	}

	// user.* only on regular files and directories.
	s, err := fs.Symlink(RootIno, "s", "f", user)
	must(t, err)
	mustErr(t, fs.SetXattr(s.Ino, "user.a", []byte("x"), 0), ErrPerm)
	_, err = fs.GetXattr(s.Ino, "user.a")
	mustErr(t, err, ErrNoData)
	must(t, fs.SetXattr(s.Ino, "trusted.a", []byte("x"), 0))
	must(t, fs.SetXattr(RootIno, "user.dir", []byte("x"), 0))
	p, err := fs.Mknod(RootIno, "p", S_IFIFO|0o644, 0, user)
	must(t, err)
	mustErr(t, fs.SetXattr(p.Ino, "user.a", []byte("x"), 0), ErrPerm)
	// Xattrs are freed with the inode (Check in Cleanup finds no leak).
	must(t, fs.Unlink(RootIno, "s"))
	fs.Forget(s.Ino, 1)
}

// The name list stays listable: a name that would take listxattr's list
// past MaxXattrList (64 KiB) is refused with ErrNoSpace, while the values
// of the names already there can still change.
func TestXattrListLimit(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	// Names of 250 bytes: 262 fit in 64 KiB of list (251 bytes each), while
	// the blob (names only) stays under the 128 KiB total.
	name := func(i int) string { return sprintf("user.%03d", i) + strings.Repeat("x", 242) }
	n := 0
	for ; n < 300; n++ {
		if err := fs.SetXattr(f.Ino, name(n), nil, 0); err != nil {
			mustErr(t, err, ErrNoSpace)
			break
		}
	}
	if want := MaxXattrList / 251; n != want {
		t.Fatalf("%d names fit, want %d", n, want)
	}
	names, err := fs.ListXattr(f.Ino)
	must(t, err)
	if len(names) != n {
		t.Fatalf("listed %d names, want %d", len(names), n)
	}
	must(t, fs.SetXattr(f.Ino, name(0), []byte("new value"), 0))
	if v, err := fs.GetXattr(f.Ino, name(0)); err != nil || string(v) != "new value" {
		t.Fatalf("replacing a value at the limit: %q %v", v, err)
	}
	must(t, fs.RemoveXattr(f.Ino, name(1)))
	must(t, fs.SetXattr(f.Ino, name(1), nil, 0))
}

// TestXattrShrinkOnFullArena: on a full arena, removing an attribute or
// replacing a value with a shorter one frees more than it takes, so it must
// succeed (as on ext4, which edits its attribute block in place), while
// adding one still fails with ErrNoSpace and changes nothing.
func TestXattrShrinkOnFullArena(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{size: 2 << 20})
	f := create(t, fs, RootIno, "f", nil)
	for _, n := range []string{"user.a", "user.b", "user.c"} {
		must(t, fs.SetXattr(f.Ino, n, pattern(3000, 2), 0))
	}
	d := mkdir(t, fs, RootIno, "d")
	fillArena(t, fs, d.Ino, "fill")
	mustErr(t, fs.SetXattr(f.Ino, "user.d", pattern(3000, 3), 0), ErrNoSpace)
	must(t, fs.RemoveXattr(f.Ino, "user.a"))
	must(t, fs.SetXattr(f.Ino, "user.b", []byte("short"), XattrReplace))
	names, err := fs.ListXattr(f.Ino)
	must(t, err)
	sort.Strings(names)
	if strings.Join(names, ",") != "user.b,user.c" {
		t.Fatalf("names %q", names)
	}
	v, err := fs.GetXattr(f.Ino, "user.b")
	must(t, err)
	if string(v) != "short" {
		t.Fatalf("user.b = %q", v)
	}
	if v, err := fs.GetXattr(f.Ino, "user.c"); err != nil || !bytes.Equal(v, pattern(3000, 2)) {
		t.Fatalf("user.c: %d bytes, %v", len(v), err)
	}
}

// Setting an attribute to the value it has changes nothing, ctime
// included, as on ext4 (which skips the write); any other set or a removal
// marks ctime.
func TestXattrSameValueKeepsCtime(t *testing.T) {
	fs, env := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	ctime := func() Timespec {
		a, err := fs.GetAttr(f.Ino)
		must(t, err)
		return a.Ctime
	}
	must(t, fs.SetXattr(f.Ino, "user.a", []byte("v"), 0))
	must(t, fs.SetXattr(RootIno, "user.d", nil, 0))
	for _, flags := range []uint32{0, XattrReplace} {
		env.clock.Advance(10)
		before := ctime()
		must(t, fs.SetXattr(f.Ino, "user.a", []byte("v"), flags))
		if got := ctime(); got != before {
			t.Fatalf("flags %d: setting the same value moved ctime from %v to %v", flags, before, got)
		}
		a, err := fs.GetAttr(RootIno)
		must(t, err)
		must(t, fs.SetXattr(RootIno, "user.d", []byte{}, flags))
		if b, _ := fs.GetAttr(RootIno); b.Ctime != a.Ctime {
			t.Fatalf("flags %d: setting a directory's empty value again moved its ctime", flags)
		}
	}
	mustErr(t, fs.SetXattr(f.Ino, "user.a", []byte("v"), XattrCreate), ErrExists)
	for _, step := range []func() error{
		func() error { return fs.SetXattr(f.Ino, "user.a", []byte("w"), 0) },  // another value
		func() error { return fs.SetXattr(f.Ino, "user.a", []byte("w2"), 0) }, // longer
		func() error { return fs.SetXattr(f.Ino, "user.b", []byte("w2"), 0) }, // a new name
		func() error { return fs.RemoveXattr(f.Ino, "user.b") },
	} {
		env.clock.Advance(10)
		before := ctime()
		must(t, step())
		if got := ctime(); got == before {
			t.Fatalf("a change left ctime at %v", before)
		}
	}
	v, err := fs.GetXattr(f.Ino, "user.a")
	must(t, err)
	if string(v) != "w2" {
		t.Fatalf("user.a = %q", v)
	}
}

// TestXattrManyModel edits the attributes of one file at random against a
// map: creates, replaces (also with the value it has), removes and reads,
// of names and values of many lengths, up to hundreds of attributes, so
// that every edit lands at the start, middle and end of the blob (edits
// are made in place, xattrIter). The list and every value must match the
// model after each step and after a reopen.
func TestXattrManyModel(t *testing.T) {
	fs, env := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	rng := rand.New(rand.NewPCG(49, 1))
	model := map[string][]byte{}
	names := make([]string, 400)
	for i := range names {
		names[i] = "user." + strings.Repeat(string(rune('a'+i%26)), 1+rng.IntN(40)) + sprintf("%d", i)
	}
	value := func() []byte {
		v := make([]byte, rng.IntN(300))
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		return v
	}
	check := func(step int) {
		t.Helper()
		got, err := fs.ListXattr(f.Ino)
		must(t, err)
		if len(got) != len(model) {
			t.Fatalf("step %d: %d attributes listed, the model has %d", step, len(got), len(model))
		}
		for _, n := range got {
			want, ok := model[n]
			if !ok {
				t.Fatalf("step %d: %q listed, not in the model", step, n)
			}
			v, err := fs.GetXattr(f.Ino, n)
			must(t, err)
			if !bytes.Equal(v, want) {
				t.Fatalf("step %d: %q = %d bytes, want %d", step, n, len(v), len(want))
			}
		}
	}
	for step := range 6000 {
		n := names[rng.IntN(len(names))]
		_, had := model[n]
		switch op := rng.IntN(10); {
		case op < 5: // create, maybe exclusive
			v := value()
			flags := uint32(0)
			if rng.IntN(2) == 0 {
				flags = XattrCreate
			}
			err := fs.SetXattr(f.Ino, n, v, flags)
			if had && flags == XattrCreate {
				mustErr(t, err, ErrExists)
			} else {
				must(t, err)
				model[n] = v
			}
		case op < 7: // replace, sometimes with the same value
			v := value()
			if had && rng.IntN(4) == 0 {
				v = append([]byte{}, model[n]...)
			}
			err := fs.SetXattr(f.Ino, n, v, XattrReplace)
			if !had {
				mustErr(t, err, ErrNoData)
			} else {
				must(t, err)
				model[n] = v
			}
		case op < 9:
			err := fs.RemoveXattr(f.Ino, n)
			if !had {
				mustErr(t, err, ErrNoData)
			} else {
				must(t, err)
				delete(model, n)
			}
		default:
			v, err := fs.GetXattr(f.Ino, n)
			if !had {
				mustErr(t, err, ErrNoData)
			} else if must(t, err); !bytes.Equal(v, model[n]) {
				t.Fatalf("step %d: %q = %d bytes, want %d", step, n, len(v), len(model[n]))
			}
		}
		if step%500 == 0 {
			check(step)
		}
	}
	check(-1)
	fs = env.reopen(fs)
	check(-2)
}

// TestXattrDamage damages a file's attribute blob in one way per case and
// wants ErrIO from every call that reads it (all of it, so damage past
// the attribute asked for counts too), the capability drop of a write
// included, never a panic or a silent answer.
func TestXattrDamage(t *testing.T) {
	// Entries after the 4-byte header: user.a=1 at 0 (12 bytes), user.bb=22
	// at 12 (14), security.capability=cap at 26 (27), user.ccc=333 at 53
	// (16); 73 bytes in all.
	const e2, e4, used = 4 + 12, 4 + 53, 73
	for _, c := range []struct {
		name   string
		damage func(tx *pram.Tx, blob pram.Off)
	}{
		{"used bytes below the header", func(tx *pram.Tx, b pram.Off) { tx.Set32(b, 2) }},
		{"used bytes past the limit", func(tx *pram.Tx, b pram.Off) { tx.Set32(b, MaxXattrTotal+xattrHeader+1) }},
		{"last entry's header cut", func(tx *pram.Tx, b pram.Off) { tx.Set32(b, e4+3) }},
		{"zero name length", func(tx *pram.Tx, b pram.Off) { tx.Set8(b+e2, 0) }},
		{"value past the end", func(tx *pram.Tx, b pram.Off) { tx.Set32(b+e2+1, 1000) }},
		{"last value just past the end", func(tx *pram.Tx, b pram.Off) { tx.Set32(b+e4+1, 6) }},
		{"last name past the end", func(tx *pram.Tx, b pram.Off) { tx.Set8(b+e4, 12) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFSOpt(t, fsOpt{noCheck: true})
			f := create(t, fs, RootIno, "f", nil)
			for _, a := range [][2]string{{"user.a", "1"}, {"user.bb", "22"}, {"security.capability", "cap"}, {"user.ccc", "333"}} {
				must(t, fs.SetXattr(f.Ino, a[0], []byte(a[1]), 0))
			}
			in, err := fs.inode(f.Ino)
			must(t, err)
			if got := fs.a.U32(in.xattr()); got != used {
				t.Fatalf("blob of %d bytes, want %d", got, used)
			}
			corrupt(fs, func(tx *pram.Tx) { c.damage(tx, in.xattr()) })
			_, err = fs.GetXattr(f.Ino, "user.a")
			mustErr(t, err, ErrIO)
			_, err = fs.GetXattr(f.Ino, "user.ccc")
			mustErr(t, err, ErrIO)
			_, err = fs.ListXattr(f.Ino)
			mustErr(t, err, ErrIO)
			mustErr(t, fs.SetXattr(f.Ino, "user.a", []byte("x"), 0), ErrIO)
			mustErr(t, fs.SetXattr(f.Ino, "user.new", []byte("x"), 0), ErrIO)
			mustErr(t, fs.RemoveXattr(f.Ino, "user.a"), ErrIO)
			h, err := fs.Open(f.Ino, O_WRONLY)
			must(t, err)
			defer fs.Release(f.Ino, h)
			_, err = fs.WriteKill(f.Ino, h, 0, []byte("data"), KillCaps)
			mustErr(t, err, ErrIO)
		})
	}
}
