package fusefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
	"conquest/internal/mounttest"
	"conquest/internal/posixtest"
)

// cacheModes are the two page-cache policies; every cache-correctness test
// runs under both.
var cacheModes = []struct {
	name string
	opt  fusefs.Options
}{
	{"writethrough", fusefs.Options{}},
	{"writeback", fusefs.Options{WritebackCache: true}},
}

func forEachCacheMode(t *testing.T, extra fusefs.Options, fn func(t *testing.T, m *mounttest.Mounted)) {
	for _, cm := range cacheModes {
		t.Run(cm.name, func(t *testing.T) {
			o := extra
			o.WritebackCache = cm.opt.WritebackCache
			fn(t, mounttest.Mount(t, mounttest.WithFuseOptions(o)))
		})
	}
}

// A failed lookup is cached as a negative entry: repeating it costs no
// LOOKUP, and whatever then creates the name makes it visible at once.
func TestNegativeEntry(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		p := m.Path
		var st unix.Stat_t
		lookups := func() uint64 { return m.Server.Stats()["LOOKUP"] }

		wantErrno(t, "first stat", unix.Stat(p("x"), &st), syscall.ENOENT)
		before := lookups()
		wantErrno(t, "second stat", unix.Stat(p("x"), &st), syscall.ENOENT)
		if after := lookups(); after != before {
			t.Errorf("repeated failed stat sent %d LOOKUPs, want 0 (negative entry not cached)", after-before)
		}
		// Create after the failed lookup: no LOOKUP, and visible.
		before = lookups()
		must(t, os.WriteFile(p("x"), []byte("data"), 0o644))
		if after := lookups(); after != before {
			t.Errorf("create after a cached failed lookup sent %d LOOKUPs", after-before)
		}
		if b, err := os.ReadFile(p("x")); err != nil || string(b) != "data" {
			t.Errorf("read after create: %q %v", b, err)
		}
		if names := readdirnames(t, m.Dir); !slices.Contains(names, "x") {
			t.Errorf("readdir after create = %v", names)
		}

		// Every other way a name comes to exist, after a failed lookup.
		must(t, os.WriteFile(p("src"), []byte("s"), 0o644))
		makers := map[string]func(string) error{
			"mkdir":   func(n string) error { return os.Mkdir(n, 0o755) },
			"symlink": func(n string) error { return os.Symlink("src", n) },
			"link":    func(n string) error { return os.Link(p("src"), n) },
			"mknod":   func(n string) error { return unix.Mkfifo(n, 0o644) },
			"rename": func(n string) error {
				must(t, os.WriteFile(n+".tmp", nil, 0o644))
				return os.Rename(n+".tmp", n)
			},
		}
		for kind, mk := range makers {
			name := p("new-" + kind)
			wantErrno(t, kind+": stat before", unix.Lstat(name, &st), syscall.ENOENT)
			must(t, mk(name))
			if err := unix.Lstat(name, &st); err != nil {
				t.Errorf("%s: created name not visible: %v", kind, err)
			}
		}
		// Unlink makes the name negative again; recreating it works.
		must(t, os.Remove(p("x")))
		wantErrno(t, "stat after unlink", unix.Stat(p("x"), &st), syscall.ENOENT)
		must(t, os.WriteFile(p("x"), []byte("again"), 0o644))
		if b, err := os.ReadFile(p("x")); err != nil || string(b) != "again" {
			t.Errorf("recreated: %q %v", b, err)
		}
	})
}

// With the negative cache off, every failed lookup reaches the server.
func TestNegativeEntryDisabled(t *testing.T) {
	m := mounttest.Mount(t, mounttest.WithFuseOptions(fusefs.Options{NegativeTTL: -1}))
	var st unix.Stat_t
	unix.Stat(m.Path("x"), &st)
	before := m.Server.Stats()["LOOKUP"]
	wantErrno(t, "stat", unix.Stat(m.Path("x"), &st), syscall.ENOENT)
	if after := m.Server.Stats()["LOOKUP"]; after != before+1 {
		t.Errorf("failed stat sent %d LOOKUPs with negative caching off, want 1", after-before)
	}
}

