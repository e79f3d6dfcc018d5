package conquest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	farm "github.com/dgryski/go-farm"

	"conquest/pram"
)

// TestSuperCopy: mkfs keeps a copy of the superblock's static part in the
// heap (root slot 11), which the walk marks; a damaged copy is reported and
// the repair writes a new one; an arena made before the copy existed gets
// one at its first writable open. With page 0 zeroed (both copies of the
// static part lost), FindSuperCopy finds the copy, RestoreSuperFromCopy
// writes it back, and the arena opens again with its files.
func TestSuperCopy(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true})
	small := pattern(3000, 3)
	large := pattern(300<<10, 4)
	makeFile(t, fs, "small", small)
	makeFile(t, fs, "large", large)
	static := fs.a.StaticPart()
	off, sound, _, why := fs.superCopyState()
	if off == 0 || !sound {
		t.Fatalf("after mkfs: copy at %#x, sound %v (%s)", off, sound, why)
	}

	// Damaged: reported, and the repair writes a new one.
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(off+40, fs.a.U64(off+40)^1) })
	errs := fs.Check()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "differs from the superblock") {
		t.Fatalf("Check of a damaged copy: %v", errs)
	}
	rep, err := fs.Repair(RepairOptions{})
	must(t, err)
	if text := fixesText(rep); len(rep.Remaining) > 0 || !strings.Contains(text, "wrote the copy of the superblock again") {
		t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after the repair: %v", errs)
	}
	// A damaged root slot: a new copy, the old one freed as unreachable.
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(pram.RootOff(slotSuperCopy), uint64(off)+8) })
	rep, err = fs.Repair(RepairOptions{})
	must(t, err)
	if text := fixesText(rep); len(rep.Remaining) > 0 || !strings.Contains(text, "wrote a new copy of the superblock") ||
		!strings.Contains(text, "reachable from nothing: freed its 160 bytes") {
		t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after the repair: %v", errs)
	}

	// An arena made before the copy existed: none, and no error.
	off, _, _, _ = fs.superCopyState()
	corrupt(fs, func(tx *pram.Tx) {
		must(t, fs.h.Free(tx, off))
		tx.Set64(pram.RootOff(slotSuperCopy), 0)
	})
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check of an arena without a copy: %v", errs)
	}
	must(t, fs.Close())
	fs = env.open()
	if _, sound, _, why := fs.superCopyState(); !sound {
		t.Fatalf("the first open of an arena without a copy wrote none: %s", why)
	}
	must(t, fs.Close())

	// Another arena's copy kept in a small file (its UUID differs): the
	// disk's UUID tells them apart; without the disk nothing is chosen.
	other := bytes.Clone(static)
	other[16] ^= 0xff // offUUID
	binary.LittleEndian.PutUint64(other[136:], farm.Hash64(other[:136]))
	if _, err := pram.CheckStatic(env.path, other); err != nil {
		t.Fatalf("the other static part: %v", err)
	}
	fs = env.open()
	makeFile(t, fs, "other", append(make([]byte, 64), superCopyRecord(other)...))
	must(t, fs.Close())

	// Page 0 lost.
	if _, err := RestoreSuperFromCopy(env.path, env.disk); err == nil {
		t.Fatal("RestoreSuperFromCopy over a sound superblock: nil error")
	}
	f, err := os.OpenFile(env.path, os.O_RDWR, 0)
	must(t, err)
	_, err = f.WriteAt(make([]byte, pram.PageSize), 0)
	must(t, err)
	must(t, f.Close())
	if _, err := Open(env.path, env.disk, Options{Logf: env.logf}); !errors.Is(err, pram.ErrNotConquest) {
		t.Fatalf("open with page 0 zeroed: %v", err)
	}
	if _, err := FindSuperCopy(env.path, ""); err == nil || !strings.Contains(err.Error(), "2 copies") {
		t.Fatalf("FindSuperCopy without the disk, two copies: %v", err)
	}
	got, err := FindSuperCopy(env.path, env.disk)
	must(t, err)
	if !bytes.Equal(got, static) {
		t.Fatal("FindSuperCopy found another static part")
	}
	uuid, err := RestoreSuperFromCopy(env.path, env.disk)
	must(t, err)
	if g, _ := pram.CheckStatic(env.path, static); uuid != g.UUIDString() {
		t.Fatalf("restored UUID %s, want %s", uuid, g.UUIDString())
	}
	// The root slots went with the page: the heap's root slot follows
	// from the geometry (fsck's step before the open), the rest is the
	// repair's.
	_, err = RewriteHeapHeader(env.path)
	must(t, err)
	if _, _, err := FindRootInode(env.path); err != nil {
		t.Fatal(err)
	}
	fs = repairedAsFsck(t, env)
	wantContent(t, fs, "/small", small)
	wantContent(t, fs, "/large", large)
	if !bytes.Equal(fs.a.StaticPart(), static) {
		t.Fatal("the restored static part differs")
	}
}

// TestSuperCopyFreedByOlderFsck (found by an outside review of upgrades
// and downgrades): a build older than the copy does not know root slot
// 11; its fsck took the copy for a leak and --repair freed it, leaving
// the slot pointing there, and a small file then got those 160 bytes.
// This repair took the allocation for a damaged copy and wrote the copy
// again in place, over the file's data. Now an allocation that something
// else reaches is that thing's: the repair writes a new copy elsewhere.
func TestSuperCopyFreedByOlderFsck(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true})
	off, sound, _, why := fs.superCopyState()
	if off == 0 || !sound {
		t.Fatalf("after mkfs: copy at %#x, sound %v (%s)", off, sound, why)
	}
	corrupt(fs, func(tx *pram.Tx) { must(t, fs.h.Free(tx, off)) }) // the older fsck --repair
	var name string
	var data []byte
	for i := range 64 {
		d := pattern(150, byte(i+1))
		n := fmt.Sprintf("f%d", i)
		makeFile(t, fs, n, d)
		if bytes.Equal(fs.a.Bytes(off, 150), d) {
			name, data = n, d
			break
		}
	}
	if name == "" {
		t.Fatalf("no 150-byte file got the freed allocation at %#x", off)
	}
	errs := fs.Check()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "which something else holds") {
		t.Fatalf("Check: %v", errs)
	}
	rep, err := fs.Repair(RepairOptions{})
	must(t, err)
	if text := fixesText(rep); len(rep.Remaining) > 0 || !strings.Contains(text, "wrote a new copy of the superblock") {
		t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after the repair: %v", errs)
	}
	if noff, sound, _, why := fs.superCopyState(); !sound || noff == off {
		t.Errorf("after the repair: copy at %#x (was %#x), sound %v (%s)", noff, off, sound, why)
	}
	ino, err := fs.Lookup(RootIno, name)
	must(t, err)
	h, err := fs.Open(ino.Ino, 0) // O_RDONLY
	must(t, err)
	if got := readFile(t, fs, ino.Ino, h); !bytes.Equal(got, data) {
		t.Errorf("the file that got the freed allocation now holds %q", got[:16])
	}
	fs.Release(ino.Ino, h)
}

// TestFindSuperCopyFIFO: a FIFO at the arena's path is refused without
// waiting for a writer (the search opened it read-only and waited for
// ever; the CLI checks kinds first, the library did not).
func TestFindSuperCopyFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := FindSuperCopyWithin(fifo, "", 0); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("FindSuperCopyWithin of a FIFO = %v", err)
		}
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close() // let the waiting open go
		}
		t.Fatal("FindSuperCopyWithin of a FIFO waited for a writer")
	}
}
