package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/internal/posixtest"
)

// buildTree fills dir with every kind of object the file system stores:
// files of many sizes (empty, inline-small, page-sized, past 1 MiB, sparse),
// directories, hard links, short and long symlinks, special files, xattrs,
// owners, mode bits and nanosecond times.
func buildTree(t *testing.T, dir string) {
	t.Helper()
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("building tree: %s: %v", what, err)
		}
	}
	for _, d := range []string{"d", "d/e", "d/e/f", "empty", "big"} {
		must(os.Mkdir(dir+"/"+d, 0o755), "mkdir "+d)
	}
	for i, size := range []int{0, 1, 59, 60, 61, 255, 4095, 4096, 4097, 65536, 100000, 1<<20 - 1, 1 << 20, 1<<20 + 1, 3<<20 + 17} {
		name := fmt.Sprintf("d/file%02d-%d", i, size)
		must(posixtest.WriteFile(dir+"/"+name, fill(uint64(i), size), 0o644), "write "+name)
	}
	// Sparse: data at 0 and 8 MiB, hole between.
	fd, err := unix.Open(dir+"/big/sparse", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	must(err, "create sparse")
	_, err = unix.Pwrite(fd, []byte("start"), 0)
	must(err, "write sparse")
	_, err = unix.Pwrite(fd, []byte("end"), 8<<20)
	must(err, "write sparse")
	must(unix.Close(fd), "close")
	// Many entries in one directory.
	for i := 0; i < 300; i++ {
		must(posixtest.WriteFile(fmt.Sprintf("%s/big/n%03d", dir, i), []byte(fmt.Sprint(i)), 0o600), "write many")
	}
	must(os.Link(dir+"/d/file01-1", dir+"/d/e/hard"), "link")
	must(os.Link(dir+"/d/file01-1", dir+"/hard2"), "link")
	must(os.Symlink("d/file02-59", dir+"/short"), "symlink")
	must(os.Symlink(strings.Repeat("long/", 200), dir+"/d/e/long"), "symlink")
	must(os.Symlink("dangling", dir+"/dangling"), "symlink")
	must(unix.Mkfifo(dir+"/fifo", 0o640), "mkfifo")
	must(unix.Mknod(dir+"/sock", unix.S_IFSOCK|0o600, 0), "mknod sock")
	if os.Geteuid() == 0 {
		must(unix.Mknod(dir+"/chr", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))), "mknod chr")
		must(unix.Mknod(dir+"/blk", unix.S_IFBLK|0o600, int(unix.Mkdev(7, 5))), "mknod blk")
		must(os.Lchown(dir+"/d/file03-60", 1234, 5678), "chown")
		must(os.Lchown(dir+"/short", 99, 98), "lchown")
		must(unix.Setxattr(dir+"/d", "trusted.t", []byte("trusted value"), 0), "setxattr trusted")
	}
	must(unix.Setxattr(dir+"/d/file04-61", "user.a", []byte("value a"), 0), "setxattr")
	must(unix.Setxattr(dir+"/d/file04-61", "user.b", fill(9, 3000), 0), "setxattr big")
	must(unix.Setxattr(dir+"/empty", "user.dir", nil, 0), "setxattr empty value")
	must(os.Chmod(dir+"/d/file05-255", 0o4755), "chmod setuid")
	must(os.Chmod(dir+"/empty", 0o1777), "chmod sticky")
	must(os.Chmod(dir+"/d/e", 0o2750), "chmod setgid dir")
	ts := []unix.Timespec{{Sec: 1234567890, Nsec: 123456789}, {Sec: 987654321, Nsec: 987654321}}
	must(unix.UtimesNanoAt(unix.AT_FDCWD, dir+"/d/file06-4095", ts, 0), "utimens")
	must(unix.UtimesNanoAt(unix.AT_FDCWD, dir+"/short", ts, unix.AT_SYMLINK_NOFOLLOW), "utimens symlink")
	// An unlinked file kept open until the snapshot is taken is an orphan
	// the next mount must free; the caller closes it.
}

// fill returns n deterministic bytes for seed.
func fill(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 12345
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// strict compares everything a remount must keep.
var strict = posixtest.Compare{Owners: true, Mtime: true, Inodes: true, Xattrs: true, Root: true}

func snapshot(t *testing.T, dir string) posixtest.Tree {
	t.Helper()
	tr, err := posixtest.Snapshot(dir)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return tr
}

func wantSameTree(t *testing.T, got, want posixtest.Tree, c posixtest.Compare, when string) {
	t.Helper()
	if d := posixtest.Diff(got, want, c, 30); len(d) > 0 {
		t.Fatalf("%s: the tree differs (%d paths before):\n  %s", when, len(want), strings.Join(d, "\n  "))
	}
}