// Hard links share one node id, so the kernel's cached attributes of every
// name follow a change made through any other name, and ops that change
// OTHER inodes (rename over a linked file, subdirectories changing a
// parent's nlink) leave no stale attributes behind.
func TestHardLinkAttrs(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		p := m.Path
		must(t, os.WriteFile(p("a"), []byte("12345"), 0o644))
		must(t, os.Link(p("a"), p("b")))
		must(t, os.Link(p("a"), p("c")))
		nlink := func(name string) uint64 { return uint64(stat(t, p(name)).Nlink) }
		if nlink("a") != 3 || nlink("b") != 3 {
			t.Fatalf("nlink after two links: %d %d", nlink("a"), nlink("b"))
		}
		ctime := stat(t, p("b")).Ctim
		// With the writeback cache the kernel stamps ctime itself from its
		// coarse (jiffy) clock: step past a tick.
		time.Sleep(20 * time.Millisecond)
		must(t, os.Remove(p("c")))
		if nlink("a") != 2 || nlink("b") != 2 {
			t.Errorf("nlink after unlink of another name: a=%d b=%d, want 2", nlink("a"), nlink("b"))
		}
		if c := stat(t, p("b")).Ctim; c == ctime {
			t.Errorf("ctime of b unchanged by unlink of c")
		}

		// A write and a chmod through one name show through the other.
		f, err := os.OpenFile(p("b"), os.O_WRONLY|os.O_APPEND, 0)
		must(t, err)
		_, err = f.Write([]byte("678"))
		must(t, err)
		must(t, f.Close())
		must(t, os.Chmod(p("b"), 0o600))
		if st := stat(t, p("a")); st.Size != 8 || st.Mode&0o777 != 0o600 {
			t.Errorf("through the other name: size %d mode %#o", st.Size, st.Mode&0o777)
		}

		// Rename over one name of a linked inode: the survivor's nlink drops.
		must(t, os.WriteFile(p("other"), []byte("o"), 0o644))
		stat(t, p("a")) // cache a's attributes
		must(t, os.Rename(p("other"), p("b")))
		if n := nlink("a"); n != 1 {
			t.Errorf("nlink of a after rename over b = %d, want 1", n)
		}
		if b, _ := os.ReadFile(p("b")); string(b) != "o" {
			t.Errorf("b after rename = %q", b)
		}

		// Directory nlink and times of the parents.
		must(t, os.Mkdir(p("d1"), 0o755))
		must(t, os.Mkdir(p("d2"), 0o755))
		d1 := stat(t, p("d1"))
		must(t, os.Mkdir(p("d1", "sub"), 0o755))
		if st := stat(t, p("d1")); st.Nlink != 3 || st.Mtim == d1.Mtim {
			t.Errorf("parent after mkdir: nlink %d, mtime changed %v", st.Nlink, st.Mtim != d1.Mtim)
		}
		stat(t, p("d2"))
		must(t, os.Rename(p("d1", "sub"), p("d2", "sub")))
		if n1, n2 := stat(t, p("d1")).Nlink, stat(t, p("d2")).Nlink; n1 != 2 || n2 != 3 {
			t.Errorf("nlink after moving a subdirectory: d1=%d d2=%d, want 2 and 3", n1, n2)
		}

		// An open file unlinked keeps working and reports nlink 0.
		g, err := os.OpenFile(p("a"), os.O_RDWR, 0)
		must(t, err)
		must(t, os.Remove(p("a")))
		var st unix.Stat_t
		must(t, unix.Fstat(int(g.Fd()), &st))
		if st.Nlink != 0 {
			t.Errorf("fstat of an unlinked open file: nlink %d", st.Nlink)
		}
		_, err = g.WriteAt([]byte("!"), 0)
		must(t, err)
		must(t, g.Close())
	})
}

