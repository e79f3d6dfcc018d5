package conquest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCrashWriteIntoKeepSizeReserve: a write into storage that a KEEP_SIZE
// fallocate reserved past the end of an arena file, crashed at any of its
// stores and then opened as after a system crash (Open's check), leaves an
// arena that opens: the reserved storage still zeros unless the size covers
// it, and the file as before the write or as after it (or, for a write the
// journal splits, as after a block-aligned prefix of it). Before the write
// stored there through the journal, its bytes stayed in the reserved blocks
// when the Tx rolled back, and Open refused the arena ("size 0 is below the
// data it stores"), as TestCrashAtomicity did for about one seed in six.
func TestCrashWriteIntoKeepSizeReserve(t *testing.T) {
	cases := []struct {
		name          string
		initial       int   // bytes written first
		resOff, resN  int64 // the KEEP_SIZE reservation
		off, n        int64 // the write into it
		spread        int
		allowPrefixes bool
	}{
		{"small block at size 0", 0, 0, 100, 0, 50, 0, false},
		{"blocks past the end", 5000, 8192, 40000, 12288, 20000, 0, false},
		{"past a partial block", 5000, 0, 60000, 5000, 30000, 0, false},
		// 256 reserved blocks: more than the journal holds at once, so the
		// write takes several Txs, each publishing the size it reached.
		{"more than the journal", 4096, 4096, 1 << 20, 4096, 1 << 20, 16, true},
		// Holes before and after the reservation: the blocks the write adds
		// take journal too (memStoragePast counts them).
		{"holes around it", 4096, 400 << 10, 1 << 20, 4096, 3 << 19, 16, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			P, R := filepath.Join(dir, "p"), filepath.Join(dir, "r")
			must(t, Mkfs(P, "", MkfsOptions{PramSize: 16 << 20}))
			open := func(path string) *FS {
				t.Helper()
				fs, err := Open(path, "", Options{Logf: func(string, ...any) {}})
				must(t, err)
				return fs
			}
			fs := open(P)
			f := create(t, fs, RootIno, "f", pattern(tc.initial, 3)).Ino
			must(t, fs.Fallocate(f, tc.resOff, tc.resN, FallocKeepSize))
			before := readAll(t, fs, f)
			must(t, fs.Close())
			img, err := os.ReadFile(P)
			must(t, err)
			data := pattern(int(tc.n), 77)
			after := append([]byte(nil), before...)
			if end := int(tc.off + tc.n); end > len(after) {
				after = append(after, make([]byte, end-len(after))...)
			}
			copy(after[tc.off:], data)
			doWrite := func(fs *FS) error {
				_, err := fs.Write(f, 0, tc.off, data, false)
				return err
			}

			restoreImage(t, R, img)
			fr := open(R)
			k := countStores(fr, func() { must(t, doWrite(fr)) })
			if got := readAll(t, fr, f); !bytes.Equal(got, after) {
				t.Fatalf("after the write: %d bytes, want %d as written", len(got), len(after))
			}
			must(t, fr.Close())
			spread := tc.spread
			if spread == 0 {
				spread = k // every store
			}
			points := crashPoints(k, spread)
			sizes := map[int]bool{}
			for _, c := range points {
				restoreImage(t, R, img)
				fr := open(R)
				if !crashDuring(fr, c, func() { _ = doWrite(fr) }) {
					t.Fatalf("no crash at store %d of %d", c, k)
				}
				markCheckDue(t, R)
				checked := false
				fr, err := Open(R, "", Options{Logf: func(string, ...any) {}, OnCrashCheck: func(string) { checked = true }})
				if err != nil {
					t.Fatalf("crash at store %d/%d: open after a system crash: %v", c, k, err)
				}
				if !checked {
					t.Fatalf("crash at store %d/%d: Open did not check", c, k)
				}
				if errs := fr.Check(); len(errs) > 0 {
					t.Fatalf("crash at store %d/%d: Check: %v", c, k, errs)
				}
				got := readAll(t, fr, f)
				sizes[len(got)] = true
				switch {
				case bytes.Equal(got, before), bytes.Equal(got, after):
				case tc.allowPrefixes && len(got) > len(before) && len(got)%BlockSize == 0 && bytes.Equal(got, after[:len(got)]):
				default:
					t.Fatalf("crash at store %d/%d: %d bytes, neither before (%d) nor after (%d) the write", c, k, len(got), len(before), len(after))
				}
				// What the size does not cover reads as zeros once the file is
				// extended over it (and Check found none of it stored).
				at, err := fr.GetAttr(f)
				must(t, err)
				if _, err := fr.SetAttr(f, SetAttr{Valid: SetSize, Size: uint64(len(after))}, root); err != nil {
					t.Fatal(err)
				}
				ext := readAll(t, fr, f)
				if !bytes.Equal(ext[:at.Size], got) || !bytes.Equal(ext[at.Size:], make([]byte, len(ext)-int(at.Size))) {
					t.Fatalf("crash at store %d/%d: extended from %d to %d bytes, the new part is not zeros", c, k, at.Size, len(after))
				}
				must(t, fr.a.Abandon())
			}
			if tc.allowPrefixes && len(sizes) < 3 {
				t.Fatalf("sizes after crashes %v: the write was not split into several Txs", sizes)
			}
			t.Logf("%d stores, %d crashes, sizes %v", k, len(points), sizes)
		})
	}
}
