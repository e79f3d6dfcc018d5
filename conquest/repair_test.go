package conquest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"conquest/alloc"
	"conquest/diskstore"
	"conquest/pram"
)

// repairTree is the file system each repair case damages.
type repairTree struct {
	f, d, g, big, e, k Attr // /f, /d, /d/g, /big, /d/e (a directory), /d/e/k
}

var (
	fData   = pattern(3000, 1)
	gData   = pattern(700, 2)
	bigData = pattern(100<<10, 3) // block-index mode
	kData   = pattern(5000, 4)
)

func buildRepairTree(t *testing.T, fs *FS) repairTree {
	t.Helper()
	var r repairTree
	r.f = create(t, fs, RootIno, "f", fData)
	r.d = mkdir(t, fs, RootIno, "d")
	r.g = create(t, fs, r.d.Ino, "g", gData)
	r.big = create(t, fs, RootIno, "big", bigData)
	r.e = mkdir(t, fs, r.d.Ino, "e")
	r.k = create(t, fs, r.e.Ino, "k", kData)
	must(t, fs.SetXattr(r.k.Ino, "user.x", []byte("v"), 0))
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("clean FS: %v", errs)
	}
	return r
}

// fixesText is the report's fixes, one a line.
func fixesText(rep RepairReport) string {
	var b strings.Builder
	for _, f := range rep.Fixes {
		fmt.Fprintln(&b, f.String())
	}
	return b.String()
}

// content reads the file at path (from the root) and compares it.
func wantContent(t *testing.T, fs *FS, path string, want []byte) {
	t.Helper()
	ino := RootIno
	for _, c := range strings.Split(strings.Trim(path, "/"), "/") {
		ino = lookup(t, fs, ino, c).Ino
	}
	if got := readAll(t, fs, ino); !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes read back differ from the %d written", path, len(got), len(want))
	}
}