// HANDLE_KILLPRIV_V2: a write or truncate by a user without CAP_FSETID
// clears S_ISUID (and S_ISGID with group-exec), and the kernel's cached
// mode shows it at once; the kernel asks for security.capability about once
// per inode, not before every write.
func TestKillPriv(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{AllowOther: true}, func(t *testing.T, m *mounttest.Mounted) {
		if m.Server.Features()&fuse.InitHandleKillPrivV2 == 0 {
			t.Fatalf("HANDLE_KILLPRIV_V2 not negotiated: %v", m.Server.Features())
		}
		// Let user nobody reach the mount point.
		for d := filepath.Dir(m.Dir); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			must(t, os.Chmod(d, 0o755))
		}
		p := m.Path
		must(t, os.WriteFile(p("suid"), []byte("#!/bin/sh\n"), 0o644))
		must(t, unix.Chmod(p("suid"), 0o6777))
		if st := stat(t, p("suid")); st.Mode&0o7777 != 0o6777 {
			t.Fatalf("mode %#o", st.Mode&0o7777)
		}
		// Root (CAP_FSETID) keeps the bits.
		appendAs(t, -1, p("suid"))
		if st := stat(t, p("suid")); st.Mode&0o7777 != 0o6777 {
			t.Errorf("write by root changed mode to %#o", st.Mode&0o7777)
		}
		// nobody's write clears both. statx asking for the mode alone is
		// answered from the kernel's cache unless the attributes were
		// invalidated (a write only invalidates times and size).
		appendAs(t, 65534, p("suid"))
		if mode := statxMode(t, p("suid")); mode&0o7777 != 0o777 {
			t.Errorf("statx(STATX_MODE) after write by non-owner: mode %#o, want 0777 (stale cache)", mode&0o7777)
		}
		if st := stat(t, p("suid")); st.Mode&0o7777 != 0o777 {
			t.Errorf("after write by non-owner: mode %#o, want 0777", st.Mode&0o7777)
		}
		// Truncation by nobody clears them too.
		must(t, unix.Chmod(p("suid"), 0o4777))
		runAs(t, 65534, "truncate -s 0 "+p("suid"))
		if st := stat(t, p("suid")); st.Mode&0o7777 != 0o777 || st.Size != 0 {
			t.Errorf("after truncate by non-owner: mode %#o size %d", st.Mode&0o7777, st.Size)
		}

		// security.capability is asked for about once per inode, not per
		// write. The kernel forgets its "no privileges" flag (S_NOSEC) on
		// every attribute refresh from the daemon, so a loaded machine that
		// refreshes now and then asks a few more times (CI once saw 3); a
		// question per write would be 20.
		must(t, os.WriteFile(p("plain"), nil, 0o666))
		before := m.Server.Stats()["GETXATTR"]
		for range 20 {
			appendAs(t, -1, p("plain"))
		}
		if n := m.Server.Stats()["GETXATTR"] - before; n > 5 {
			t.Errorf("20 writes cost %d GETXATTRs, want at most 5 (not one per write)", n)
		}
	})
}

func statxMode(t *testing.T, path string) uint32 {
	t.Helper()
	var sx unix.Statx_t
	must(t, unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_SYNC_AS_STAT, unix.STATX_MODE, &sx))
	return uint32(sx.Mode)
}

func readdirnames(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	must(t, err)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	must(t, err)
	return names
}

// appendAs appends a byte to path in a shell running as uid (-1: as root).
func appendAs(t *testing.T, uid int, path string) {
	t.Helper()
	runAs(t, uid, "printf x >> "+path)
}

func runAs(t *testing.T, uid int, script string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s (uid %d): %v\n%s", script, uid, err, out)
	}
}

// A file's pages are kept across opens (FOPEN_KEEP_CACHE) only while a read
// would not update atime: after a modification the next open drops them, so
// the first read reaches the core and atime catches up with mtime; after
// that the pages are kept and reads cost no READ.
func TestAtimeAfterModification(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		p := m.Path("f")
		data := []byte("the same twelve bytes")
		must(t, os.WriteFile(p, data, 0o644))
		if b, err := os.ReadFile(p); err != nil || string(b) != string(data) {
			t.Fatalf("first read: %q %v", b, err)
		}
		// Rewrite in place: the page stays in the kernel's cache.
		time.Sleep(10 * time.Millisecond)
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt(data, 0)
		must(t, err)
		must(t, f.Close())
		st := stat(t, p)
		if !tsBefore(st.Atim, st.Mtim) {
			t.Fatalf("before the read: atime %v not before mtime %v", st.Atim, st.Mtim)
		}

		time.Sleep(10 * time.Millisecond)
		reads := m.Server.Stats()["READ"]
		if b, err := os.ReadFile(p); err != nil || string(b) != string(data) {
			t.Fatalf("read after rewrite: %q %v", b, err)
		}
		if m.Server.Stats()["READ"] == reads {
			t.Errorf("read after a modification was served from the page cache (no READ)")
		}
		st = stat(t, p)
		if tsBefore(st.Atim, st.Mtim) {
			t.Errorf("after the read: atime %v before mtime %v", st.Atim, st.Mtim)
		}

		// atime is current now: the cache is kept.
		reads = m.Server.Stats()["READ"]
		if b, err := os.ReadFile(p); err != nil || string(b) != string(data) {
			t.Fatalf("second read: %q %v", b, err)
		}
		if n := m.Server.Stats()["READ"] - reads; n != 0 {
			t.Errorf("read with atime current sent %d READs, want 0 (page cache dropped)", n)
		}
	})
}

