package pram

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTailReservationGivenBack (found by an outside review): on an
// image's file system without room for the checkpoint slots' blocks, the
// fallocate that reserves them failed, but kept what it had allocated, and
// Open only logged the failure: the file system was left full, at every
// mount, and the disk image beside the arena (sparse, on the same file
// system) had no room for large files. The blocks now go back.
func TestTailReservationGivenBack(t *testing.T) {
	dir := ext4Dir(t) // 64 MiB: less than the arena and its slots
	path := filepath.Join(dir, "arena")
	a, err := Format(path, Options{Size: 60 << 20})
	must(t, err)
	must(t, a.Close())
	free := func() uint64 {
		var st unix.Statfs_t
		must(t, unix.Statfs(dir, &st))
		return st.Bavail * uint64(st.Bsize)
	}
	before := free()
	var log strings.Builder
	b, err := OpenWith(path, OpenOptions{Interval: -1, Logf: func(f string, args ...any) {
		log.WriteString(fmt.Sprintf(f, args...) + "\n")
		t.Logf(f, args...)
	}})
	must(t, err)
	defer b.Close()
	if b.Shadow().Path == "" {
		t.Fatal("the arena is not shadowed")
	}
	if !strings.Contains(log.String(), "reserving room for checkpoints") {
		t.Fatalf("the reservation did not fail (%d bytes free before): the test needs a fuller file system", before)
	}
	if after := free(); after+(4<<20) < before {
		t.Errorf("the failed reservation kept %d of the %d bytes free", before-after, before)
	}
	// Checkpoints still work, taking their room as they write.
	commitString(b, "checkpointed")
	must(t, b.Sync())
}
