package conquest

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"conquest/pram"
)

// TestRepairDirectoryTable damages the table of a large directory in
// several ways; Repair rebuilds it from what it can read, the files it
// loses go to /lost+found, and every file is still reachable with its
// data.
func TestRepairDirectoryTable(t *testing.T) {
	const n = 3000
	data := func(i int) []byte { return []byte(fmt.Sprintf("file %d of the big directory", i)) }
	// Byte offsets inside dirhash's layout (pinned by its layout test).
	const rootOffMagic, rootOffDepth, rootOffTable, pageOffMagic = 0, 5, 16, 0
	slot := func(fs *FS, d inode, i uint64) pram.Off {
		table := pram.Off(fs.a.U64(d.data() + rootOffTable))
		return table + pram.Off(8*i)
	}
	cases := []struct {
		name    string
		damage  func(t *testing.T, fs *FS, d inode)
		fix     string
		allLost bool // every entry ends up in /lost+found
	}{
		{"damaged bucket page", func(t *testing.T, fs *FS, d inode) {
			page := pram.Off(fs.a.U64(slot(fs, d, 0)))
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(page+pageOffMagic, 0xdead) })
		}, "rebuilt its table with the", false},
		{"table slot pointing nowhere", func(t *testing.T, fs *FS, d inode) {
			depth := fs.a.Bytes(d.data()+rootOffDepth, 1)[0]
			if depth < 2 {
				t.Fatalf("directory of %d entries has depth %d", n, depth)
			}
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(slot(fs, d, 1), 0x10) })
		}, "(0 unreadable entries dropped, 1 bad table slots)", false},
		{"damaged root", func(t *testing.T, fs *FS, d inode) {
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(d.data()+rootOffMagic, 0) })
		}, "rebuilt it empty: nothing could be read", true},
		{"no table", func(t *testing.T, fs *FS, d inode) {
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(d.off+iData, 0) })
		}, "gave it a new, empty table", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A journal of 64 KiB: the rebuild takes many transactions
			// (one entry each once the room is short). The cleanup's Check
			// must be clean too.
			fs, _ := newTestFSOpt(t, fsOpt{journalLen: 64 << 10})
			big := mkdir(t, fs, RootIno, "big")
			sub := mkdir(t, fs, big.Ino, "sub")
			create(t, fs, sub.Ino, "inner", []byte("inner"))
			inos := make(map[Ino]int)
			for i := range n {
				inos[create(t, fs, big.Ino, fmt.Sprintf("name-%05d", i), data(i)).Ino] = i
			}
			d, err := fs.inode(big.Ino)
			must(t, err)
			c.damage(t, fs, d)
			if errs := fs.Check(); len(errs) == 0 {
				t.Fatal("the damage was not seen")
			}
			rep, err := fs.Repair(RepairOptions{})
			must(t, err)
			text := fixesText(rep)
			if len(text) > 2000 {
				t.Logf("fixes (first 2000 bytes):\n%s", text[:2000])
			} else {
				t.Logf("fixes:\n%s", text)
			}
			if !strings.Contains(text, "/big: directory table damaged: ") || !strings.Contains(text, c.fix) {
				t.Errorf("no rebuild of /big (%q) in the fixes", c.fix)
			}
			if len(rep.Remaining) > 0 {
				t.Fatalf("remaining: %v", rep.Remaining)
			}
			// Every file is somewhere: in /big under its name, or in
			// /lost+found; each reads back its data.
			inBig := names(t, fs, big.Ino)
			found := 0
			for name, ino := range inBig {
				if i, ok := inos[ino]; ok {
					if name != fmt.Sprintf("name-%05d", i) {
						t.Fatalf("/big/%s is file %d", name, i)
					}
					found++
				}
			}
			lost := 0
			if lf, err := fs.Lookup(RootIno, lostFound); err == nil {
				for _, ino := range names(t, fs, lf.Ino) {
					if _, ok := inos[ino]; ok {
						lost++
					}
				}
			}
			t.Logf("%d files kept their names, %d went to /lost+found", found, lost)
			if found+lost != n {
				t.Fatalf("%d + %d files reachable, want %d", found, lost, n)
			}
			if c.allLost && found != 0 || !c.allLost && lost > n/4 {
				t.Errorf("%d kept, %d lost", found, lost)
			}
			for ino, i := range inos {
				if got := readAll(t, fs, ino); !bytes.Equal(got, data(i)) {
					t.Fatalf("file %d reads %q", i, got)
				}
			}
			// The subdirectory is reachable too, with its file.
			if c.allLost {
				if _, err := fs.Lookup(big.Ino, "sub"); err == nil {
					t.Error("sub kept its name though nothing could be read")
				}
			} else if at, err := fs.Lookup(big.Ino, "sub"); err == nil {
				wantContent(t, fs, "/big/sub/inner", []byte("inner"))
				fs.Forget(at.Ino, 1)
			}
			rep, err = fs.Repair(RepairOptions{})
			must(t, err)
			if len(rep.Found)+len(rep.Fixes)+len(rep.Remaining) > 0 {
				t.Fatalf("second repair: %+v", rep)
			}
		})
	}
}