func tsBefore(a, b unix.Timespec) bool {
	return a.Sec < b.Sec || (a.Sec == b.Sec && a.Nsec < b.Nsec)
}

// close(2) costs no FLUSH after the first one: it is answered ENOSYS and
// the kernel stops sending it; data written before close stays visible.
func TestNoFlush(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		must(t, os.WriteFile(m.Path("first"), []byte("x"), 0o644))
		before := m.Server.Stats()["FLUSH"]
		for i := range 10 {
			must(t, os.WriteFile(m.Path("f"), []byte{byte('a' + i)}, 0o644))
			if b, err := os.ReadFile(m.Path("f")); err != nil || len(b) != 1 || b[0] != byte('a'+i) {
				t.Fatalf("round %d: read back %q %v", i, b, err)
			}
		}
		if n := m.Server.Stats()["FLUSH"] - before; n != 0 {
			t.Errorf("20 closes sent %d FLUSHes after the first, want 0", n)
		}
	})
}

// A large file keeps its pages when atime is due: only its first page is
// dropped at open, so a read from the start reaches the core (atime catches
// up with mtime) and the rest comes from the page cache. A file of at most
// 1 MiB drops them all (since session 46: a first read anywhere in it
// updates atime, as on ext4). The data read is the data written, also
// after a rewrite in the middle.
func TestAtimeLargeFileKeepsCache(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		for _, size := range []int{512 << 10, 3 << 20} { // in the arena, on disk
			p := m.Path("big")
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(i*7 + i>>12)
			}
			must(t, os.WriteFile(p, data, 0o644))
			if b, err := os.ReadFile(p); err != nil || !slices.Equal(b, data) {
				t.Fatalf("size %d: first read differs (%v)", size, err)
			}
			time.Sleep(10 * time.Millisecond)
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			must(t, err)
			patch := []byte("rewritten in the middle")
			_, err = f.WriteAt(patch, int64(size/2))
			must(t, err)
			must(t, f.Close())
			copy(data[size/2:], patch)
			st := stat(t, p)
			if !tsBefore(st.Atim, st.Mtim) {
				t.Fatalf("size %d: before the read: atime %v not before mtime %v", size, st.Atim, st.Mtim)
			}
			time.Sleep(10 * time.Millisecond)
			reads := m.Server.Stats()["READ"]
			if b, err := os.ReadFile(p); err != nil || !slices.Equal(b, data) {
				t.Fatalf("size %d: read after the rewrite differs (%v)", size, err)
			}
			n := m.Server.Stats()["READ"] - reads
			if n == 0 {
				t.Errorf("size %d: read with atime due sent no READ", size)
			}
			// A dropped cache costs a READ per 128 KiB (4 and 24 here); a
			// kept one one or two, and now and then a few more under load
			// (seen once in about 17 runs beside another test package: 3
			// for 3 MiB), so the bound is a quarter of the dropped count.
			if limit := max(2, size/(512<<10)); size > 1<<20 && n > uint64(limit) {
				t.Errorf("size %d: read with atime due sent %d READs, more than %d: the page cache was dropped", size, n, limit)
			}
			st = stat(t, p)
			if tsBefore(st.Atim, st.Mtim) {
				t.Errorf("size %d: after the read: atime %v before mtime %v", size, st.Atim, st.Mtim)
			}
			must(t, os.Remove(p))
		}
	})
}