// TestRepairFixesDamage damages a file system in one way per case, runs
// Repair, and expects the report to name the fix, Check to be clean (here
// and in newTestFS's cleanup) and every file that could be saved to read
// back what was written.
func TestRepairFixesDamage(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, fs *FS, r repairTree)
		fixes  []string // substrings of the report's fixes, each required; {f} and {d} stand for inode numbers
		after  func(t *testing.T, fs *FS, r repairTree)
	}{
		{"entry with a bad offset", func(t *testing.T, fs *FS, r repairTree) {
			root, _ := fs.inode(RootIno)
			corrupt(fs, func(tx *pram.Tx) { must(t, fs.dir(root).Insert(tx, []byte("ghost"), 12345679, DT_REG)) })
		}, []string{"/ghost: entry names inode 12345679, which is not a live inode: removed the entry"}, nil},

		{"entry to a freed inode", func(t *testing.T, fs *FS, r repairTree) {
			x := create(t, fs, RootIno, "x", pattern(9000, 9))
			in, _ := fs.inode(x.Ino)
			corrupt(fs, func(tx *pram.Tx) {
				in.set32(tx, iNlink, 0)
				done, err := fs.freeStep(tx, in) // the name stays behind
				if err != nil || !done {
					t.Fatalf("freeStep: %v %v", done, err)
				}
			})
		}, []string{"/x: entry names inode", "removed the entry"}, func(t *testing.T, fs *FS, r repairTree) {
			if _, err := fs.Lookup(RootIno, "x"); err == nil {
				t.Fatal("/x still there")
			}
		}},

		{"inode with a wrong magic", func(t *testing.T, fs *FS, r repairTree) {
			in, _ := fs.inode(r.f.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iMagic, 0x1234) })
		}, []string{"/f: entry names inode", "removed the entry", "arena heap: allocation at 0x", "is reachable from nothing: freed its", "file system: inode count is 7: set it to 6"}, nil},

		{"file link count", func(t *testing.T, fs *FS, r repairTree) {
			in, _ := fs.inode(r.f.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(in.off+iNlink, 5) })
		}, []string{"/f: link count 5: set the link count to 1"}, func(t *testing.T, fs *FS, r repairTree) {
			if at, _ := fs.GetAttr(r.f.Ino); at.Nlink != 1 {
				t.Fatalf("nlink %d", at.Nlink)
			}
		}},

		{"arena file naming disk state", func(t *testing.T, fs *FS, r repairTree) {
			in, _ := fs.inode(r.f.Ino)
			corrupt(fs, func(tx *pram.Tx) {
				tx.Set64(in.off+iDiskCur, 0xff00000000000000)
				tx.Set64(in.off+iSeg, 0x7777)
			})
		}, []string{"/f: file kept in the arena names a segment list at 30583 and a shrink cursor 18374686479671623680: cleared both"},
			func(t *testing.T, fs *FS, r repairTree) { wantContent(t, fs, "/f", fData) }},

		{"unknown and misplaced flags", func(t *testing.T, fs *FS, r repairTree) {
			f, _ := fs.inode(r.f.Ino)
			d, _ := fs.inode(r.d.Ino)
			corrupt(fs, func(tx *pram.Tx) {
				tx.Set32(f.off+iFlags, f.flags()|0xf00)
				tx.Set32(d.off+iFlags, d.flags()|flagDisk|flagSmall)
			})
		}, []string{"/f: flags that do not belong to the inode: cleared flags 0xf00",
			"/d: flags that do not belong to the inode: cleared flags 0x5"},
			func(t *testing.T, fs *FS, r repairTree) {
				wantContent(t, fs, "/f", fData)
				wantContent(t, fs, "/d/g", gData)
			}},

		{"damaged xattr blob", func(t *testing.T, fs *FS, r repairTree) {
			k, _ := fs.inode(r.k.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(k.off+iXattr, 0xff0000) }) // not an allocation
		}, []string{"/d/e/k: damaged extended attributes: dropped them", "is reachable from nothing: freed"},
			func(t *testing.T, fs *FS, r repairTree) {
				wantContent(t, fs, "/d/e/k", kData)
				if names, err := fs.ListXattr(r.k.Ino); err != nil || len(names) != 0 {
					t.Fatalf("xattrs after repair: %v, %v", names, err)
				}
			}},

		{"allocator counter", func(t *testing.T, fs *FS, r repairTree) {
			objects := pram.Off(fs.a.Root(0)) + 96 // alloc/layout.go: hdrObjects
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(objects, fs.a.U64(objects)+1) })
		}, []string{"arena heap: 1 problem(s) in the allocator's lists or counters: rebuilt them from its page map (1 word(s) rewritten)"}, nil},

		{"allocation size and allocator counter", func(t *testing.T, fs *FS, r repairTree) {
			// The counter's fix (a rebuild from the page map) must wait
			// for the page map's own fix, or the rebuild refuses the map.
			big, _ := fs.inode(r.big.Ino)
			blk := pram.Off(fs.a.U64(big.data())) // a whole-page allocation
			hdr := pram.Off(fs.a.Root(0))         // alloc/layout.go: map at +16, data at +24, objects at +96
			mapOff, dataOff := pram.Off(fs.a.U64(hdr+16)), pram.Off(fs.a.U64(hdr+24))
			ent := mapOff + 32*((blk-dataOff)/4096)
			corrupt(fs, func(tx *pram.Tx) {
				tx.Set8(ent+7, 0x40) // high byte of its page count
				tx.Set64(hdr+96, fs.a.U64(hdr+96)+3)
			})
		}, []string{"set its page count to 1", "problem(s) in the allocator's lists or counters: rebuilt them from its page map"},
			func(t *testing.T, fs *FS, r repairTree) { wantContent(t, fs, "/big", bigData) }},

		{"allocation size damaged in every byte", func(t *testing.T, fs *FS, r repairTree) {
			// Found by corrupting random bytes of an image: "allocation of
			// 3914231238 pages is misaligned", which fsck --repair left.
			// The heap header's counters prove the count.
			big, _ := fs.inode(r.big.Ino)
			blk := pram.Off(fs.a.U64(big.data()))
			hdr := pram.Off(fs.a.Root(0))
			mapOff, dataOff := pram.Off(fs.a.U64(hdr+16)), pram.Off(fs.a.U64(hdr+24))
			ent := mapOff + 32*((blk-dataOff)/4096)
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(ent+4, 3914231238) })
		}, []string{"allocation of 3914231238 pages is misaligned", "set its page count to 1"},
			func(t *testing.T, fs *FS, r repairTree) { wantContent(t, fs, "/big", bigData) }},

		{"allocation kind", func(t *testing.T, fs *FS, r repairTree) {
			// Found by corrupting random bytes of an image: the kind
			// byte of a whole-page allocation's entry. Its page count
			// (and the zero entries after it) prove it.
			big, _ := fs.inode(r.big.Ino)
			blk := pram.Off(fs.a.U64(big.data()))
			hdr := pram.Off(fs.a.Root(0))
			mapOff, dataOff := pram.Off(fs.a.U64(hdr+16)), pram.Off(fs.a.U64(hdr+24))
			ent := mapOff + 32*((blk-dataOff)/4096)
			corrupt(fs, func(tx *pram.Tx) { tx.Set8(ent, 0xc3) })
		}, []string{"unknown kind 195: its other fields prove it an allocation of"},
			func(t *testing.T, fs *FS, r repairTree) { wantContent(t, fs, "/big", bigData) }},

		{"page map entry of a file block zeroed", func(t *testing.T, fs *FS, r repairTree) {
			// Found by corrupting random bytes of an image: the page was
			// then in no block ("lost page"), the rebuild of the heap
			// refused the map, and fsck --repair could never finish. A
			// lost page is now a one-page allocation again, and the
			// file's block with it.
			big, _ := fs.inode(r.big.Ino)
			blk := pram.Off(fs.a.U64(big.data() + 8*5)) // block 5: not the last
			hdr := pram.Off(fs.a.Root(0))
			mapOff, dataOff := pram.Off(fs.a.U64(hdr+16)), pram.Off(fs.a.U64(hdr+24))
			ent := mapOff + 32*((blk-dataOff)/4096)
			corrupt(fs, func(tx *pram.Tx) { tx.Zero(ent, 32) })
		}, []string{"problem(s) in the allocator's lists or counters: rebuilt them from its page map"},
			func(t *testing.T, fs *FS, r repairTree) { wantContent(t, fs, "/big", bigData) }},

		{"order of a free block", func(t *testing.T, fs *FS, r repairTree) {
			// Found by corrupting random bytes of an image: the order
			// byte of a free block's entry (kind 1, order at +1).
			corrupt(fs, func(tx *pram.Tx) { // a free block of 8 pages
				off, err := fs.h.Alloc(tx, 8*4096)
				must(t, err)
				_, err = fs.h.Alloc(tx, 4096) // keeps it below the end
				must(t, err)
				must(t, fs.h.Free(tx, off))
			})
			hdr := pram.Off(fs.a.Root(0))
			mapOff, top := pram.Off(fs.a.U64(hdr+16)), fs.a.U64(hdr+64)
			for pg := uint64(0); pg < top; pg++ {
				if ent := mapOff + pram.Off(32*pg); fs.a.U8(ent) == 1 {
					corrupt(fs, func(tx *pram.Tx) { tx.Set8(ent+1, 45) })
					return
				}
			}
			t.Fatal("no free block")
		}, []string{"free block of order 45 is misaligned or past top", ": set it to"}, nil},

		{"reserved word of the heap header", func(t *testing.T, fs *FS, r repairTree) {
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(pram.Off(fs.a.Root(0))+56, 0xdead) })
		}, []string{"reserved word at 56 is not zero: zeroed it"}, nil},

		{"mode of no valid type", func(t *testing.T, fs *FS, r repairTree) {
			// Found by corrupting random bytes of an image: the damaged
			// directory's whole subtree looked leaked, and nothing was
			// repaired.
			d, _ := fs.inode(r.d.Ino)
			f, _ := fs.inode(r.f.Ino)
			corrupt(fs, func(tx *pram.Tx) {
				tx.Set32(d.off+iMode, 0o110000|d.mode()&0o7777)
				tx.Set32(f.off+iMode, 0o150000|f.mode()&0o7777)
			})
		}, []string{"/d: mode of no valid file type: set it to 040", "/f: mode of no valid file type: set it to 0100"},
			func(t *testing.T, fs *FS, r repairTree) {
				wantContent(t, fs, "/d/g", gData)
				wantContent(t, fs, "/d/e/k", kData)
				wantContent(t, fs, "/f", fData)
			}},

		{"special file pointing at data", func(t *testing.T, fs *FS, r repairTree) {
			at, err := fs.Mknod(RootIno, "fifo", S_IFIFO|0o644, 0, user)
			must(t, err)
			in, _ := fs.inode(at.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iData, uint64(fs.a.Root(0))) })
		}, []string{"/fifo: special file pointing at data: cleared the pointer"}, nil},

		{"arena file flagged as a large file", func(t *testing.T, fs *FS, r repairTree) {
			// Found by corrupting random bytes of an image: the file was
			// given an empty segment list and its arena data was dropped.
			f, _ := fs.inode(r.f.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(f.off+iFlags, f.flags()|flagDisk) })
		}, []string{"/f: file kept in the arena is flagged as a large file: cleared the flag"},
			func(t *testing.T, fs *FS, r repairTree) { wantContent(t, fs, "/f", fData) }},

		{"damaged symlink target", func(t *testing.T, fs *FS, r repairTree) {
			at, err := fs.Symlink(RootIno, "sl", "f", user)
			must(t, err)
			in, _ := fs.inode(at.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iData, 0xff0000) }) // not an allocation
		}, []string{"/sl: unreadable symlink target: set its target to \"" + LostSymlinkTarget + "\""},
			func(t *testing.T, fs *FS, r repairTree) {
				at := lookup(t, fs, RootIno, "sl")
				if got, err := fs.Readlink(at.Ino); err != nil || got != LostSymlinkTarget {
					t.Fatalf("readlink after repair: %q, %v", got, err)
				}
			}},

		{"unlinked symlink that cannot be freed", func(t *testing.T, fs *FS, r repairTree) {
			// Found by corrupting random bytes of an image: an unlinked
			// symlink the kernel still knew, whose target pointer was
			// damaged, stayed on the orphan list and repair could not free
			// it (nor, therefore, the leaks its damage hid).
			at, err := fs.Symlink(RootIno, "sl", "f", user)
			must(t, err)
			must(t, fs.Unlink(RootIno, "sl"))
			in, _ := fs.inode(at.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iData, 0x96000041_55f0) }) // outside the heap
			fs.Forget(at.Ino, 1)
			if _, err := fs.GetAttr(at.Ino); err != nil {
				t.Fatalf("the damaged orphan was freed: %v", err)
			}
		}, []string{"unreadable symlink target: dropped the target of the unlinked symlink",
			"unlinked file that was never freed: freed it", "is reachable from nothing: freed"}, nil},

		{"unlinked file that cannot be freed", func(t *testing.T, fs *FS, r repairTree) {
			// Its xattr pointer is damaged while it is open and unlinked:
			// the free at its last close fails and leaves it on the list.
			at, h, err := fs.Create(RootIno, "x", 0o644, O_CREAT|O_RDWR, user)
			must(t, err)
			must(t, fs.SetXattr(at.Ino, "user.y", []byte("v"), 0))
			must(t, fs.Unlink(RootIno, "x"))
			in, _ := fs.inode(at.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iXattr, 0xff0000) })
			fs.Release(at.Ino, h)
			fs.Forget(at.Ino, 1)
			if _, err := fs.GetAttr(at.Ino); err != nil {
				t.Fatalf("the damaged orphan was freed: %v", err)
			}
		}, []string{"damaged extended attributes: dropped them", "unlinked file that was never freed: freed it",
			"is reachable from nothing: freed"}, nil},

		{"damaged arena data pointers", func(t *testing.T, fs *FS, r repairTree) {
			f, _ := fs.inode(r.f.Ino)     // index mode: a bad pointer to its index
			g, _ := fs.inode(r.g.Ino)     // one small block: a wrong length
			big, _ := fs.inode(r.big.Ino) // index mode: one bad block pointer
			corrupt(fs, func(tx *pram.Tx) {
				tx.Set64(f.off+iData, 0xff0000)
				tx.Set64(g.off+iIdxLen, 1<<40)
				tx.Set64(big.data()+8*3, 0x123457)
			})
		}, []string{"/f: damaged storage fields: dropped its data (bad pointer); it reads as zeros",
			"/d/g: damaged storage fields: set its block length to",
			"/big: damaged storage fields: dropped 1 damaged blocks (they read as zeros) and set its storage to",
			"is reachable from nothing: freed"},
			func(t *testing.T, fs *FS, r repairTree) {
				wantContent(t, fs, "/f", make([]byte, len(fData)))
				wantContent(t, fs, "/d/g", gData)
				want := append([]byte(nil), bigData...)
				clear(want[3*BlockSize : 4*BlockSize])
				wantContent(t, fs, "/big", want)
			}},

		{"timestamp out of range", func(t *testing.T, fs *FS, r repairTree) {
			in, _ := fs.inode(r.f.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(in.off+iMtime+8, 3_000_000_000) })
		}, []string{"/f: timestamp at 72 out of range: set it to second"}, func(t *testing.T, fs *FS, r repairTree) {
			if at, _ := fs.GetAttr(r.f.Ino); at.Mtime.Nsec != 0 {
				t.Fatalf("mtime %+v", at.Mtime)
			}
		}},

		{"directory link count", func(t *testing.T, fs *FS, r repairTree) {
			in, _ := fs.inode(r.d.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(in.off+iNlink, 9) })
		}, []string{"/d: link count 9: set the link count to 3"}, nil},

		{"parent pointer", func(t *testing.T, fs *FS, r repairTree) {
			in, _ := fs.inode(r.e.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iParent, uint64(r.f.Ino)) })
		}, []string{`/d/e: ".." points at inode {f}: set ".." to its parent, inode {d}`}, nil},

		{"file without a name", func(t *testing.T, fs *FS, r repairTree) {
			d, _ := fs.inode(r.d.Ino)
			corrupt(fs, func(tx *pram.Tx) {
				if _, _, err := fs.dir(d).Delete(tx, []byte("g")); err != nil {
					t.Fatal(err)
				}
			})
		}, []string{"file with 1 links is in no directory: created /lost+found (mode 0700) and moved it to /lost+found/#"},
			func(t *testing.T, fs *FS, r repairTree) {
				lf := lookup(t, fs, RootIno, "lost+found")
				if lf.Mode != S_IFDIR|0o700 || lf.Uid != 0 {
					t.Fatalf("lost+found: mode %#o uid %d", lf.Mode, lf.Uid)
				}
				wantContent(t, fs, fmt.Sprintf("/lost+found/#%d", r.g.Ino), gData)
			}},

		{"unlinked file lost from the orphan list", func(t *testing.T, fs *FS, r repairTree) {
			root, _ := fs.inode(RootIno)
			in, _ := fs.inode(r.big.Ino)
			corrupt(fs, func(tx *pram.Tx) {
				if _, _, err := fs.dir(root).Delete(tx, []byte("big")); err != nil {
					t.Fatal(err)
				}
				in.set32(tx, iNlink, 0)
			})
		}, []string{"file with 0 links is in no directory", "moved it to /lost+found/#"},
			func(t *testing.T, fs *FS, r repairTree) {
				wantContent(t, fs, fmt.Sprintf("/lost+found/#%d", r.big.Ino), bigData)
				if at, _ := fs.GetAttr(r.big.Ino); at.Nlink != 1 {
					t.Fatalf("nlink %d", at.Nlink)
				}
			}},

		{"directory without a name", func(t *testing.T, fs *FS, r repairTree) {
			d, _ := fs.inode(r.d.Ino)
			corrupt(fs, func(tx *pram.Tx) {
				if _, _, err := fs.dir(d).Delete(tx, []byte("e")); err != nil {
					t.Fatal(err)
				}
			})
		}, []string{"directory with 2 links is in no directory", "moved it to /lost+found/#", "/d: link count 3: set the link count to 2"},
			func(t *testing.T, fs *FS, r repairTree) {
				// The directory's whole subtree is saved, xattrs included.
				wantContent(t, fs, fmt.Sprintf("/lost+found/#%d/k", r.e.Ino), kData)
				if v, err := fs.GetXattr(r.k.Ino, "user.x"); err != nil || string(v) != "v" {
					t.Fatalf("xattr: %q %v", v, err)
				}
				e := lookup(t, fs, RootIno, "lost+found")
				if _, err := fs.Lookup(e.Ino, fmt.Sprintf("#%d", r.k.Ino)); err == nil {
					t.Fatal("the subdirectory's file was attached too")
				}
			}},

		{"second name of a directory", func(t *testing.T, fs *FS, r repairTree) {
			root, _ := fs.inode(RootIno)
			corrupt(fs, func(tx *pram.Tx) { must(t, fs.dir(root).Insert(tx, []byte("again"), uint64(r.e.Ino), DT_DIR)) })
		}, []string{"/again: entry is a second name of directory", "removed the entry"}, nil},

		{"entry type", func(t *testing.T, fs *FS, r repairTree) {
			root, _ := fs.inode(RootIno)
			corrupt(fs, func(tx *pram.Tx) {
				if _, _, err := fs.dir(root).Replace(tx, []byte("f"), uint64(r.f.Ino), DT_LNK); err != nil {
					t.Fatal(err)
				}
			})
		}, []string{"/f: entry has type 10, the inode is of type 8: set the entry's type to 8"}, nil},

		{"leak", func(t *testing.T, fs *FS, r repairTree) {
			corrupt(fs, func(tx *pram.Tx) {
				if _, err := fs.h.Alloc(tx, 100); err != nil {
					t.Fatal(err)
				}
				if _, err := fs.h.Alloc(tx, 40000); err != nil {
					t.Fatal(err)
				}
			})
		}, []string{"is reachable from nothing: freed its 112 bytes", "is reachable from nothing: freed its 40960 bytes"}, nil},

		{"orphan flag", func(t *testing.T, fs *FS, r repairTree) {
			in, _ := fs.inode(r.g.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(in.off+iFlags, in.flags()|flagOrphan) })
		}, []string{"/d/g: flagged as an orphan but not on the orphan list: cleared the flag"}, nil},

		{"allocator entry with stray fields", func(t *testing.T, fs *FS, r repairTree) {
			big, _ := fs.inode(r.big.Ino)
			blk := pram.Off(fs.a.U64(big.data())) // block 0 of /big: a whole-page allocation
			const entUsed = 2                     // alloc's page-map entry layout
			corrupt(fs, func(tx *pram.Tx) { tx.Set8(fs.h.EntryOffset(blk)+entUsed, 9) })
		}, []string{"arena heap: alloc: heap state is corrupt: page", "allocation entry has stray fields: cleared the unused fields of page"},
			func(t *testing.T, fs *FS, r repairTree) { wantContent(t, fs, "/big", bigData) }},

		{"block shared by two files", func(t *testing.T, fs *FS, r repairTree) {
			x := create(t, fs, RootIno, "x", pattern(len(bigData), 5))
			xin, _ := fs.inode(x.Ino)
			big, _ := fs.inode(r.big.Ino)
			corrupt(fs, func(tx *pram.Tx) { // /x's block 1 pointer now names /big's block 1
				tx.Set64(xin.data()+8, fs.a.U64(big.data()+8))
			})
		}, []string{"/x: 1 blocks shared with another file: gave each its own copy (block indexes [1]",
			"is reachable from nothing: freed"},
			func(t *testing.T, fs *FS, r repairTree) {
				wantContent(t, fs, "/big", bigData)
				want := pattern(len(bigData), 5)
				copy(want[BlockSize:2*BlockSize], bigData[BlockSize:2*BlockSize])
				wantContent(t, fs, "/x", want)
				// The two are independent now: a write to /big leaves /x alone.
				x := lookup(t, fs, RootIno, "x")
				write(t, fs, r.big.Ino, BlockSize, []byte("changed"))
				if got := readAll(t, fs, x.Ino); !bytes.Equal(got, want) {
					t.Fatal("a write to /big changed /x")
				}
				write(t, fs, r.big.Ino, BlockSize, bigData[BlockSize:BlockSize+7])
			}},

		{"counters", func(t *testing.T, fs *FS, r repairTree) {
			corrupt(fs, func(tx *pram.Tx) {
				tx.Set64(pram.RootOff(slotInodes), 99)
				tx.Set64(pram.RootOff(slotGen), 2)
			})
		}, []string{"inode count is 99: set it to 7", "generation counter is 2: set it to 7"}, nil},

		{"fallocate record of a directory", func(t *testing.T, fs *FS, r repairTree) {
			corrupt(fs, func(tx *pram.Tx) {
				tx.Set64(pram.RootOff(slotFalloc), uint64(r.d.Ino))
				tx.Set64(pram.RootOff(slotFallocEnd), 1<<30)
			})
		}, []string{"a damaged record of an unfinished fallocate: cleared it"}, func(t *testing.T, fs *FS, r repairTree) {
			if fs.fallocPending() || fs.a.Root(slotFallocEnd) != 0 {
				t.Fatal("the record is still there")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFS(t) // the cleanup's Check must be clean too
			r := buildRepairTree(t, fs)
			c.damage(t, fs, r)
			if errs := fs.Check(); len(errs) == 0 {
				t.Fatal("the damage was not seen")
			}
			rep, err := fs.Repair(RepairOptions{VerifyData: true})
			must(t, err)
			text := fixesText(rep)
			t.Logf("found: %v\nfixes:\n%s", rep.Found, text)
			if len(rep.Found) == 0 {
				t.Error("report found nothing")
			}
			inos := strings.NewReplacer("{f}", fmt.Sprint(r.f.Ino), "{d}", fmt.Sprint(r.d.Ino))
			for _, want := range c.fixes {
				want = inos.Replace(want)
				if !strings.Contains(text, want) {
					t.Errorf("no fix %q", want)
				}
			}
			if len(rep.Remaining) > 0 {
				t.Errorf("remaining: %v", rep.Remaining)
			}
			if errs := fs.Check(); len(errs) > 0 {
				t.Fatalf("Check after repair: %v", errs)
			}
			// What was not damaged reads back intact, wherever it is now.
			for _, f := range []struct {
				a    Attr
				want []byte
			}{{r.k, kData}, {r.g, gData}, {r.big, bigData}, {r.f, fData}} {
				if c.name == "inode with a wrong magic" && f.a.Ino == r.f.Ino {
					continue
				}
				if c.name == "damaged arena data pointers" && (f.a.Ino == r.f.Ino || f.a.Ino == r.big.Ino) {
					continue // their lost bytes read as zeros (checked in after)
				}
				if got := readAll(t, fs, f.a.Ino); !bytes.Equal(got, f.want) {
					t.Fatalf("inode %d reads back wrong", f.a.Ino)
				}
			}
			if c.after != nil {
				c.after(t, fs, r)
			}
			// A second repair finds nothing to do.
			rep, err = fs.Repair(RepairOptions{VerifyData: true})
			must(t, err)
			if len(rep.Found)+len(rep.Fixes)+len(rep.Remaining) > 0 {
				t.Fatalf("second repair: %+v", rep)
			}
		})
	}
}

