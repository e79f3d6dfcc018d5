package posixtest

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// statfs(2).
var statfsTests = map[string]Test{
	"Statfs":        testStatfs,
	"StatfsChanges": testStatfsChanges,
}

func testStatfs(t *testing.T, dir string) {
	var s unix.Statfs_t
	ok(t, unix.Statfs(dir, &s), "statfs")
	if s.Bsize <= 0 || s.Frsize <= 0 {
		t.Fatalf("bsize %d frsize %d", s.Bsize, s.Frsize)
	}
	if s.Blocks == 0 || s.Bfree == 0 || s.Bavail == 0 {
		t.Fatalf("blocks %d bfree %d bavail %d", s.Blocks, s.Bfree, s.Bavail)
	}
	if s.Bfree > s.Blocks || s.Bavail > s.Bfree {
		t.Fatalf("inconsistent: blocks %d bfree %d bavail %d", s.Blocks, s.Bfree, s.Bavail)
	}
	if s.Files == 0 || s.Ffree == 0 || s.Ffree > s.Files {
		t.Fatalf("files %d ffree %d", s.Files, s.Ffree)
	}
	if s.Namelen != 255 {
		t.Fatalf("namelen %d, want 255", s.Namelen)
	}
	var f unix.Statfs_t
	fd := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	ok(t, unix.Fstatfs(fd, &f), "fstatfs")
	if f.Type != s.Type || f.Blocks != s.Blocks {
		t.Fatalf("fstatfs disagrees with statfs")
	}
}

// testStatfsChanges: free blocks drop when a large file is written and come
// back when it is removed; free inodes drop when files are created.
func testStatfsChanges(t *testing.T, dir string) {
	get := func() unix.Statfs_t {
		t.Helper()
		var s unix.Statfs_t
		unix.Sync() // ext4 accounts delayed allocations lazily
		ok(t, unix.Statfs(dir, &s), "statfs")
		return s
	}
	// Other activity on the same file system adds noise: demand at least
	// half the file's size, and give a disturbed measurement two more
	// tries. (The host's shared /tmp is too noisy even for that; TestHost
	// skips this test there, see needsPrivateFS.)
	const size = 16 << 20
	p := join(dir, "big")
	chunk := pattern(40, 1<<20)
	var failure string
	for try := 0; try < 3; try++ {
		s0 := get()
		fd := open(t, p, unix.O_CREAT|unix.O_WRONLY, 0644)
		for off := int64(0); off < size; off += 1 << 20 {
			pwrite(t, fd, chunk, off)
		}
		ok(t, unix.Fsync(fd), "fsync")
		s1 := get()
		unix.Close(fd)
		ok(t, unix.Unlink(p), "unlink")
		s2 := get()
		used := (int64(s0.Bfree) - int64(s1.Bfree)) * s1.Frsize
		freed := (int64(s2.Bfree) - int64(s1.Bfree)) * s2.Frsize
		switch {
		case used < size/2:
			failure = fmt.Sprintf("writing %d bytes reduced free space by %d bytes (bfree %d -> %d, frsize %d)", size, used, s0.Bfree, s1.Bfree, s1.Frsize)
		case freed < size/2:
			failure = fmt.Sprintf("removing the file freed %d bytes (bfree %d -> %d)", freed, s1.Bfree, s2.Bfree)
		default:
			failure = ""
		}
		if failure == "" {
			break
		}
		t.Logf("try %d: %s", try+1, failure)
	}
	if failure != "" {
		t.Fatal(failure)
	}
	s2 := get()
	const n = 100
	for i := 0; i < n; i++ {
		writeFile(t, join(dir, fmt.Sprintf("f%d", i)), nil, 0644)
	}
	s3 := get()
	if int64(s2.Ffree)-int64(s3.Ffree) < n/2 {
		t.Fatalf("creating %d files reduced free inodes by %d (%d -> %d)", n, int64(s2.Ffree)-int64(s3.Ffree), s2.Ffree, s3.Ffree)
	}
}
