package e2e

import (
	"fmt"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSpillThroughMount fills a 16 MiB arena with files below the
// large-file threshold, twice over: once the arena is down to its reserve,
// such files go to the disk (conquest/spill.go), so every write succeeds
// while df shows room, a file grown past the threshold afterwards works
// too, and everything reads back before and after a remount. Before
// spilling, file 32 (after 15 MB) failed with ENOSPC while df still
// showed the disk's 64 MiB available.
func TestSpillThroughMount(t *testing.T) {
	cacheModes(t, func(t *testing.T, wb bool) {
		dir := t.TempDir()
		m := mountNew(t, filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img"), 16<<20, wb)
		const files, size = 64, 500_000
		var before unix.Statfs_t
		if err := unix.Statfs(m.Dir, &before); err != nil {
			t.Fatal(err)
		}
		path := func(i int) string { return m.Path(fmt.Sprintf("s%d", i)) }
		for i := range files {
			p := pattern{seed: uint64(i), size: size}
			buf := make([]byte, size)
			p.fill(buf, 0)
			// With the writeback cache the data reaches the daemon at
			// fsync: sync every file, or a failure would go unseen.
			if err := writeFile(path(i), unix.O_EXCL, buf, wb || i%8 == 0); err != nil {
				t.Fatalf("file %d of %d bytes (%d MB written): %v", i, size, i*size>>20, err)
			}
		}
		big := pattern{seed: 1000, size: 3 << 20}
		buf := make([]byte, big.size)
		big.fill(buf, 0)
		if err := writeSynced(m.Path("big"), unix.O_EXCL, buf); err != nil {
			t.Fatalf("a large file after the arena filled: %v", err)
		}
		var after unix.Statfs_t
		if err := unix.Statfs(m.Dir, &after); err != nil {
			t.Fatal(err)
		}
		used := (before.Bavail - after.Bavail) * uint64(after.Bsize)
		if want := uint64(files*size + big.size); used < want {
			t.Errorf("df: %d bytes less available after writing %d", used, want)
		}
		verify := func(when string) {
			t.Helper()
			for i := range files {
				checkPrefix(t, path(i), pattern{seed: uint64(i), size: size}, true, size)
			}
			checkPrefix(t, m.Path("big"), big, true, big.size)
			check(t, m, when)
		}
		verify("after filling the arena twice over")
		m.Remount()
		verify("after a remount")
	})
}
