package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
	"conquest/internal/mounttest"
	"conquest/internal/posixtest"
)

// TestNoSpaceThroughMount fills a small arena, then a small disk, through a
// real mount, write-through and with the kernel's writeback cache (served
// by `conquest mount`). A full arena or disk must fail with ENOSPC (never
// EIO, never a dead daemon); everything written before must be intact after
// a remount, the file being written when space ran out must hold only its
// own bytes, and freeing space must make room again. The mount's cleanup
// runs the full consistency check on the images.
func TestNoSpaceThroughMount(t *testing.T) {
	t.Parallel() // see doc.go, "Time"
	cacheModes(t, func(t *testing.T, wb bool) {
		dir := t.TempDir()
		m := mountNew(t, filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img"), 16<<20, wb)
		noSpaceArena(t, m, wb)
		noSpaceDisk(t, m, wb)
	})
}

// mountNew formats an arena of pramSize at pram with a 32 MiB disk and
// mounts it: in-process, or with the writeback cache (wb) by `conquest
// mount`.
func mountNew(t *testing.T, pram, disk string, pramSize uint64, wb bool) *mounttest.Mounted {
	t.Helper()
	if err := conquest.Mkfs(pram, disk, conquest.MkfsOptions{PramSize: pramSize, DiskSize: 32 << 20}); err != nil {
		t.Fatalf("mkfs: %v", err)
	}
	if wb {
		return mounttest.MountProcess(t, mounttest.WithImages(pram, disk), mounttest.WithArgs("--writeback-cache"))
	}
	return mount(t, mounttest.WithImages(pram, disk))
}

// isNoSpace fails the test unless err is ENOSPC.
func isNoSpace(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("%s on a full file system: %v, want ENOSPC", what, err)
	}
}

// spaceReport is the mount's space as the daemon counts it (the space
// xattr that `conquest df` reads) and, for an in-process mount, the core's
// usage: what a failure on a full file system logs.
func spaceReport(m *mounttest.Mounted) string {
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(m.Dir, fusefs.SpaceXattr, buf)
	if err != nil {
		return fmt.Sprintf("space: %v", err)
	}
	r := "space:\n" + string(buf[:n])
	if m.FS != nil {
		r += fmt.Sprintf("usage: %+v\nheld for a checkpoint: %d blocks", m.FS.Usage(), m.FS.Disk().HeldBlocks())
	}
	return r
}

// writeSynced opens path with flags (and O_WRONLY|O_CREAT), writes data,
// fsyncs and closes it, and returns the first error.
func writeSynced(path string, flags int, data []byte) error {
	return writeFile(path, flags, data, true)
}

