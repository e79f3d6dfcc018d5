package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/fusefs"
)

// mount.fuse3's command lines become `conquest mount` ones, and an option a
// mount cannot honour is refused by name.
func TestHelperArgs(t *testing.T) {
	isCmd := func(s string) bool { return newApp(nil, nil).Command(s) != nil }
	for _, tc := range []struct {
		args   []string
		helper bool
		want   []string // nil: an error mentioning err
		err    string
	}{
		{args: []string{"conquest", "/p", "/mnt", "-o", "rw,disk=/d,dev,suid"}, helper: true,
			want: []string{"conquest", "mount", "--pram", "/p", "--disk", "/d", "/mnt"}},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d,ro,nosuid,nodev,noexec,noatime,nodiratime,writeback_cache,cached_writes,commit=5,private", "-t", "fuse.conquest"}, helper: true,
			want: []string{"conquest", "mount", "--pram", "/p", "--disk", "/d", "--read-only", "--nosuid", "--nodev", "--noexec", "--noatime", "--writeback-cache", "--cached-writes", "--private", "--commit=5s", "/mnt"}},
		// mount(8) keeps "private" (a propagation flag): fstab's is noallow_other.
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d,noallow_other"}, helper: true,
			want: []string{"conquest", "mount", "--pram", "/p", "--disk", "/d", "--private", "/mnt"}},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d,noallow_other,allow_other"}, helper: true,
			want: []string{"conquest", "mount", "--pram", "/p", "--disk", "/d", "/mnt"}},
		// Later options win, as with mount(8); mount(8)'s own are dropped.
		{args: []string{"conquest", "/p", "/mnt", "-o", "ro,noatime,disk=/d,nofail,_netdev,x-systemd.automount,defaults,rw,relatime,commit=250ms", "-v", "-n"}, helper: true,
			want: []string{"conquest", "mount", "--pram", "/p", "--disk", "/d", "--commit=250ms", "/mnt"}},
		{args: []string{"conquest", "default", "/mnt", "-o", "rw,dev,suid"}, helper: true,
			want: []string{"conquest", "mount", "/mnt"}},
		{args: []string{"/sbin/mount.fuse.conquest", "/p", "/mnt", "-o", "disk=/d"}, helper: true,
			want: []string{"/sbin/mount.fuse.conquest", "mount", "--pram", "/p", "--disk", "/d", "/mnt"}},
		// Under a helper's name (helperName), -o may be missing.
		{args: []string{"/sbin/mount.conquest", "default", "/mnt"}, helper: false,
			want: []string{"/sbin/mount.conquest", "mount", "/mnt"}},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d,bogus"}, helper: true, err: `mount option "bogus": unknown`},
		{args: []string{"conquest", "/p", "/mnt", "-o", "rw"}, helper: true, err: "/p: the disk is missing: add disk=PATH"},
		{args: []string{"conquest", "default", "/mnt", "-o", "disk=/d"}, helper: true, err: "disk=/d given with the embedded default"},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d,strictatime"}, helper: true, err: "strictatime: not supported"},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d,sync"}, helper: true, err: "sync: not supported"},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d,nodiratime"}, helper: true, err: "nodiratime: not supported alone"},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d,commit=0"}, helper: true, err: "commit=0: the interval must be at least 10ms"},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d,commit=1ns"}, helper: true, err: "commit=1ns: the interval must be at least 10ms"},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk="}, helper: true, err: `mount option "disk=": give the disk's path`},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d,commit=soon"}, helper: true, err: "commit=soon: not a number"},
		{args: []string{"conquest", "/p", "/mnt", "-o", "disk=/d", "--bogus"}, helper: true, err: `unexpected argument "--bogus"`},
		{args: []string{"conquest", "/p", "/mnt", "-o"}, helper: true, err: "-o needs the options"},
	} {
		if got := isHelperCall(tc.args, isCmd); got != tc.helper {
			t.Errorf("isHelperCall(%q) = %v, want %v", tc.args, got, tc.helper)
		}
		got, err := helperArgs(tc.args)
		switch {
		case tc.want != nil && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("helperArgs(%q) = %q, %v; want %q", tc.args, got, err, tc.want)
		case tc.want == nil && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("helperArgs(%q) = %q, %v; want an error mentioning %q", tc.args, got, err, tc.err)
		}
	}
	// The commands themselves, and their misspellings, are no helper calls.
	for _, args := range [][]string{
		{"conquest", "mount", "--pram", "/p", "--disk", "/d", "/mnt"},
		{"conquest", "fsck", "--pram", "/p", "--disk", "/d", "-o"},
		{"conquest", "mout", "/mnt"},
		{"conquest", "--help"},
	} {
		if isHelperCall(args, isCmd) {
			t.Errorf("isHelperCall(%q) = true", args)
		}
	}
	if !helperName("/usr/sbin/mount.conquest") || !helperName("mount.fuse.conquest") || helperName("/usr/local/bin/conquest") {
		t.Error("helperName")
	}
}