// TestRepairLostLargeFile: a large file (data on disk) whose name is lost
// goes to /lost+found with its data.
func TestRepairLostLargeFile(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true})
	data := pattern(300<<10, 7)
	ino := makeFile(t, fs, "large", data)
	if !isLarge(t, fs, ino) {
		t.Fatal("not on disk")
	}
	root, _ := fs.inode(RootIno)
	corrupt(fs, func(tx *pram.Tx) {
		if _, _, err := fs.dir(root).Delete(tx, []byte("large")); err != nil {
			t.Fatal(err)
		}
	})
	errs := fs.Check()
	if !strings.Contains(fmt.Sprint(errs), "leaked") {
		t.Fatalf("Check: %v", errs)
	}
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	if len(rep.Remaining) > 0 {
		t.Fatalf("remaining: %v\nfixes:\n%s", rep.Remaining, fixesText(rep))
	}
	if !strings.Contains(fixesText(rep), fmt.Sprintf("moved it to /lost+found/#%d", ino)) {
		t.Fatalf("fixes:\n%s", fixesText(rep))
	}
	wantContent(t, fs, fmt.Sprintf("/lost+found/#%d", ino), data)
}

// TestRepairDiskLeftovers: a large file off the orphan list that still
// has arena storage (from its move to disk) loses it to the leak pass, one
// with a truncate's shrink cursor (one block past its data, or far past
// it) has the truncate finished, and one whose size is below data it holds
// has its size raised; the data stays intact. (Found
// by corrupting random bytes of an image: fsck --repair could not fix it.)
func TestRepairDiskLeftovers(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true})
	data := pattern(300<<10, 7)
	a, b, c := makeFile(t, fs, "a", data), makeFile(t, fs, "b", data), makeFile(t, fs, "c", data)
	d, e := makeFile(t, fs, "d", data), makeFile(t, fs, "e", data)
	g, h := makeFile(t, fs, "g", data), makeFile(t, fs, "h", data)
	if !isLarge(t, fs, a) || !isLarge(t, fs, b) || !isLarge(t, fs, c) || !isLarge(t, fs, d) || !isLarge(t, fs, e) || !isLarge(t, fs, g) || !isLarge(t, fs, h) {
		t.Fatal("not on disk")
	}
	ig, _ := fs.inode(g)
	ih, _ := fs.inode(h)
	ie, _ := fs.inode(e)
	ia, _ := fs.inode(a)
	ib, _ := fs.inode(b)
	ic, _ := fs.inode(c)
	id, _ := fs.inode(d)
	corrupt(fs, func(tx *pram.Tx) {
		blk, err := fs.h.Alloc(tx, 100)
		must(t, err)
		ia.set64(tx, iData, uint64(blk)) // a small block, as an arena file of 100 bytes has
		ia.set64(tx, iIdxLen, 100)
		ia.set64(tx, iAllocd, 100)
		ia.set32(tx, iFlags, ia.flags()|flagSmall)
		ib.set64(tx, iDiskCur, fs.roundUp(ib.size())+fs.ds.BlockSize())
		ic.set64(tx, iDiskCur, 1<<60)              // far past any data: must not take 2^60 / step passes
		id.set64(tx, iSize, 100<<10)               // data past the end: the size is taken to be wrong
		ie.set64(tx, iSize, 0xef00_0000_0004_b000) // past any file size (found by random damage)
		// No arena storage, but its length fields damaged (found by random
		// damage: fsck --repair left "empty file with index length ...").
		ig.set64(tx, iIdxLen, 15276209936040722432)
		ih.set64(tx, iAllocd, 40704)
	})
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	if len(rep.Remaining) > 0 {
		t.Fatalf("remaining: %v\nfixes:\n%s", rep.Remaining, fixesText(rep))
	}
	for _, want := range []string{
		"/a: large file with leftovers of an unfinished move or truncate: dropped its leftover arena storage (its data is on disk)",
		"/b: large file with leftovers of an unfinished move or truncate: released its disk data past the end",
		"/c: large file with leftovers of an unfinished move or truncate: released its disk data past the end",
		fmt.Sprintf("/d: data past the end of the file: set its size from %d to %d, the end of the data it holds", 100<<10, fs.roundUp(300<<10)),
		fmt.Sprintf("/e: data past the end of the file: set its size from %d to %d, the end of the data it holds", uint64(0xef00_0000_0004_b000), fs.roundUp(300<<10)),
		"is reachable from nothing: freed its",
		"/g: large file with leftovers of an unfinished move or truncate: dropped its leftover arena storage (its data is on disk)",
		"/h: large file with leftovers of an unfinished move or truncate: dropped its leftover arena storage (its data is on disk)",
	} {
		if !strings.Contains(fixesText(rep), want) {
			t.Errorf("no fix %q in:\n%s", want, fixesText(rep))
		}
	}
	wantContent(t, fs, "/a", data)
	wantContent(t, fs, "/b", data)
	wantContent(t, fs, "/c", data)
	wantContent(t, fs, "/d", append(slices.Clone(data), make([]byte, fs.roundUp(300<<10)-300<<10)...))
	wantContent(t, fs, "/e", append(slices.Clone(data), make([]byte, fs.roundUp(300<<10)-300<<10)...))
	wantContent(t, fs, "/g", data)
	wantContent(t, fs, "/h", data)
	for _, ino := range []Ino{b, c} {
		if in, _ := fs.inode(ino); in.flags()&flagOrphan != 0 || in.u64(iDiskCur) != 0 {
			t.Fatalf("after repair, inode %d: flags %#x, shrink cursor %d", ino, in.flags(), in.u64(iDiskCur))
		}
	}
	fs = env.reopen(fs)
	wantContent(t, fs, "/b", data)
	wantContent(t, fs, "/c", data)
}