// A read through a descriptor opened with O_NOATIME leaves atime alone,
// small file or large; a plain read after it updates atime (checked in
// writethrough mode only: with the writeback cache the kernel stamps the
// written file's mtime with its coarse clock, which can fall before the
// atime the core gave the new file, and relatime then rightly sees no
// update due).
func TestNoAtimeOpen(t *testing.T) {
	for _, wb := range []bool{false, true} {
		name := "writethrough"
		if wb {
			name = "writeback"
		}
		t.Run(name, func(t *testing.T) {
			m := mounttest.Mount(t, mounttest.WithFuseOptions(fusefs.Options{WritebackCache: wb}))
			for _, size := range []int{100, 512 << 10} {
				p := m.Path("na")
				must(t, os.WriteFile(p, make([]byte, size), 0o644))
				before := stat(t, p).Atim
				time.Sleep(10 * time.Millisecond)
				fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
				must(t, err)
				buf := make([]byte, size)
				if n, err := unix.Read(fd, buf); err != nil || n != size {
					t.Fatalf("size %d: O_NOATIME read: %d, %v", size, n, err)
				}
				unix.Close(fd)
				if a := stat(t, p).Atim; a != before {
					t.Errorf("size %d: a read opened with O_NOATIME changed atime from %v to %v", size, before, a)
				}
				if b, err := os.ReadFile(p); err != nil || len(b) != size {
					t.Fatalf("size %d: plain read: %d bytes, %v", size, len(b), err)
				}
				if a := stat(t, p).Atim; !wb && a == before {
					t.Errorf("size %d: a plain read left a due atime at %v", size, a)
				}
				must(t, os.Remove(p))
			}
		})
	}
}

// A mount raises the kernel's read-ahead of its files to 1 MiB (bdi.go), or
// to what Options ask, or leaves the kernel's default (128 KiB) alone.
func TestReadaheadKB(t *testing.T) {
	for _, c := range []struct {
		set, want int
	}{{0, 1024}, {512, 512}, {-1, 128}} {
		m := mounttest.Mount(t, mounttest.WithFuseOptions(fusefs.Options{ReadaheadKB: c.set}))
		got, err := fusefs.ReadaheadKB(m.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("ReadaheadKB %d: the mount's read_ahead_kb is %d, want %d", c.set, got, c.want)
		}
		m.Unmount()
	}
}

// The kernel cannot be told a maximum file size below its own (2^63-1), so
// with the writeback cache it takes a write past Conquest's maximum M into
// its page cache. When it writes those pages back, the daemon stores what
// lies below M and answers the WRITE with EFBIG rather than a short count
// (which the kernel would take for success, losing the rest): fsync
// reports the loss, and the file holds the bytes below M. Write-through,
// the same write(2) is short, as on ext4.
func TestWritePastMaxFileSize(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		fd, err := unix.Open(m.Path("max"), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
		must(t, err)
		defer unix.Close(fd)
		maxSize := posixtest.MaxFileSize(t, fd)
		n, err := unix.Pwrite(fd, []byte("abcd"), maxSize-2)
		if m.Server.Features()&fuse.InitWritebackCache != 0 {
			if err != nil || n != 4 {
				t.Fatalf("pwrite across the maximum into the page cache: %d, %v", n, err)
			}
			if err := unix.Fsync(fd); !errors.Is(err, unix.EFBIG) {
				t.Fatalf("fsync after writing back past the maximum: %v, want EFBIG", err)
			}
		} else {
			if err != nil || n != 2 {
				t.Fatalf("pwrite across the maximum: %d, %v, want a short write of 2", n, err)
			}
			must(t, unix.Fsync(fd))
		}
		a, err := m.FS.Lookup(conquest.RootIno, "max")
		must(t, err)
		buf := make([]byte, 4)
		got, err := m.FS.Read(a.Ino, 0, maxSize-4, buf)
		if err != nil || a.Size != uint64(maxSize) || string(buf[:got]) != "\x00\x00ab" {
			t.Fatalf("the daemon's file: size %d (want %d), last bytes %q, %v", a.Size, maxSize, buf[:got], err)
		}
	})
}

// The times a file shows are the times it keeps across a remount. With the
// writeback cache the kernel owns a file's times and sends them with a
// SETATTR of its own, which may reach the daemon before the WRITE of the
// pages they describe: that WRITE must not replace them (it did, with the
// daemon's later clock, for every file made by O_TMPFILE, write and linkat).
// A separate daemon serves the mount: the mmap case faults pages in, which
// this process could not serve while a garbage collection stops it.
func TestTimesSurviveRemount(t *testing.T) {
	for _, args := range [][]string{nil, {"--writeback-cache"}} {
		t.Run(fmt.Sprint(args), func(t *testing.T) { testTimesSurviveRemount(t, mounttest.MountProcess(t, mounttest.WithArgs(args...))) })
	}
}