// `mount -t fuse.conquest` runs fuse3's mount.fuse3, which runs `conquest
// SOURCE DIR -o OPTIONS`; mount(8) also takes PATH out of a helper's
// environment. Both are done here as mount(8) does them (mount(8) itself
// would run the installed conquest, not the one under test): the options
// take effect, the mount works, a plain umount(8) ends the daemon, and the
// image is clean.
func TestMountHelper(t *testing.T) {
	c := newCLI(t)
	if os.Geteuid() != 0 {
		t.Skip("noexec and mount(8) need root")
	}
	helper, err := exec.LookPath("mount.fuse3")
	if err != nil {
		for _, p := range []string{"/sbin/mount.fuse3", "/usr/sbin/mount.fuse3"} {
			if _, serr := os.Stat(p); serr == nil {
				helper, err = p, nil
			}
		}
	}
	if err != nil {
		t.Skip("no mount.fuse3 (fuse3)")
	}
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "32M", "--disk-size", "64M")
	mp := c.mountpoint()
	binDir := filepath.Dir(c.bin)
	env := []string{"HOME=" + c.home, "CONQUEST_HOME=" + c.home} // no PATH, as mount(8) gives

	umountAndWait := func(pram string) {
		t.Helper()
		if out, err := exec.Command("umount", mp).CombinedOutput(); err != nil {
			t.Fatalf("umount %s: %v %s", mp, err, out)
		}
		for deadline := time.Now().Add(10 * time.Second); inUse(pram) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if inUse(pram) {
			t.Fatal("the daemon still holds the arena after umount(8)")
		}
	}

	// mount.fuse3 adds dev and suid unless told nodev or nosuid; it finds
	// conquest through the PATH it was given (the real mount(8) runs it
	// with none, and /bin/sh then searches its default path).
	cmd := exec.Command(helper, pram, mp, "-o", "disk="+disk+",noatime,noexec,nodev,nofail", "-t", "fuse.conquest")
	cmd.Env = append([]string{"PATH=" + binDir + ":/usr/bin:/bin"}, env[1:]...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mount.fuse3: %v\n%s", err, out)
	}
	mi, ok := fusefs.Mounted(mp)
	if !ok || mi.FSType != "fuse.conquest" || mi.Source != fsnamePrefix+pram {
		t.Fatalf("after mount.fuse3: %+v %v", mi, ok)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(mp, &sfs); err != nil {
		t.Fatal(err)
	}
	if want := int64(unix.ST_NOEXEC | unix.ST_NODEV | unix.ST_NOATIME); sfs.Flags&want != want || sfs.Flags&(unix.ST_RDONLY|unix.ST_NOSUID) != 0 {
		t.Errorf("statfs flags %#x: want noexec, nodev and noatime, not ro or nosuid", sfs.Flags)
	}
	script := filepath.Join(mp, "run.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(script).CombinedOutput(); !errors.Is(err, unix.EACCES) {
		t.Errorf("running a script on a noexec mount: %v %s, want EACCES", err, out)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(script, old, old); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(script); err != nil || !bytes.Contains(b, []byte("ran")) {
		t.Fatalf("read back %q, %v", b, err)
	}
	if at := atime(t, script); !at.Equal(old) {
		t.Errorf("noatime: a read set atime to %v (was %v)", at, old)
	}
	umountAndWait(pram)

	// The program under a helper's name, with no PATH at all: read-only.
	link := filepath.Join(t.TempDir(), "mount.fuse.conquest")
	if err := os.Symlink(c.bin, link); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(link, pram, mp, "-o", "ro,disk="+disk+",dev,suid")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", link, err, out)
	}
	if err := unix.Statfs(mp, &sfs); err != nil {
		t.Fatal(err)
	}
	if dogs := watchdogsOf(holder(pram)); len(dogs) != 1 {
		t.Errorf("watchdogs of the daemon mounted under a helper's name: %v, want one", dogs)
	}
	if sfs.Flags&unix.ST_RDONLY == 0 || sfs.Flags&(unix.ST_NOEXEC|unix.ST_NOATIME) != 0 {
		t.Errorf("statfs flags %#x: want ro, and neither noexec nor noatime", sfs.Flags)
	}
	if err := os.WriteFile(filepath.Join(mp, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("create on a read-only mount: %v, want EROFS", err)
	}
	if err := os.WriteFile(script, []byte("x"), 0o755); !errors.Is(err, unix.EROFS) {
		t.Errorf("write on a read-only mount: %v, want EROFS", err)
	}
	if err := os.Mkdir(filepath.Join(mp, "d"), 0o755); !errors.Is(err, unix.EROFS) {
		t.Errorf("mkdir on a read-only mount: %v, want EROFS", err)
	}
	// atime (older than mtime) would be due under relatime; not read-only.
	if b, err := os.ReadFile(script); err != nil || !bytes.Contains(b, []byte("ran")) {
		t.Fatalf("read back %q, %v", b, err)
	}
	umountAndWait(pram)
	// The kernel does not refetch atime after a read on a read-only mount,
	// so look at what the arena kept.
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	if at := atime(t, script); !at.Equal(old) {
		t.Errorf("read-only: a read set atime to %v (was %v)", at, old)
	}
	c.ok("umount", mp)

	// Remounts: mount(8) runs the helper with the options it merged from
	// the mount's (the kernel's FUSE options among them) and the new ones.
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	remount := func(opts string) {
		t.Helper()
		cmd := exec.Command(helper, fsnamePrefix+pram, mp, "-o", opts+",user_id=0,group_id=0,default_permissions,allow_other", "-t", "fuse.conquest")
		cmd.Env = append([]string{"PATH=" + binDir + ":/usr/bin:/bin"}, env[1:]...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("remount %s: %v\n%s", opts, err, out)
		}
	}
	flagsNow := func() int64 {
		t.Helper()
		var sfs unix.Statfs_t
		if err := unix.Statfs(mp, &sfs); err != nil {
			t.Fatal(err)
		}
		return sfs.Flags & (unix.ST_RDONLY | unix.ST_NOEXEC | unix.ST_NOATIME | unix.ST_NOSUID)
	}
	remount("ro,relatime,remount,noexec")
	if f := flagsNow(); f != unix.ST_RDONLY|unix.ST_NOEXEC {
		t.Errorf("after remount,ro,noexec: statfs flags %#x", f)
	}
	if err := os.WriteFile(filepath.Join(mp, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("create after remount,ro: %v, want EROFS", err)
	}
	if b, err := os.ReadFile(script); err != nil || !bytes.Contains(b, []byte("ran")) {
		t.Fatalf("read back %q, %v", b, err)
	}
	remount("rw,noexec,relatime,remount,exec")
	if f := flagsNow(); f != 0 {
		t.Errorf("after remount,rw,exec: statfs flags %#x", f)
	}
	if at := atime(t, script); !at.Equal(old) {
		t.Errorf("a read while remounted read-only set atime to %v (was %v)", at, old)
	}
	if err := os.WriteFile(filepath.Join(mp, "new"), nil, 0o644); err != nil {
		t.Errorf("create after remount,rw: %v", err)
	}
	remount("rw,relatime,remount,noatime")
	if f := flagsNow(); f != unix.ST_NOATIME {
		t.Errorf("after remount,noatime: statfs flags %#x", f)
	}
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	if at := atime(t, script); !at.Equal(old) {
		t.Errorf("a read after remount,noatime set atime to %v (was %v)", at, old)
	}
	remount("rw,noatime,remount,relatime")
	if f := flagsNow(); f != 0 {
		t.Errorf("after remount,relatime: statfs flags %#x", f)
	}
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	if at := atime(t, script); at.Equal(old) {
		t.Error("a read after remount,relatime left atime alone (it was older than mtime)")
	}
	// commit= reaches the daemon: with an hour, a file written past the
	// threshold (1 MiB) but within twice it waits in the arena; cut to
	// 100 ms, the next commit moves it to the disk.
	diskUsed := func() uint64 {
		t.Helper()
		buf := make([]byte, 512)
		n, err := unix.Getxattr(mp, fusefs.SpaceXattr, buf)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := fusefs.ParseSpace(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		return sp.DiskUsed
	}
	remount("rw,relatime,remount,commit=3600")
	used0 := diskUsed()
	if err := os.WriteFile(filepath.Join(mp, "waits"), bytes.Repeat([]byte("w"), 1500<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // past the 1 s of the mount's --commit
	if u := diskUsed(); u != used0 {
		t.Errorf("with commit=3600 the disk went from %d to %d bytes used within 2.5 s", used0, u)
	}
	remount("rw,relatime,remount,commit=100ms")
	for deadline := time.Now().Add(10 * time.Second); diskUsed() == used0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("with commit=100ms the file did not move to the disk within 10 s")
		}
	}
	// Read-only before, after or both: commit= is passed on while the
	// mount is writable, and a read-only remount with it does not fail.
	remount("ro,relatime,remount,commit=5")
	remount("ro,relatime,remount,commit=7")
	remount("rw,relatime,remount,commit=1")
	if f := flagsNow(); f != 0 {
		t.Errorf("after the commit= remounts: statfs flags %#x", f)
	}
	cmd = exec.Command(helper, fsnamePrefix+pram, mp, "-o", "rw,remount,commit=0,user_id=0,group_id=0", "-t", "fuse.conquest")
	cmd.Env = append([]string{"PATH=" + binDir + ":/usr/bin:/bin"}, env[1:]...)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "must be at least") {
		t.Errorf("remount,commit=0: %v %s", err, out)
	}
	if err := unix.Setxattr(mp, fusefs.CommitXattr, []byte("soon"), 0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("setxattr %s soon: %v, want EINVAL", fusefs.CommitXattr, err)
	}
	cmd = exec.Command(c.bin, "conquest:"+pram, t.TempDir(), "-o", "remount,ro")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "no Conquest file system is mounted here") {
		t.Errorf("remount of a directory with no mount: %v %s", err, out)
	}
	// Only root may tell the daemon about atimes.
	if err := unix.Setxattr(mp, fusefs.NoAtimeXattr, []byte("2"), 0); !errors.Is(err, unix.EINVAL) {
		t.Errorf("setxattr %s 2: %v, want EINVAL", fusefs.NoAtimeXattr, err)
	}
	c.ok("umount", mp)

	// The embedded default, and options refused before anything is mounted.
	cmd = exec.Command(c.bin, "default", mp, "-o", "rw,dev,suid")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("conquest default: %v\n%s", err, out)
	}
	if mi, ok := fusefs.Mounted(mp); !ok || mi.Source != fsnamePrefix+filepath.Join(c.home, "pram.img") {
		t.Errorf("the embedded default: %+v %v", mi, ok)
	}
	umountAndWait(filepath.Join(c.home, "pram.img"))
	for _, bad := range []string{"disk=" + disk + ",sync", "disk=" + disk + ",flush"} {
		cmd = exec.Command(c.bin, pram, mp, "-o", bad)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "mount option") {
			t.Errorf("-o %s: %v %s, want a refusal naming the option", bad, err, out)
		}
		if _, ok := fusefs.Mounted(mp); ok {
			t.Fatalf("-o %s mounted", bad)
		}
	}
	out, _ := c.ok("fsck", "--pram", pram, "--disk", disk)
	if !strings.Contains(out, "clean") {
		t.Errorf("fsck: %s", out)
	}
}

func atime(t *testing.T, path string) time.Time {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return time.Unix(st.Atim.Unix())
}