// TestRepairBadBlocks: data failing its checksum is reported with the path
// and offset and left alone, or with ZeroBadBlocks replaced by zeros; the
// rest of the file is intact.
func TestRepairBadBlocks(t *testing.T) {
	mem := diskstore.NewMemDevice(16 << 20)
	fs, env := newTestFSOpt(t, fsOpt{dev: mem})
	data := pattern(200<<10, 5)
	d := mkdir(t, fs, RootIno, "dir")
	at, h, err := fs.Create(d.Ino, "f", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	writeFile(t, fs, at.Ino, h, 0, data)
	fs.Release(at.Ino, h)
	must(t, fs.Fsync(at.Ino, false))
	// Disk block 3 holds offset 8192 of the first file (block 0 is the
	// superblock).
	disk := env.dev.(*diskstore.MemDevice).Bytes()
	disk[3*4096+100] ^= 0xff

	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	if len(rep.Fixes) != 0 || len(rep.Remaining) != 1 ||
		!strings.Contains(rep.Remaining[0].Error(), "/dir/f: data at offset 8192 (disk block 3) fails its checksum: cannot be repaired") {
		t.Fatalf("repair without zeroing: fixes %v, remaining %v", rep.Fixes, rep.Remaining)
	}
	_, err = fs.Read(at.Ino, 0, 8192, make([]byte, 10))
	mustErr(t, err, ErrIO)

	var progress uint64
	rep, err = fs.Repair(RepairOptions{VerifyData: true, ZeroBadBlocks: true, Progress: func(done, total uint64) { progress = done }})
	must(t, err)
	if len(rep.Remaining) != 0 || len(rep.Fixes) != 1 ||
		!strings.Contains(rep.Fixes[0].String(), "/dir/f: data at offset 8192 (disk block 3) fails its checksum: replaced the 4096-byte block by a hole") {
		t.Fatalf("repair with zeroing: fixes %v, remaining %v", rep.Fixes, rep.Remaining)
	}
	if progress == 0 {
		t.Error("no progress reported")
	}
	want := bytes.Clone(data)
	clear(want[8192 : 8192+4096])
	if got := readAll(t, fs, at.Ino); !bytes.Equal(got, want) {
		t.Fatal("file after zeroing its bad block")
	}
}

// damageForCrash loses /d/e's name, sets /f's link count to 3 and leaks
// an allocation.
func damageForCrash(t *testing.T, fs *FS, r repairTree) {
	d, _ := fs.inode(r.d.Ino)
	in, _ := fs.inode(r.f.Ino)
	corrupt(fs, func(tx *pram.Tx) {
		if _, _, err := fs.dir(d).Delete(tx, []byte("e")); err != nil {
			t.Fatal(err)
		}
		tx.Set32(in.off+iNlink, 3)
		if _, err := fs.h.Alloc(tx, 500); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRepairCrash: a crash (kill -9, simulated by a panic out of the store
// hook) at any point of a repair leaves a file system that the next Open
// recovers and a second repair finishes, with the files saved.
func TestRepairCrash(t *testing.T) {
	fs, _ := newTestFS(t)
	r := buildRepairTree(t, fs)
	damageForCrash(t, fs, r)
	var rep RepairReport
	total := countStores(fs, func() {
		var err error
		rep, err = fs.Repair(RepairOptions{})
		must(t, err)
	})
	if len(rep.Fixes) < 4 || len(rep.Remaining) > 0 {
		t.Fatalf("fixes:\n%sremaining: %v", fixesText(rep), rep.Remaining)
	}
	step := 1
	if testing.Short() {
		step = max(1, total/3)
	}
	for n := 1; n <= total; n += step {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			fs, env := newTestFS(t)
			r := buildRepairTree(t, fs)
			damageForCrash(t, fs, r)
			if !crashDuring(fs, n, func() { fs.Repair(RepairOptions{}) }) {
				t.Fatalf("no crash at store %d of %d", n, total)
			}
			fs = env.open()
			rep, err := fs.Repair(RepairOptions{})
			must(t, err)
			if len(rep.Remaining) > 0 {
				t.Fatalf("remaining: %v", rep.Remaining)
			}
			fs = env.reopen(fs)
			wantContent(t, fs, fmt.Sprintf("/lost+found/#%d/k", r.e.Ino), kData)
			wantContent(t, fs, "/f", fData)
		})
	}
}

func TestRepairClosed(t *testing.T) {
	fs, env := newTestFS(t)
	must(t, fs.Close())
	if _, err := fs.Repair(RepairOptions{}); err == nil {
		t.Fatal("Repair of a closed FS")
	}
	env.current = env.open()
}

// ownerlessSegList makes a segment list with 200 KiB of data on the disk
// that names inode 999, which does not exist: no file reaches it.
func ownerlessSegList(t *testing.T, fs *FS) pram.Off {
	t.Helper()
	tx := fs.a.Begin()
	seg, err := fs.ds.NewFile(tx, 999)
	if err == nil {
		err = fs.ds.WriteThrough(tx, seg, 0, pattern(200<<10, 9))
	}
	if err != nil {
		fs.ds.Abort(tx)
		t.Fatal(err)
	}
	fs.ds.Commit(tx)
	return seg
}

// TestRepairDiskLeaks: a large file's segment list freed without its disk
// blocks (what a lost update could leave) leaves arena leaks, a wrong count
// of large files and disk blocks neither free nor used. Repair frees the
// arena leaks, corrects the count, then returns the blocks to the free map;
// the other large file is intact and the disk has as many free blocks as
// before.
func TestRepairDiskLeaks(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true})
	data := pattern(300<<10, 8)
	ino := makeFile(t, fs, "large", data)
	if !isLarge(t, fs, ino) {
		t.Fatal("not on disk")
	}
	before := fs.ds.Stats()
	seg := ownerlessSegList(t, fs)
	corrupt(fs, func(tx *pram.Tx) { must(t, fs.h.Free(tx, seg)) })
	leaked := fs.ds.Stats()
	if leaked.FreeBlocks >= before.FreeBlocks {
		t.Fatalf("%d free blocks after the leak, %d before", leaked.FreeBlocks, before.FreeBlocks)
	}

	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	text := fixesText(rep)
	if len(rep.Remaining) > 0 {
		t.Fatalf("remaining: %v\nfixes:\n%s", rep.Remaining, text)
	}
	for _, want := range []string{
		"arena heap: allocation at 0x", "is reachable from nothing: freed its",
		fmt.Sprintf("disk: count of large files is %d: set it to %d", before.Files+1, before.Files),
		"are neither free nor used by a file: returned them to the free map",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no fix %q in:\n%s", want, text)
		}
	}
	// The count is set before the blocks are freed.
	if c, r := strings.Index(text, "count of large files"), strings.Index(text, "returned them"); c < 0 || r < c {
		t.Errorf("fixes out of order:\n%s", text)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after repair: %v", errs)
	}
	if st := fs.ds.Stats(); st.FreeBlocks != before.FreeBlocks || st.Files != before.Files {
		t.Errorf("after repair %d free blocks, %d files; before the leak %d, %d", st.FreeBlocks, st.Files, before.FreeBlocks, before.Files)
	}
	wantContent(t, fs, "/large", data)
	rep, err = fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	if len(rep.Found)+len(rep.Fixes)+len(rep.Remaining) > 0 {
		t.Fatalf("second repair: %+v", rep)
	}
}