func testTimesSurviveRemount(t *testing.T, m *mounttest.Mounted) {
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	makers := map[string]func(p string){
		"tmpfile": func(p string) {
			fd, err := unix.Open(m.Path(), unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			must(t, err)
			defer unix.Close(fd)
			if _, err := unix.Write(fd, data); err != nil {
				t.Fatal(err)
			}
			must(t, unix.Linkat(fd, "", unix.AT_FDCWD, p, unix.AT_EMPTY_PATH))
		},
		"write": func(p string) { must(t, os.WriteFile(p, data, 0o644)) },
		"mmap": func(p string) {
			f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
			must(t, err)
			defer f.Close()
			must(t, f.Truncate(int64(len(data))))
			b, err := unix.Mmap(int(f.Fd()), 0, len(data), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			must(t, err)
			posixtest.Prefault(b, true) // no page fault in user code (a deadlock with the collector)
			copy(b, data)
			must(t, unix.Munmap(b))
		},
		"utimens": func(p string) {
			f, err := os.Create(p)
			must(t, err)
			defer f.Close()
			if _, err := f.Write(data); err != nil {
				t.Fatal(err)
			}
			ts := []unix.Timespec{{Sec: 1000000000, Nsec: 5}, {Sec: 1000000001, Nsec: 7}}
			must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0))
		},
	}
	shown := map[string]unix.Stat_t{}
	for name, mk := range makers {
		for i := range 20 {
			p := m.Path(name + string(rune('a'+i)))
			mk(p)
			shown[p] = stat(t, p)
		}
	}
	checkTimesKept(t, m, shown, "")

}

// The last close of a large file written through it trims the disk space
// preallocated past its end: the kernel's cached st_blocks, fetched while
// the file was open, must not keep showing it (it did, for the attribute
// lifetime of an hour, until a remount showed the trimmed count).
func TestBlocksAfterLastClose(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		for i, size := range []int{1<<20 + 100<<10, 3<<20 + 5} {
			p := m.Path(fmt.Sprint("f", i))
			f, err := os.Create(p)
			must(t, err)
			data := make([]byte, size)
			for j := range data {
				data[j] = byte(j*7 + 1)
			}
			if _, err := f.Write(data); err != nil {
				t.Fatal(err)
			}
			must(t, f.Sync())
			var open unix.Stat_t
			must(t, unix.Fstat(int(f.Fd()), &open)) // cached with the preallocation
			must(t, f.Close())
			var sfs unix.Statfs_t
			must(t, unix.Statfs(m.Dir, &sfs)) // waits for the RELEASE
			// That wait was best effort before session 38 (a RELEASE
			// read but not yet registered was missed; frees.go): under
			// load the kernel and the daemon could still agree on the
			// untrimmed count here, and the trim came after
			// (TestBlocksAfterLastClose failed so in about one run in
			// fifty beside another package). It is bounded still (by
			// freeWait). So also
			// wait, up to 5 s, for the daemon to hold less than 64 KiB past
			// the end: a trimmed file holds less than a block (16 KiB)
			// there, the preallocation of the 3 MiB file (4 MiB) almost
			// 1 MiB.
			var st unix.Stat_t
			for range 250 {
				st = stat(t, p)
				a, err := m.FS.GetAttr(conquest.Ino(st.Ino))
				must(t, err)
				if uint64(st.Blocks) == a.Blocks && a.Blocks*512 < uint64(size)+64<<10 {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			m.Remount()
			if now := stat(t, p); now.Blocks != st.Blocks || now.Size != st.Size {
				t.Errorf("%d-byte file: %d blocks while open, %d after close, %d after a remount (size %d, %d)",
					size, open.Blocks, st.Blocks, now.Blocks, st.Size, now.Size)
			}
		}
	})
}

