package conquest

import (
	"bytes"
	"errors"
	"testing"

	"conquest/pram"
)

// damageArena changes the closed (or abandoned) arena at path in one
// transaction, as a flipped bit on the device would.
func damageArena(t *testing.T, path string, f func(a *pram.Arena, tx *pram.Tx)) {
	t.Helper()
	a, err := pram.Open(path)
	must(t, err)
	tx := a.Begin()
	f(a, tx)
	tx.Commit()
	must(t, a.Close())
}

// TestOrphanListDamageRepaired: one flipped bit in the orphan list's head
// (root slot 3), or in an orphan's link, made Open refuse the arena, and
// fsck --repair with it, for good (found by a corruption campaign through
// the CLI). Open now names the list (ErrOrphanList); opened with
// SkipDamagedOrphans, Repair cuts the list where it breaks and frees the
// orphans past the cut; a plain Open then succeeds, everything else intact.
func TestOrphanListDamageRepaired(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(a *pram.Arena, tx *pram.Tx, first pram.Off)
	}{
		{"head", func(a *pram.Arena, tx *pram.Tx, first pram.Off) {
			tx.Set64(pram.RootOff(slotOrphans), a.Root(slotOrphans)^1<<44)
		}},
		{"link", func(a *pram.Arena, tx *pram.Tx, first pram.Off) {
			tx.Set64(first+iOrphNext, a.U64(first+iOrphNext)^1<<3)
		}},
		{"cycle", func(a *pram.Arena, tx *pram.Tx, first pram.Off) {
			next := pram.Off(a.U64(first + iOrphNext))
			tx.Set64(next+iOrphNext, uint64(first))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, env := newTestFSOpt(t, fsOpt{noCheck: true})
			keep := create(t, fs, RootIno, "keep", pattern(20000, 7))
			base := fs.h.Stats().UsedBytes
			for _, name := range []string{"a", "b", "c"} {
				at, h, err := fs.Create(RootIno, name, 0o644, O_CREAT|O_RDWR, user)
				must(t, err)
				_, err = fs.Write(at.Ino, h, 0, pattern(30000, 2), false)
				must(t, err)
				must(t, fs.Unlink(RootIno, name)) // open: an orphan
			}
			must(t, fs.a.Abandon()) // kill -9 with the orphans open
			env.current = nil
			damageArena(t, env.path, func(a *pram.Arena, tx *pram.Tx) {
				c.damage(a, tx, pram.Off(a.Root(slotOrphans)))
			})

			_, err := Open(env.path, "", Options{})
			if !errors.Is(err, ErrOrphanList) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open of a damaged orphan list: %v, want ErrOrphanList", err)
			}
			fr, err := Open(env.path, "", Options{SkipDamagedOrphans: true})
			must(t, err)
			if errs := fr.Check(); len(errs) == 0 {
				t.Fatal("Check did not see the damage")
			}
			rep, err := fr.Repair(RepairOptions{})
			must(t, err)
			t.Logf("fixes:\n%s", fixesText(rep))
			if len(rep.Remaining) > 0 {
				t.Fatalf("remaining: %v", rep.Remaining)
			}
			if errs := fr.Check(); len(errs) > 0 {
				t.Fatalf("Check after the repair: %v", errs)
			}
			must(t, fr.Close())

			fs, err = Open(env.path, "", Options{})
			must(t, err)
			env.current = fs // the cleanup closes it
			if errs := fs.Check(); len(errs) > 0 {
				t.Fatalf("Check after a reopen: %v", errs)
			}
			if !bytes.Equal(readAll(t, fs, keep.Ino), pattern(20000, 7)) {
				t.Fatal("/keep does not read back")
			}
			if used := fs.h.Stats().UsedBytes; used != base {
				t.Fatalf("heap used %d after the repair, %d before the orphans", used, base)
			}
		})
	}
}

// TestRootSlotDamageRepaired: one flipped bit in root slot 1 (the root
// directory's inode offset) made Open refuse the arena for good. Open now
// names it (ErrRootSlot), and FindRootInode sets it back to the one record
// that is the root directory's inode.
func TestRootSlotDamageRepaired(t *testing.T) {
	for _, bit := range []int{0, 2, 3, 8, 12, 20, 44} { // 0 and 2: unaligned (a panic once)
		t.Run(sprintf("bit%d", bit), func(t *testing.T) {
			fs, env := newTestFS(t)
			f := create(t, fs, RootIno, "f", pattern(5000, 3))
			mkdir(t, fs, RootIno, "d")
			must(t, fs.Close())
			env.current = nil
			var good pram.Off
			damageArena(t, env.path, func(a *pram.Arena, tx *pram.Tx) {
				good = pram.Off(a.Root(slotRoot))
				tx.Set64(pram.RootOff(slotRoot), uint64(good)^1<<bit)
			})
			_, err := Open(env.path, "", Options{})
			if !errors.Is(err, ErrRootSlot) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open with a damaged root slot: %v, want ErrRootSlot", err)
			}
			from, to, err := FindRootInode(env.path)
			must(t, err)
			if from != good^1<<bit || to != good {
				t.Fatalf("FindRootInode: %d -> %d, want %d -> %d", from, to, good^1<<bit, good)
			}
			fs = env.open()
			if got, err := fs.Lookup(RootIno, "f"); err != nil || got.Ino != f.Ino {
				t.Fatalf("lookup /f after the repair: %v", err)
			}
			if !bytes.Equal(readAll(t, fs, f.Ino), pattern(5000, 3)) {
				t.Fatal("/f does not read back")
			}
		})
	}
}