// TestRepairDiskLeaksUnsure: leaked disk blocks (and nothing leaked in the
// arena) are left alone, and reported, when the walk found damage Repair
// cannot fix: it could hide the file that owns them.
func TestRepairDiskLeaksUnsure(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true})
	ino := makeFile(t, fs, "large", pattern(300<<10, 8))
	in, _ := fs.inode(ino)
	seg := ownerlessSegList(t, fs)
	corrupt(fs, func(tx *pram.Tx) { must(t, fs.h.Free(tx, seg)) })
	// Free what the segment list leaked in the arena and correct the count:
	// only disk blocks are leaked now.
	corrupt(fs, func(tx *pram.Tx) {
		for _, err := range fs.Check() {
			var le *alloc.LeakError
			var fc *diskstore.FileCountError
			switch {
			case errors.As(err, &le):
				must(t, fs.h.Free(tx, le.Off))
			case errors.As(err, &fc):
				fs.ds.SetFileCount(tx, fc.Reached)
			case !errors.As(err, new(*diskstore.LeakedBlocksError)):
				t.Fatalf("unexpected: %v", err)
			}
		}
	})
	errs := fs.Check()
	if len(errs) != 1 || !errors.As(errs[0], new(*diskstore.LeakedBlocksError)) {
		t.Fatalf("Check: %v, want one disk leak", errs)
	}
	// Unfixable damage (without ZeroBadBlocks): the directory pointer in
	// the header of the file's list of checksum pages (diskstore: list
	// header at +64 of the segment list, the pointer at +0).
	dir := fs.a.U64(in.seg() + 64)
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.seg()+64, 1<<40) })
	rep, err := fs.Repair(RepairOptions{})
	must(t, err)
	leak := slices.IndexFunc(rep.Remaining, func(err error) bool { return errors.As(err, new(*diskstore.LeakedBlocksError)) })
	if len(rep.Fixes) != 0 || len(rep.Remaining) < 2 || leak < 0 {
		t.Fatalf("fixes:\n%sremaining: %v; want no fix, the damage and the leak remaining", fixesText(rep), rep.Remaining)
	}
	// Without the damage the leak is repaired.
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.seg()+64, dir) })
	rep, err = fs.Repair(RepairOptions{})
	must(t, err)
	if len(rep.Remaining) != 0 || len(rep.Fixes) != 1 || !strings.Contains(rep.Fixes[0].String(), "returned them to the free map") {
		t.Fatalf("fixes:\n%sremaining: %v", fixesText(rep), rep.Remaining)
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after repair: %v", errs)
	}
}