// With the writeback cache the kernel stamps a file's times itself before
// it sends a FALLOCATE (file_modified), keeps its own values whatever the
// daemon reports, and sends them later with a SETATTR, or never when its
// coarse clock has not moved since the times were last set. The daemon's
// own, later stamp then stayed in the arena, and a remount showed it.
func TestFallocateTimesSurviveRemount(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		modes := []uint32{0, unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE,
			unix.FALLOC_FL_ZERO_RANGE, unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE}
		shown, sameTick := changeStampedFiles(t, m, func(i int, f *os.File) {
			must(t, unix.Fallocate(int(f.Fd()), modes[i%len(modes)], 4096, 100000))
		})
		checkTimesKept(t, m, shown, fmt.Sprintf(" (%d fallocated in the tick of their last times)", sameTick))
	})
}

// The same for a write that bypasses the kernel's cache (O_DIRECT; also a
// write that must clear set-user-ID): with the writeback cache the kernel
// stamps the times before it sends the WRITE, and the daemon must not
// stamp its own.
func TestDirectWriteTimesSurviveRemount(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		shown, sameTick := changeStampedFiles(t, m, func(_ int, f *os.File) {
			fd, err := unix.Open(f.Name(), unix.O_WRONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
			must(t, err)
			defer unix.Close(fd)
			if _, err := unix.Pwrite(fd, make([]byte, 4096), 8192); err != nil {
				t.Fatal(err)
			}
		})
		checkTimesKept(t, m, shown, fmt.Sprintf(" (%d written in the tick of their last times)", sameTick))
	})
}

// changeStampedFiles makes files of 20,000 bytes, each written, synced
// and stamped UTIME_NOW (so the kernel's times are clean), then changed by
// change through the open file, until 10 changes left the kernel's mtime
// as it was (then the kernel sends no later SETATTR of its own) or 100
// files are made. It returns what stat showed of each after its close,
// and how many changes fell in the tick of the file's last times.
func changeStampedFiles(t *testing.T, m *mounttest.Mounted, change func(i int, f *os.File)) (map[string]unix.Stat_t, int) {
	t.Helper()
	data := make([]byte, 20000)
	now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	shown := map[string]unix.Stat_t{}
	sameTick := 0
	for i := 0; i < 100 && sameTick < 10; i++ {
		p := m.Path(fmt.Sprint("f", i))
		f, err := os.Create(p)
		must(t, err)
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		must(t, f.Sync())
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, now, 0))
		var before, after unix.Stat_t
		must(t, unix.Fstat(int(f.Fd()), &before))
		change(i, f)
		must(t, unix.Fstat(int(f.Fd()), &after))
		must(t, f.Close())
		if after.Mtim == before.Mtim {
			sameTick++
		}
		shown[p] = stat(t, p)
	}
	return shown, sameTick
}

// checkTimesKept remounts m and reports every file of shown whose times
// or size differ from what stat showed of it before; note qualifies the
// count.
func checkTimesKept(t *testing.T, m *mounttest.Mounted, shown map[string]unix.Stat_t, note string) {
	t.Helper()
	m.Remount()
	bad := 0
	for p, was := range shown {
		if now := stat(t, p); now.Mtim != was.Mtim || now.Ctim != was.Ctim || now.Size != was.Size {
			if bad++; bad <= 5 {
				t.Errorf("%s: mtime %v ctime %v size %d before the remount, %v %v %d after",
					filepath.Base(p), was.Mtim, was.Ctim, was.Size, now.Mtim, now.Ctim, now.Size)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d files%s changed times across the remount", bad, len(shown), note)
	}
}

// With the writeback cache, a write of part of a page the kernel has not
// cached makes it read the page first, through the writer's handle. That
// READ is no read(2): through a write-only handle it must leave atime
// alone, as ext4 does (`echo >> f` does not read f). It updated it, and the
// kernel, which asks for atime again only after reads of its own, showed
// the old one until a remount (or drop_caches) showed the new one.
// A separate daemon serves the mount, as the harness that found it used.
func TestAtimeOfPageFillForWrite(t *testing.T) {
	for _, args := range [][]string{nil, {"--writeback-cache"}} {
		t.Run(fmt.Sprint(args), func(t *testing.T) {
			testAtimeOfPageFillForWrite(t, mounttest.MountProcess(t, mounttest.WithArgs(args...)))
		})
	}
}

func testAtimeOfPageFillForWrite(t *testing.T, m *mounttest.Mounted) {
	old := unix.Timespec{Sec: 1000000000, Nsec: 5}
	flagsOf := []int{unix.O_WRONLY, unix.O_WRONLY | unix.O_APPEND, unix.O_RDWR}
	for _, flags := range flagsOf {
		p := m.Path(fmt.Sprint("f", flags))
		must(t, os.WriteFile(p, make([]byte, 10000), 0o644))
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{old, {Nsec: unix.UTIME_OMIT}}, 0))
	}
	m.Remount() // nothing cached: the kernel looks the files up again
	shown := map[int]unix.Stat_t{}
	for _, flags := range flagsOf {
		p := m.Path(fmt.Sprint("f", flags))
		fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0)
		must(t, err)
		if _, err := unix.Pwrite(fd, []byte("hi"), 5); err != nil {
			t.Fatal(err)
		}
		must(t, unix.Close(fd))
		shown[flags] = stat(t, p)
		if flags&unix.O_ACCMODE == unix.O_WRONLY && shown[flags].Atim != old {
			t.Errorf("flags %#o: atime %v after a write, want %v", flags, shown[flags].Atim, old)
		}
	}
	m.Remount()
	for _, flags := range flagsOf {
		if now := stat(t, m.Path(fmt.Sprint("f", flags))); now.Atim != shown[flags].Atim {
			t.Errorf("flags %#o: atime %v after a write, %v after a remount", flags, shown[flags].Atim, now.Atim)
		}
	}
}

