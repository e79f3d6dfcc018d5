package conquest

import (
	"errors"
	"fmt"

	"conquest/dirhash"
	"conquest/pram"
)

// Rebuilding a damaged directory table (repair phase phaseDirs).
//
// The entries dirhash.Salvage can still read and trust go into a new table,
// built in as many transactions as its size needs; the last one points the
// directory at it. A crash before that leaves the damaged directory as it
// was and the new table unreachable (a leak, freed once the directory is
// rebuilt). The old table is unreachable afterwards and freed as a leak by
// a later pass; entries it lost leave their inodes unnamed, and the attach
// pass names them in /lost+found. An entry whose inode number was damaged
// is removed by the entry pass.

// rebuildRoom is the journal space kept free in a rebuilding Tx: more
// than one insert can log (dirhash: about 9 KB at most).
const rebuildRoom = 64 << 10

// badDirTable: directory ino's table failed dirhash's check (errors of the
// walk's errors are its) or is missing.
func (ck *checker) badDirTable(ino Ino, errors int) {
	if ck.fd == nil {
		return
	}
	fs := ck.fs
	ck.fd.add(phaseDirs, finding{n: errors,
		key: fmt.Sprintf("dir table %d", ino), ino: ino, problem: "directory table damaged",
		run: func() (string, error) { return fs.rebuildDirLocked(ino) },
	})
}

// rebuildDirLocked rebuilds directory ino's table from what can be
// salvaged and says what it did.
// Preconditions: fs.mu held exclusively.
func (fs *FS) rebuildDirLocked(ino Ino) (string, error) {
	d, err := fs.dirInode(ino)
	if err != nil {
		return "", err
	}
	if d.nlink() == 0 {
		return "", fmt.Errorf("%w: directory %d is removed", ErrIO, ino)
	}
	old := d.data()
	type ent struct {
		name []byte
		ino  uint64
		typ  uint8
	}
	var ents []ent
	var rep dirhash.SalvageReport
	var serr error
	if old != 0 {
		err := fs.safely(func() error {
			rep, serr = fs.dir(d).Salvage(func(name []byte, i uint64, typ uint8) {
				if Ino(i) != ino { // never an entry naming the directory itself
					ents = append(ents, ent{append([]byte(nil), name...), i, typ})
				}
			})
			return nil
		})
		if err != nil {
			serr = err
		}
	}
	var root pram.Off
	if err := fs.update(func(tx *pram.Tx) error {
		root, err = dirhash.Create(tx, fs.h)
		return err
	}); err != nil {
		return "", err
	}
	nd := dirhash.Open(fs.h, root)
	for i := 0; i < len(ents); {
		if err := fs.update(func(tx *pram.Tx) error {
			// At least one entry a Tx, so a small journal still progresses.
			for first := true; i < len(ents) && (first || tx.Room() > rebuildRoom); i, first = i+1, false {
				e := ents[i]
				if err := nd.Insert(tx, e.name, e.ino, e.typ); err != nil && !errors.Is(err, dirhash.ErrExists) {
					return err
				}
			}
			return nil
		}); err != nil {
			return "", fmt.Errorf("rebuilding with %d of %d entries in: %w", i, len(ents), err)
		}
	}
	if err := fs.update(func(tx *pram.Tx) error {
		d, err := fs.dirInode(ino)
		if err != nil {
			return err
		}
		if d.data() != old {
			return fmt.Errorf("%w: directory %d changed during its rebuild", ErrIO, ino)
		}
		d.set64(tx, iData, uint64(root))
		d.touchMC(tx, fs.now())
		return nil
	}); err != nil {
		return "", err
	}
	switch {
	case old == 0:
		return "gave it a new, empty table", nil
	case serr != nil:
		return fmt.Sprintf("rebuilt it empty: nothing could be read (%v)", serr), nil
	}
	return fmt.Sprintf("rebuilt its table with the %d entries that could be read (%d unreadable entries dropped, %d bad table slots)",
		rep.Entries, rep.Skipped, rep.BadSlot), nil
}