// A large file whose segment list lost only its magic gets the magic back,
// with all its data; a list that names another file is left reported.
func TestRepairSegListMagic(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true})
	data := pattern(300<<10, 8)
	ino := makeFile(t, fs, "large", data)
	other := makeFile(t, fs, "other", pattern(200<<10, 9))
	if !isLarge(t, fs, ino) || !isLarge(t, fs, other) {
		t.Fatal("not on disk")
	}
	in, _ := fs.inode(ino)
	seg := in.seg()
	corrupt(fs, func(tx *pram.Tx) { tx.Set8(seg+3, 0x61) })
	if errs := fs.Check(); !strings.Contains(fmt.Sprint(errs), "bad magic") {
		t.Fatalf("Check: %v", errs)
	}
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	if len(rep.Remaining) > 0 {
		t.Fatalf("remaining: %v\nfixes:\n%s", rep.Remaining, fixesText(rep))
	}
	if !strings.Contains(fixesText(rep), "/large: segment list with a damaged magic: rewrote the magic") {
		t.Fatalf("fixes:\n%s", fixesText(rep))
	}
	wantContent(t, fs, "/large", data)

	// The same damage in a list whose owner field disagrees is not guessed
	// at: RestoreMagic refuses it.
	o, _ := fs.inode(other)
	corrupt(fs, func(tx *pram.Tx) {
		tx.Set8(o.seg()+3, 0x61)
		tx.Set64(o.seg()+8, uint64(ino)) // the owner field: another inode
	})
	tx := fs.a.Begin()
	if err := fs.ds.RestoreMagic(tx, o.seg(), uint64(other)); err == nil {
		t.Error("RestoreMagic of a list naming another file succeeded")
	}
	tx.Abort()
	rep, err = fs.Repair(RepairOptions{})
	must(t, err)
	if len(rep.Remaining) == 0 {
		t.Fatal("a list naming another file was repaired anyway")
	}
	// Put it right for the cleanup's Check.
	corrupt(fs, func(tx *pram.Tx) {
		tx.Set8(o.seg()+3, 0x51)
		tx.Set64(o.seg()+8, uint64(other))
	})
}