// writeFile is writeSynced, with the fsync only if sync.
func writeFile(path string, flags int, data []byte, sync bool) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC|flags, 0o644)
	if err != nil {
		return err
	}
	err = writeAll(fd, data)
	if err == nil && sync {
		err = unix.Fsync(fd)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// writeSmall creates path with the 3000 bytes of pattern seed, fsyncs it
// if sync, closes it, and returns the first error.
//
// Write-through, a write that finds the arena full fails itself, so the
// fill loops fsync only now and then (each fsync is a checkpoint: a device
// sync). With the writeback cache the data reaches the file system only at
// fsync, so there every file is fsync'd, or its ENOSPC would go unseen.
func writeSmall(path string, seed uint64, sync bool) error {
	p := pattern{seed: seed, size: 3000}
	buf := make([]byte, p.size)
	p.fill(buf, 0)
	return writeFile(path, unix.O_EXCL, buf, sync)
}

// syncEvery is how often the write-through fill loops fsync (see writeSmall).
const syncEvery = 64

// checkPrefix checks that path holds pattern p's bytes: exactly p.size of
// them when exact, else a prefix of them (bytes past synced may also read
// as zeros: with the writeback cache, data that failed to reach the file
// system before a crash or ENOSPC is not promised, but it never reads as
// anything else).
func checkPrefix(t *testing.T, path string, p pattern, exact bool, synced int64) int64 {
	t.Helper()
	data, err := readAllRaw(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	n := int64(len(data))
	if exact && n != p.size || n > p.size || n < synced {
		t.Fatalf("%s holds %d bytes, want %d (exact %v, %d synced)", path, n, p.size, exact, synced)
	}
	want := make([]byte, n)
	p.fill(want, 0)
	if bytes.Equal(data, want) {
		return n // the byte loop below is slow under -race
	}
	for i := int64(0); i < n; i++ {
		if data[i] != want[i] && (i < synced || exact || data[i] != 0) {
			t.Fatalf("%s: byte %d is %#x, want %#x (%d synced)", path, i, data[i], want[i], synced)
		}
	}
	return n
}

// noSpaceArena fills the arena with small files, then tries every other
// kind of object, then frees half and writes again.
func noSpaceArena(t *testing.T, m *mounttest.Mounted, wb bool) {
	n := 0
	var err error
	for ; n < 100000; n++ {
		if err = writeSmall(m.Path(fmt.Sprint("s", n)), uint64(n), wb || n%syncEvery == 0); err != nil {
			break
		}
	}
	isNoSpace(t, "writing small file "+fmt.Sprint(n), err)
	if n < 1000 {
		t.Fatalf("only %d small files fit in a 16 MiB arena", n)
	}
	// Every other way to take arena space fails the same way (each gets a
	// few tries: a failed create may have left a little room).
	tries := map[string]func(i int) error{
		"mkdir": func(i int) error { return unix.Mkdir(m.Path(fmt.Sprint("d", i)), 0o755) },
		"symlink": func(i int) error {
			return unix.Symlink(string(bytes.Repeat([]byte("t"), 200)), m.Path(fmt.Sprint("l", i)))
		},
		"link":  func(i int) error { return unix.Link(m.Path("s0"), m.Path(fmt.Sprint("h", i))) },
		"mknod": func(i int) error { return unix.Mknod(m.Path(fmt.Sprint("p", i)), unix.S_IFIFO|0o644, 0) },
		"setxattr": func(i int) error {
			return unix.Setxattr(m.Path(fmt.Sprint("s", i)), "user.big", bytes.Repeat([]byte("x"), 2000), 0)
		},
	}
	extra := map[string]int{}
	for what, op := range tries {
		var err error
		for i := 0; i < 1000; i++ {
			if err = op(i); err != nil {
				break
			}
			extra[what]++
		}
		isNoSpace(t, what, err)
	}
	// An append that needs arena storage moves the file to the disk
	// (conquest/spill.go), which frees the arena more than it takes: with
	// the disk not full, appends go on succeeding (until the disk fills:
	// ENOSPC is also right).
	appended := 0
	for i := 0; i < 200; i++ {
		err := writeSynced(m.Path(fmt.Sprint("s", i)), unix.O_APPEND, bytes.Repeat([]byte("a"), 8192))
		if err != nil {
			isNoSpace(t, "append", err)
			break
		}
		appended++
	}
	t.Logf("%d small files filled the arena; then succeeded before ENOSPC: %v; %d appends", n, extra, appended)
	// The file whose write failed holds a prefix of its bytes, if it exists.
	if _, err := readAllRaw(m.Path(fmt.Sprint("s", n))); err == nil {
		checkPrefix(t, m.Path(fmt.Sprint("s", n)), pattern{seed: uint64(n), size: 3000}, false, 0)
	}
	// Free half (none of those touched by the tries above), write again.
	for i := 1000; i < n; i += 2 {
		if err := unix.Unlink(m.Path(fmt.Sprint("s", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < (n-1000)/4; i++ {
		path := m.Path(fmt.Sprint("again", i))
		err := writeSmall(path, uint64(1e6+i), wb || i%syncEvery == 0)
		// The kernel forgets unlinked inodes asynchronously; give it time.
		for deadline := time.Now().Add(10 * time.Second); errors.Is(err, unix.ENOSPC) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			unix.Unlink(path)
			err = writeSmall(path, uint64(1e6+i), wb || i%syncEvery == 0)
		}
		if err != nil {
			t.Fatalf("after freeing half the small files, writing file %d: %v", i, err)
		}
	}
	// Everything written completely is intact after a remount: the files
	// the appends above reached hold their 3000 bytes, then appended ones
	// (or, for the append that failed, zeros where its data did not land).
	m.Remount()
	for i := 0; i < n; i++ {
		if i >= 1000 && i%2 == 0 {
			continue // unlinked
		}
		path := m.Path(fmt.Sprint("s", i))
		if i >= 1000 {
			checkPrefix(t, path, pattern{seed: uint64(i), size: 3000}, true, 3000)
			continue
		}
		data, err := readAllRaw(path)
		if err != nil || len(data) < 3000 {
			t.Fatalf("%s: %d bytes, %v", path, len(data), err)
		}
		want := make([]byte, 3000)
		pattern{seed: uint64(i), size: 3000}.fill(want, 0)
		if !bytes.Equal(data[:3000], want) || len(bytes.Trim(data[3000:], "a\x00")) != 0 {
			t.Fatalf("%s: its bytes changed (%d bytes)", path, len(data))
		}
	}
	for i := 0; i < (n-1000)/4; i++ {
		checkPrefix(t, m.Path(fmt.Sprint("again", i)), pattern{seed: uint64(1e6 + i), size: 3000}, true, 3000)
	}
	// Clear the arena for the disk phase.
	ents, err := os.ReadDir(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Remove(m.Path(e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// noSpaceDisk writes a large file until the disk is full, fsyncing every 4
// MiB, then checks it after a remount, frees it and writes again.
func noSpaceDisk(t *testing.T, m *mounttest.Mounted, wb bool) {
	const chunk = 1 << 20
	p := pattern{seed: 7777, size: 1 << 30}
	path := m.Path("big")
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, chunk)
	var written, synced int64
	for written < p.size {
		p.fill(buf, written)
		var n int
		if n, err = unix.Pwrite(fd, buf, written); err != nil {
			break
		}
		written += int64(n)
		if written%(4<<20) == 0 {
			if err = unix.Fsync(fd); err != nil {
				break
			}
			synced = written
		}
	}
	isNoSpace(t, fmt.Sprintf("writing a large file at %d", written), err)
	// An fsync that failed reports its error once (as on every Linux file
	// system), so a later one that succeeds promises nothing about the data
	// the failed one lost: only a write that failed leaves fsync meaningful.
	fsyncFailed := synced != written && written%(4<<20) == 0
	if err := unix.Fsync(fd); err == nil && !fsyncFailed {
		synced = written
	} else if err != nil {
		isNoSpace(t, "fsync after ENOSPC", err)
	}
	if err := unix.Close(fd); err != nil {
		isNoSpace(t, "close after ENOSPC", err)
	}
	if synced < 16<<20 {
		t.Fatalf("only %d bytes fit on a 32 MiB disk", synced)
	}
	t.Logf("disk full after %d bytes written, %d fsync'd", written, synced)
	m.Remount()
	// Write-through: every byte whose write returned is there, and nothing
	// more. Writeback: everything fsync'd, then the file's own bytes or zeros.
	p.size = written
	size := checkPrefix(t, path, p, !wb, synced)
	overwriteFull(t, m, path, p, size, synced, wb)
	if err := unix.Unlink(path); err != nil {
		t.Fatal(err)
	}
	// The freed blocks are reused: a new 8 MiB file fits (after the kernel
	// has forgotten the unlinked one).
	q := pattern{seed: 8888, size: 8 << 20}
	data := make([]byte, q.size)
	q.fill(data, 0)
	write := func() error { return writeSynced(m.Path("again"), unix.O_TRUNC, data) }
	err = write()
	for deadline := time.Now().Add(10 * time.Second); errors.Is(err, unix.ENOSPC) && time.Now().Before(deadline); err = write() {
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("writing 8 MiB after freeing the disk: %v", err)
	}
	m.Remount()
	checkPrefix(t, m.Path("again"), q, true, q.size)
}

// overwriteFull rewrites up to 8 MiB of the fsync'd part of the file at
// path, which filled the disk (written with p, size bytes now, synced of them fsync'd: all of
// them write-through), with other data in 128 KiB writes, as ext4
// overwrites in place: the disk keeps blocks that only copy-on-write may
// take, and each sync gives the old copies back (diskstore's overwrite
// reserve). Growing the file still fails with ENOSPC. After a remount the
// file holds the new data, then what it held. (With the writeback cache,
// what follows the fsync'd part may be zeros, holes whose writing is
// growth.)
func overwriteFull(t *testing.T, m *mounttest.Mounted, path string, p pattern, size, synced int64, wb bool) {
	t.Helper()
	// 8 MiB: 8 times the reserve of this 32 MiB disk, so the overwrite
	// lives on the syncs that give blocks back.
	over := min(synced, 8<<20)
	q := pattern{seed: 9999, size: over}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 128<<10)
	for off := int64(0); off < over; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), over-off)]
		q.fill(b, off)
		if _, err := unix.Pwrite(fd, b, off); err != nil {
			unix.Close(fd)
			t.Fatalf("overwriting %d bytes at %d of a file that filled the disk: %v\n%s", len(b), off, err, spaceReport(m))
		}
	}
	if err := unix.Fsync(fd); err != nil {
		unix.Close(fd)
		t.Fatalf("fsync after overwriting %d bytes of the file that filled the disk: %v", over, err)
	}
	// Growth may not take the blocks kept for overwrites. With the
	// writeback cache the write lands in the page cache and its fsync says
	// ENOSPC.
	_, err = unix.Pwrite(fd, buf, size)
	if err == nil && wb {
		err = unix.Fsync(fd)
	}
	isNoSpace(t, "growing the file that filled the disk", err)
	if err := unix.Close(fd); err != nil {
		isNoSpace(t, "close after ENOSPC", err)
	}
	if err := unix.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	m.Remount()
	data, err := readAllRaw(path)
	if err != nil || int64(len(data)) != size {
		t.Fatalf("after the overwrite: %d bytes (%v), want %d", len(data), err, size)
	}
	want := make([]byte, size)
	p.fill(want, 0)
	q.fill(want[:over], 0)
	for i := range want {
		if i == 0 && bytes.Equal(data, want) {
			break // the byte loop is slow under -race
		}
		if data[i] != want[i] && (int64(i) < synced || data[i] != 0) {
			t.Fatalf("after the overwrite: byte %d is %#x, want %#x (%d overwritten, %d fsync'd before)", i, data[i], want[i], over, synced)
		}
	}
	t.Logf("overwrote %d bytes of a %d-byte file that filled the disk", over, size)
}

// TestArenaBackingFull: the arena image is a sparse file on a file system
// that fills before the arena does (a 16 MiB tmpfs under a 64 MiB arena). A
// store to a page that file system cannot back would kill the daemon
// (SIGBUS); the arena reserves blocks before it hands pages out, so the full
// file system is ENOSPC, as a full arena is, and the mount lives on:
// everything written before reads back, and freeing files makes room.
func TestArenaBackingFull(t *testing.T) {
	cacheModes(t, func(t *testing.T, wb bool) {
		small, ok := posixtest.MountTmpfs(t, 16<<20)
		if !ok {
			t.Skip("cannot mount a tmpfs")
		}
		m := mountNew(t, filepath.Join(small, "pram.img"), filepath.Join(t.TempDir(), "disk.img"), 64<<20, wb)
		noSpaceArena(t, m, wb)
		var st unix.Statfs_t
		if err := unix.Statfs(small, &st); err != nil || st.Bfree*uint64(st.Bsize) > 4<<20 {
			t.Errorf("the tmpfs under the arena has %d bytes free (%v): the arena filled before it did", st.Bfree*uint64(st.Bsize), err)
		}
	})
}

// TestFreeOnFullArena deletes and cuts short large files through a mount
// whose arena is full. Each such free returns disk extents that merge with
// nothing, so the disk's free map (in the arena) needs room for a record:
// the heap keeps a reserve that only frees may take. Every rm and truncate
// must succeed, free its space at once (the live check finds no orphan left
// behind), and keep the cut files' data. df shows the reserve as free but not
// available, as ext4 shows its reserved blocks.
func TestFreeOnFullArena(t *testing.T) {
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img")
	if err := conquest.Mkfs(pram, disk, conquest.MkfsOptions{PramSize: 4 << 20, DiskSize: 64 << 20,
		LargeFileThreshold: 16 << 10, DiskBlockSize: 4096}); err != nil {
		t.Fatalf("mkfs: %v", err)
	}
	m := mount(t, mounttest.WithImages(pram, disk))
	const files, size = 1200, 20 << 10
	path := func(i int) string { return filepath.Join(m.Dir, fmt.Sprintf("L%d", i)) }
	for i := range files {
		p := pattern{seed: uint64(i), size: size}
		buf := make([]byte, size)
		p.fill(buf, 0)
		if err := writeSynced(path(i), unix.O_EXCL, buf); err != nil {
			t.Fatalf("large file %d: %v", i, err)
		}
	}
	filled := 0
	for ; ; filled++ {
		err := writeSmall(filepath.Join(m.Dir, fmt.Sprintf("s%d", filled)), uint64(filled), filled%syncEvery == 0)
		if err != nil {
			isNoSpace(t, "creating a small file", err)
			break
		}
	}
	for i := 0; ; i++ {
		fd, err := unix.Open(filepath.Join(m.Dir, fmt.Sprintf("e%d", i)), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			isNoSpace(t, "creating an empty file", err)
			break
		}
		unix.Close(fd)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(m.Dir, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d small files fill the arena; df: %d blocks free, %d available", filled, st.Bfree, st.Bavail)
	if st.Bfree <= st.Bavail {
		t.Errorf("full arena: df shows %d blocks free and %d available, no reserve", st.Bfree, st.Bavail)
	}
	for i := 0; i < files; i += 2 {
		if i%4 == 0 {
			if err := unix.Truncate(path(i), 9000); err != nil {
				t.Fatalf("truncating large file %d on a full arena: %v", i, err)
			}
		} else if err := unix.Unlink(path(i)); err != nil {
			t.Fatalf("removing large file %d on a full arena: %v", i, err)
		}
	}
	check(t, m, "after the frees on a full arena")
	for i := 0; i < files; i += 4 {
		got, err := os.ReadFile(path(i))
		want := make([]byte, size)
		(&pattern{seed: uint64(i), size: size}).fill(want, 0)
		if err != nil || !bytes.Equal(got, want[:9000]) {
			t.Fatalf("large file %d cut to 9000 bytes: %d bytes, %v, or wrong data", i, len(got), err)
		}
	}
	m.Remount()
	check(t, m, "after a remount")
}

// TestFallocateNoSpaceThroughMount: a fallocate that runs out of disk after
// it reserved some leaves the file's size as it was, as the kernel, which
// keeps its cached size after a failed FALLOCATE, still shows it; after a
// remount the file has that size too, and st_blocks showed the reservation
// until the last close. The daemon used to extend the size
// over what it had reserved (as ext4 does): the mount showed 921,600 bytes
// until the kernel forgot the inode, then 33,030,145.
func TestFallocateNoSpaceThroughMount(t *testing.T) {
	cacheModes(t, func(t *testing.T, wb bool) {
		dir := t.TempDir()
		m := mountNew(t, filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img"), 16<<20, wb)
		path := m.Path("f")
		data := bytes.Repeat([]byte("z"), 900<<10)
		if err := writeSynced(path, 0, data); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Every failure below comes after the close: an open file would
		// hold the unmount up.
		var st0, st unix.Stat_t
		err = unix.Fstat(fd, &st0)
		ferr := unix.Fallocate(fd, 0, 1, 100<<20)
		if err == nil {
			err = unix.Fstat(fd, &st)
		}
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		isNoSpace(t, "fallocate of 100 MiB", ferr)
		// What the steps before the failed one reserved (most of the 32 MiB
		// disk) is given back at once, and st_blocks says so (the daemon
		// drops the kernel's cached attributes after a failed fallocate).
		if st.Blocks >= st0.Blocks+(1<<20)/512 {
			t.Fatalf("st_blocks %d after a failed fallocate, %d before: what it reserved was not given back", st.Blocks, st0.Blocks)
		}
		if st.Size != int64(len(data)) {
			t.Fatalf("size after a failed fallocate %d, want %d", st.Size, len(data))
		}
		m.Remount()
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("after a remount: %d bytes (%v), want the %d written", len(got), err, len(data))
		}
	})
}

// TestCreateAfterRemoveThroughMount fills a 16 MiB arena with empty files
// until a create fails with ENOSPC (new inodes stop short of the arena kept
// for the disk's free map, as an ext4 runs out of inodes), then removes
// one file at a time: as on ext4, each remove must make room for one
// create, in another directory. It used to take 16 to 32 removes. The
// kernel forgets a removed inode a moment after the unlink, so a create
// that fails is retried for a while.
func TestCreateAfterRemoveThroughMount(t *testing.T) {
	t.Parallel() // see doc.go, "Time"
	dir := t.TempDir()
	m := mountNew(t, filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img"), 16<<20, false)
	if err := os.Mkdir(m.Path("many"), 0o755); err != nil {
		t.Fatal(err)
	}
	create := func(path string) error {
		fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			err = unix.Close(fd)
		}
		return err
	}
	n := 0
	var err error
	for ; n < 200000; n++ {
		if err = create(m.Path(fmt.Sprintf("many/%07d", n))); err != nil {
			break
		}
	}
	isNoSpace(t, fmt.Sprintf("create %d", n), err)
	var st unix.Statfs_t
	if err := unix.Statfs(m.Dir, &st); err != nil || st.Ffree != 0 {
		t.Errorf("statfs shows %d free inodes when a create fails with ENOSPC (%v)", st.Ffree, err)
	}
	for k := 0; k < 10; k++ {
		if err := unix.Unlink(m.Path(fmt.Sprintf("many/%07d", k))); err != nil {
			t.Fatal(err)
		}
		path := m.Path(fmt.Sprint("new", k))
		err := create(path)
		for deadline := time.Now().Add(5 * time.Second); errors.Is(err, unix.ENOSPC) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			err = create(path)
		}
		if err != nil {
			t.Fatalf("%d empty files filled the arena; after removing %d, a create: %v (%s)", n, k+1, err, spaceReport(m))
		}
	}
	t.Logf("%d empty files filled the arena; each of 10 removes made room for a create", n)
}
