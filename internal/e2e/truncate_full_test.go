package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestTruncateUpOnFullDiskThroughMount: on a full disk, a truncate that
// grows a small file (in the arena) past the large-file threshold
// succeeds, as on ext4, where it allocates nothing: the file waits in the
// arena for the disk commit to move it, as a file that a write takes
// across the threshold does. It used to move at once and fail with ENOSPC,
// since the move needs disk blocks for its data. The file reads back as
// its data and zeros, before and after the disk has room again and after a
// remount.
func TestTruncateUpOnFullDiskThroughMount(t *testing.T) {
	cacheModes(t, func(t *testing.T, wb bool) {
		dir := t.TempDir()
		m := mountNew(t, filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img"), 16<<20, wb)
		path := m.Path("f")
		data := bytes.Repeat([]byte("d"), 500<<10)
		if err := writeSynced(path, 0, data); err != nil {
			t.Fatal(err)
		}
		fillMount(t, m.Path("filler"))
		const size = 1500000 // past the 1 MB threshold, within what may wait in the arena
		if err := os.Truncate(path, size); err != nil {
			t.Fatalf("truncate to %d on a full disk: %v\n%s", size, err, spaceReport(m))
		}
		want := make([]byte, size)
		copy(want, data)
		check := func(when string) {
			t.Helper()
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %d bytes (%v), want the %d bytes of data and zeros", when, len(got), err, size)
			}
		}
		check("on the full disk")
		m.Remount()
		check("after a remount")
		if err := os.Remove(m.Path("filler")); err != nil {
			t.Fatal(err)
		}
		m.Remount()
		check("after a remount with room on the disk")
	})
}