// A large file whose segment list pointer was damaged (or zeroed) gets its
// list back, found by the owner the list records, with all its data; one
// whose list cannot be found gets an empty list (its data reads as zeros),
// and the list nobody owns is freed with its disk blocks.
func TestRepairLostSegList(t *testing.T) {
	for _, c := range []struct {
		name    string
		pointer uint64 // what the inode's pointer becomes
		orphan  bool   // the list's owner field names no inode: it cannot be given back
	}{
		{"pointer outside the heap", 1 << 60, false},
		{"pointer zeroed", 0, false},
		{"list cannot be found", 1 << 60, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFSOpt(t, fsOpt{disk: true})
			data := pattern(300<<10, 10)
			ino := makeFile(t, fs, "large", data)
			keep := pattern(200<<10, 11)
			makeFile(t, fs, "other", keep)
			in, _ := fs.inode(ino)
			seg := in.seg()
			corrupt(fs, func(tx *pram.Tx) {
				tx.Set64(in.off+iSeg, c.pointer)
				if c.orphan {
					tx.Set64(seg+8, 999999) // the list's owner field
				}
			})
			if errs := fs.Check(); len(errs) == 0 {
				t.Fatal("the damage was not seen")
			}
			rep, err := fs.Repair(RepairOptions{VerifyData: true})
			must(t, err)
			text := fixesText(rep)
			t.Logf("fixes:\n%s", text)
			if len(rep.Remaining) > 0 {
				t.Fatalf("remaining: %v", rep.Remaining)
			}
			wantContent(t, fs, "/other", keep)
			if !c.orphan {
				if !strings.Contains(text, "/large: large file lost its segment list (found at") {
					t.Error("the list was not given back")
				}
				wantContent(t, fs, "/large", data)
				return
			}
			for _, want := range []string{"/large: large file without a usable segment list: gave it an empty one",
				"belongs to no file: freed it and its disk blocks"} {
				if !strings.Contains(text, want) {
					t.Errorf("no fix %q", want)
				}
			}
			wantContent(t, fs, "/large", make([]byte, len(data)))
		})
	}
}

// TestRepairLostFileFullArena: as TestRepairLostLargeFile, with the arena
// filled until creates fail with ENOSPC: Repair still makes /lost+found
// from the part of the arena kept for mapping the disk (mapReserve), which
// ordinary creates may not take.
func TestRepairLostFileFullArena(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{size: 16 << 20, disk: true, diskSize: 64 << 20})
	data := pattern(300<<10, 7)
	ino := makeFile(t, fs, "large", data)
	createUntilFull(t, fs, "s", 3000)
	if _, err := fs.Mkdir(RootIno, "lost+found", 0o700, user); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("mkdir on the full arena: %v, want ENOSPC", err)
	}
	root, _ := fs.inode(RootIno)
	corrupt(fs, func(tx *pram.Tx) {
		if _, _, err := fs.dir(root).Delete(tx, []byte("large")); err != nil {
			t.Fatal(err)
		}
	})
	rep, err := fs.Repair(RepairOptions{VerifyData: true})
	must(t, err)
	if len(rep.Remaining) > 0 {
		t.Fatalf("remaining: %v\nfixes:\n%s", rep.Remaining, fixesText(rep))
	}
	wantContent(t, fs, fmt.Sprintf("/lost+found/#%d", ino), data)
}

// TestRepairArenaFileSize: a file kept in the arena whose size word is
// damaged downward (zeroed by a corruption review: the file read as empty,
// and fsck and fsck --repair said clean) stores data no size covers: a
// block wholly past the size holding non-zero bytes, or a small block
// holding them at size 0, which nothing the file system does leaves. The
// walk reports it and the repair raises the size to the end of the data.
// Blocks a KEEP_SIZE fallocate reserved past the size (zeros) and stale
// bytes a truncate left in the last block are no evidence.
func TestRepairArenaFileSize(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{})
	files := map[string][]byte{}
	for _, n := range []int{100, 2323, 10000} {
		d := pattern(n, byte(n))
		d[n-1] = 0x7f // the end of the data is the end of the file
		name := sprintf("f%d", n)
		files[name] = d
		create(t, fs, RootIno, name, d)
	}
	// Controls: reserved past the size, and truncated within a block.
	keep := create(t, fs, RootIno, "keep", pattern(3000, 1))
	must(t, fs.Fallocate(keep.Ino, 0, 64<<10, FallocKeepSize))
	cut := create(t, fs, RootIno, "cut", pattern(9000, 2))
	_, err := fs.SetAttr(cut.Ino, SetAttr{Valid: SetSize, Size: 5000}, user)
	must(t, err)
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check before the damage: %v", errs)
	}
	damaged := map[string]uint64{"f100": 0, "f2323": 0, "f10000": 4096}
	for name, size := range damaged {
		in, _ := fs.inode(lookup(t, fs, RootIno, name).Ino)
		corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iSize, size) })
	}
	errs := fs.Check()
	if len(errs) != 3 {
		t.Fatalf("Check: %v; want the three files' sizes below their data", errs)
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), "is below the data it stores") {
			t.Fatalf("Check: %v", err)
		}
	}
	rep, err := fs.Repair(RepairOptions{})
	must(t, err)
	if text := fixesText(rep); len(rep.Remaining) > 0 || strings.Count(text, "the end of the data it stores") != 3 {
		t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	for name, d := range files {
		wantContent(t, fs, "/"+name, d)
	}
}

