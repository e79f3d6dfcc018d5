package conquest

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"conquest/pram"
)

// An operation that meets damage while the file system is mounted marks a
// full check due (as ext4 records an error for e2fsck): the next Open with
// OnCrashCheck walks it first, says why, refuses it while it is damaged,
// and clears the mark once it checks clean. A file system closed without
// meeting damage is not checked.
func TestDamageMarksCheckDue(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fs")
	must(t, Mkfs(p, "", MkfsOptions{PramSize: 4 << 20}))
	var logs []string
	open := func() (*FS, []string, error) {
		var msgs []string
		fs, err := Open(p, "", Options{OnCrashCheck: func(msg string) { msgs = append(msgs, msg) },
			Logf: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
		return fs, msgs, err
	}

	fs, msgs, err := open()
	must(t, err)
	d, err := fs.Mkdir(RootIno, "d", 0o755, Cred{})
	must(t, err)
	must(t, fs.Close())
	fs, msgs, err = open()
	must(t, err)
	if len(msgs) != 0 {
		t.Fatalf("an undamaged file system was checked at open: %q", msgs)
	}

	in, err := fs.inode(d.Ino)
	must(t, err)
	data := in.data()
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iData, 1<<40) })
	// A lookup there is EIO, not "no such file" (the damaged table used to
	// hold no names), and so is a create.
	if _, err := fs.Lookup(d.Ino, "x"); !errors.Is(err, ErrIO) {
		t.Errorf("Lookup in a damaged directory = %v, want ErrIO", err)
	}
	if _, err := fs.Mkdir(d.Ino, "x", 0o755, Cred{}); !errors.Is(err, ErrIO) {
		t.Fatalf("Mkdir in a damaged directory = %v, want ErrIO", err)
	}
	// Logged as damage, not as a bug (reviews read "internal error" as one).
	if text := strings.Join(logs, "\n"); !strings.Contains(text, ": damaged: ") || strings.Contains(text, "internal error") {
		t.Errorf("logs:\n%s\nwant the damage logged as damage", text)
	}
	must(t, fs.Close())

	// Still damaged: refused, saying why the check ran.
	_, msgs, err = open()
	var cd *CrashDamageError
	if !errors.As(err, &cd) || !cd.Damage || !strings.Contains(err.Error(), "met damage while it was mounted") {
		t.Fatalf("Open after damage = %v, want a CrashDamageError for damage met while mounted", err)
	}
	if len(msgs) != 1 || !strings.Contains(msgs[0], "met damage while it was mounted") {
		t.Errorf("check messages %q", msgs)
	}

	// Mended (as fsck --repair would): the check passes and the mark goes.
	fs, err = Open(p, "", Options{})
	must(t, err)
	if !fs.a.CheckDue() || !fs.a.DamageSeen() {
		t.Fatalf("check due %v, damage %v; want both", fs.a.CheckDue(), fs.a.DamageSeen())
	}
	in, err = fs.inode(d.Ino)
	must(t, err)
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iData, uint64(data)) })
	must(t, fs.Close())
	fs, msgs, err = open()
	must(t, err)
	if len(msgs) != 1 || fs.a.CheckDue() {
		t.Errorf("after mending: checks %q, check still due %v", msgs, fs.a.CheckDue())
	}
	must(t, fs.Close())
	fs, msgs, err = open()
	must(t, err)
	if len(msgs) != 0 {
		t.Errorf("checked again after a clean check: %q", msgs)
	}
	must(t, fs.Close())
}

// TestJournalOverflowIsNotDamage: an operation that outgrows the journal
// (a bug of its budget: session 44's review met one in large-file writes)
// is rolled back whole and fails with EIO, but marks no damage: the journal
// refuses the record before storing anything, so the arena is consistent,
// and the next mount need not walk it.
func TestJournalOverflowIsNotDamage(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{})
	f := create(t, fs, RootIno, "f", pattern(100, 1))
	before, err := fs.GetAttr(f.Ino)
	must(t, err)
	fs.mu.Lock()
	err = fs.update(func(tx *pram.Tx) error {
		in, err := fs.inode(f.Ino)
		if err != nil {
			return err
		}
		for v := uint64(7); ; v++ {
			tx.Set64(in.off+iSize, v) // until the journal is full; rolled back
		}
	})
	fs.mu.Unlock()
	if !errors.Is(err, ErrIO) {
		t.Fatalf("overflowing update: %v, want ErrIO", err)
	}
	if fs.damaged.Load() {
		t.Fatal("a journal overflow marked the arena damaged")
	}
	if !env.logged("was rolled back") || !env.logged("too large for the journal") {
		t.Fatalf("log %q: want the overflow named", env.logs)
	}
	after, err := fs.GetAttr(f.Ino)
	must(t, err)
	if after.Size != before.Size {
		t.Fatalf("size %d after the rollback, %d before", after.Size, before.Size)
	}
	wantContent(t, fs, "/f", pattern(100, 1))
}