// Disk blocks a write took ahead of itself inside a file's size, and never
// wrote, are given back at the last close, so that a sparse file holds
// about what was written into it (a 1-byte write at offset 0 of a file
// truncated up to 20 MiB held 1 MiB); blocks fallocate reserved stay.
func TestSparseBlocksAfterLastClose(t *testing.T) {
	forEachCacheMode(t, fusefs.Options{}, func(t *testing.T, m *mounttest.Mounted) {
		for _, c := range []struct {
			name      string
			size      int64
			write     func(f *os.File)
			min, max  uint64 // bytes of blocks held after the last close
			firstByte byte
		}{
			{"one byte at 0", 20 << 20, func(f *os.File) {
				_, err := f.WriteAt([]byte{7}, 0)
				must(t, err)
			}, 1, 64 << 10, 7},
			{"3 MiB from 0", 64 << 20, func(f *os.File) {
				for off := int64(0); off < 3<<20; off += 1 << 20 {
					_, err := f.WriteAt(bytes.Repeat([]byte{9}, 1<<20), off)
					must(t, err)
				}
			}, 3 << 20, 3<<20 + 64<<10, 9},
			{"fallocated after the write", 20 << 20, func(f *os.File) {
				_, err := f.WriteAt([]byte{5}, 0)
				must(t, err)
				must(t, f.Sync()) // the write reaches the daemon before the fallocate
				must(t, unix.Fallocate(int(f.Fd()), 0, 0, 512<<10))
			}, 512 << 10, 2 << 20, 5},
		} {
			p := m.Path(strings.ReplaceAll(c.name, " ", "-"))
			f, err := os.Create(p)
			must(t, err)
			must(t, f.Truncate(c.size))
			c.write(f)
			must(t, f.Close())
			var st unix.Stat_t
			var held uint64
			for range 250 { // the RELEASE comes after close returns
				st = stat(t, p)
				a, err := m.FS.GetAttr(conquest.Ino(st.Ino))
				must(t, err)
				held = a.Blocks * 512
				if uint64(st.Blocks) == a.Blocks && held <= c.max {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if held < c.min || held > c.max || uint64(st.Blocks)*512 != held {
				t.Errorf("%s: %d bytes of blocks held after the last close (the kernel says %d), want %d to %d",
					c.name, held, st.Blocks*512, c.min, c.max)
			}
			m.Remount()
			if now := stat(t, p); now.Blocks != st.Blocks || now.Size != c.size {
				t.Errorf("%s: %d blocks and size %d after a remount, %d and %d before", c.name, now.Blocks, now.Size, st.Blocks, st.Size)
			}
			got, err := os.ReadFile(p)
			must(t, err)
			if len(got) != int(c.size) || got[0] != c.firstByte || bytes.Count(got, []byte{0}) < int(c.size)-3<<20 {
				t.Errorf("%s: the file reads wrong after a remount", c.name)
			}
		}
	})
}