// TestRepairSlabEntryWord: one random word over the page-map entry of the
// slab holding the root directory's table (kind, class, count and pages at
// once) proved no kind, so every object in the page was unreachable to the
// walk, and the repair could not mend it: a mount's full check refused the
// file system for good (a corruption review). The repair takes
// the class from the objects the walk found there and the slot bitmap, and
// every file is back.
func TestRepairSlabEntryWord(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{})
	files := map[string][]byte{}
	for i := range 20 {
		name := sprintf("f%d", i)
		files[name] = pattern(100+i*37, byte(i))
		create(t, fs, RootIno, name, files[name])
	}
	root, _ := fs.inode(RootIno)
	hdr := pram.Off(fs.a.Root(0))
	mapOff, dataOff := pram.Off(fs.a.U64(hdr+16)), pram.Off(fs.a.U64(hdr+24)) // alloc/layout.go
	pg := uint64(pram.Off(root.data())-dataOff) >> 12
	ent := mapOff + pram.Off(32*pg)
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(ent, 0x5a3c7e1f9d2b4a68) })
	if errs := fs.Check(); len(errs) == 0 || !strings.Contains(errs[0].Error(), "has kind 104") {
		t.Fatalf("Check: %v; want the root directory's table in a page of unknown kind", errs)
	}
	rep, err := fs.Repair(RepairOptions{})
	must(t, err)
	if text := fixesText(rep); len(rep.Remaining) > 0 || !strings.Contains(text, "it is a slab of class 3 (64 bytes)") {
		t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	for name, d := range files {
		wantContent(t, fs, "/"+name, d)
	}
	// A page of inode records: the walk validates an inode before it marks
	// it, so it finds none there; the records themselves tell (a third
	// review: every such page was unrepairable, and the repair removed the
	// names of its inodes first).
	f5, _ := fs.inode(lookup(t, fs, RootIno, "f5").Ino)
	pg = uint64(f5.off-dataOff) >> 12
	ent = mapOff + pram.Off(32*pg)
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(ent, 0x5a3c7e1f9d2b4a68) })
	rep, err = fs.Repair(RepairOptions{})
	must(t, err)
	if text := fixesText(rep); len(rep.Remaining) > 0 || !strings.Contains(text, "it is a slab of class 11 (256 bytes)") || strings.Contains(text, "removed the entry") {
		t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	for name, d := range files {
		wantContent(t, fs, "/"+name, d)
	}
	// The whole entry random (its bitmap too): nothing proves the class,
	// and the names of the inodes in the page stay (they were removed
	// before); with the entry put back, every file is there.
	keep := append([]byte(nil), fs.a.Bytes(ent, 32)...)
	corrupt(fs, func(tx *pram.Tx) {
		for w := pram.Off(0); w < 32; w += 8 {
			tx.Set64(ent+w, 0x5a3c7e1f9d2b4a68^uint64(w)*0x9e3779b97f4a7c15)
		}
	})
	rep, err = fs.Repair(RepairOptions{})
	must(t, err)
	if text := fixesText(rep); len(rep.Remaining) == 0 || strings.Contains(text, "removed the entry") {
		t.Fatalf("fixes:\n%sremaining: %v; want the page left and no name removed", text, rep.Remaining)
	}
	corrupt(fs, func(tx *pram.Tx) { tx.SetBytes(ent, keep) })
	// What the walk could not reach was counted out (the inode count):
	// counters, which the next repair sets again.
	rep, err = fs.Repair(RepairOptions{})
	must(t, err)
	if text := fixesText(rep); len(rep.Remaining) > 0 || strings.Contains(text, "removed the entry") {
		t.Fatalf("with the entry put back, fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	for name, d := range files {
		wantContent(t, fs, "/"+name, d)
	}
}

// TestRepairArenaFileSizePastStorage: a file kept in the arena whose size
// word is damaged upward past what arena storage can hold (an outside
// review: one byte of a size, or a size of 64 GiB) was clean to fsck and
// refused by reads (EIO), and the move to the disk that an open queues
// staged a buffer of that size: 2^48 bytes failed with a panic at every
// close, 64 GiB killed the daemon for want of memory, and a size the
// machine could allocate moved gigabytes of zeros to the disk. The move
// now leaves such a file alone (sizeSane), the walk reports its size, and
// the repair sets it to the end of the data it stores.
func TestRepairArenaFileSizePastStorage(t *testing.T) {
	// A commit ticker (that never ticks here) makes an open queue a file
	// above the threshold for the move (findMove); the close moves it.
	fs, env := newTestFSOpt(t, fsOpt{disk: true, threshold: 1 << 20, diskSize: 64 << 20, commit: time.Hour})
	files := map[string][]byte{"small": pattern(100, 1), "mid": pattern(200000, 2)}
	sizes := map[string]uint64{"small": 1 << 48, "mid": 600 << 20}
	inos := map[string]Ino{}
	for name, d := range files {
		d[len(d)-1] = 0x7f // the end of the data is the end of the file
		inos[name] = create(t, fs, RootIno, name, d).Ino
	}
	for name, size := range sizes {
		in, _ := fs.inode(inos[name])
		corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iSize, size) })
	}
	for name, ino := range inos {
		h, err := fs.Open(ino, O_RDWR) // queues it for the move to the disk
		must(t, err)
		if _, err := fs.Read(ino, h, 0, make([]byte, 10)); !errors.Is(err, ErrIO) {
			t.Errorf("%s: read with a damaged size: %v, want EIO", name, err)
		}
		fs.Release(ino, h)
	}
	if err := fs.Close(); err != nil { // moves every queued file
		t.Fatalf("Close: %v", err)
	}
	if env.logged("runtime error") {
		t.Fatalf("a runtime error was logged:\n%s", strings.Join(env.logs, "\n"))
	}
	fs = env.open()
	errs := fs.Check()
	if len(errs) != 2 {
		t.Fatalf("Check: %v; want the two sizes past what the arena can hold", errs)
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), "is past the 536870912 bytes a file kept in the arena can hold") {
			t.Fatalf("Check: %v", err)
		}
	}
	for name, ino := range inos {
		if in, _ := fs.inode(ino); in.onDisk() {
			t.Errorf("%s: moved to the disk with a damaged size", name)
		}
	}
	rep, err := fs.Repair(RepairOptions{})
	must(t, err)
	if text := fixesText(rep); len(rep.Remaining) > 0 || strings.Count(text, "the end of the data it stores") != 2 {
		t.Fatalf("fixes:\n%sremaining: %v", text, rep.Remaining)
	}
	for name, d := range files {
		wantContent(t, fs, "/"+name, d)
	}
}

// TestRepairLostInodeAndDamagedSegList: a large file's inode record and
// the directory of one of its segment list's lists both damaged (an
// outside review): the list belongs to no file and cannot be walked, so
// destroying it failed at every fsck --repair, the blocks it held stayed
// leaked, and the mount refused the pair for good. The repair now drops
// such a list and frees its blocks as leaks, and every other file is
// intact. The damaged list is the segment list's extents (at +32 in its
// header) or its unsynced-block records (at +96, written since the last
// fsync: a later review found Destroy walked those too, so a check of the
// other two let the repair fail as before).
func TestRepairLostInodeAndDamagedSegList(t *testing.T) {
	for _, c := range []struct {
		name     string
		dirAt    pram.Off // the damaged list's header, in the segment list
		unsynced bool     // rewrite blocks without an fsync after
	}{{"extents", 32, false}, {"unsynced", 96, true}} {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFSOpt(t, fsOpt{disk: true, threshold: 1 << 20, diskSize: 64 << 20, noCheck: true})
			big := create(t, fs, RootIno, "big", pattern(3<<20, 1))
			big2data := pattern(5<<19, 2)
			create(t, fs, RootIno, "big2", big2data)
			keep := []byte("keep me\n")
			create(t, fs, RootIno, "keep.txt", keep)
			must(t, fs.Fsync(big.Ino, false))
			if c.unsynced {
				for i := range 8 {
					write(t, fs, big.Ino, int64(i)*64<<10, pattern(4096, byte(10+i)))
				}
			}
			in, _ := fs.inode(big.Ino)
			seg := pram.Off(in.seg())
			dir := pram.Off(fs.a.U64(seg + c.dirAt))
			if dir == 0 {
				t.Fatal("the list has no directory")
			}
			corrupt(fs, func(tx *pram.Tx) {
				for o := pram.Off(0); o < inodeSize; o += 8 {
					tx.Set64(in.off+o, 0)
				}
				for o := pram.Off(0); o < 64; o += 8 {
					tx.Set64(dir+o, 0)
				}
			})
			if errs := fs.Check(); len(errs) == 0 {
				t.Fatal("Check found nothing")
			}
			rep, err := fs.Repair(RepairOptions{})
			must(t, err)
			if len(rep.Remaining) > 0 {
				t.Fatalf("fixes:\n%sremaining: %v", fixesText(rep), rep.Remaining)
			}
			if errs := fs.Check(); len(errs) > 0 {
				t.Fatalf("Check after the repair: %v\nfixes:\n%s", errs, fixesText(rep))
			}
			wantContent(t, fs, "/big2", big2data)
			wantContent(t, fs, "/keep.txt", keep)
			if st := fs.ds.Stats(); st.UsedBlocks*uint64(fs.ds.BlockSize()) > uint64(len(big2data))+1<<20 {
				t.Errorf("%d disk blocks used after the repair: the lost file's were not freed", st.UsedBlocks)
			}
		})
	}
}
