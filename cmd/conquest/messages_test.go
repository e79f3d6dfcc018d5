package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
	"conquest/internal/mounttest"
	"conquest/internal/reaper"
	"conquest/pram"
)

// runIn runs conquest in this process and returns stdout, stderr and the
// exit code.
func runIn(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := run(append([]string{"conquest"}, args...), &out, &errb)
	return out.String(), errb.String(), code
}

// `conquest help`, `help COMMAND` and `COMMAND --help` show the help, and a
// name that is no command is called an unknown command, with a nonzero exit
// (urfave/cli said "No help topic for 'help'" to the first two, exit 3,
// and "No help topic for 'foo'" to `conquest foo`).
func TestHelpAndUnknownCommands(t *testing.T) {
	t.Setenv("CONQUEST_HOME", t.TempDir())
	mountHelp, _, code := runIn("mount", "--help")
	if code != 0 || !strings.Contains(mountHelp, "conquest mount - mount a Conquest file system") {
		t.Fatalf("mount --help: exit %d\n%s", code, mountHelp)
	}
	for _, c := range []struct {
		args []string
		want string // in stdout, exit 0
	}{
		{nil, "COMMANDS:"},
		{[]string{"help"}, "COMMANDS:"},
		{[]string{"--help"}, "COMMANDS:"},
		{[]string{"help", "fsck"}, "conquest fsck - check (and repair)"},
		{[]string{"help", "bench"}, "sprite-large"},
		{[]string{"help", "bench", "postmark"}, "conquest bench postmark - PostMark 1.5"},
		{[]string{"bench", "help", "postmark"}, "conquest bench postmark - PostMark 1.5"},
	} {
		out, errs, code := runIn(c.args...)
		if code != 0 || !strings.Contains(out, c.want) || errs != "" {
			t.Errorf("conquest %q: exit %d, stderr %q, stdout:\n%s\nwant exit 0 and %q", c.args, code, errs, out, c.want)
		}
	}
	if out, _, _ := runIn("help", "mount"); out != mountHelp {
		t.Errorf("help mount:\n%s\nwant what mount --help shows:\n%s", out, mountHelp)
	}
	mp := t.TempDir()
	for _, c := range []struct {
		args []string
		want string // stderr
	}{
		{[]string{"foo"}, `conquest: unknown command "foo" (see conquest --help)` + "\n"},
		{[]string{"help", "foo"}, `conquest: unknown command "foo" (see conquest --help)` + "\n"},
		{[]string{"bench", "foo"}, `conquest: unknown command "bench foo" (see conquest bench --help)` + "\n"},
		{[]string{"help", "bench", "foo"}, `conquest: unknown command "bench foo" (see conquest bench --help)` + "\n"},
		// Not `mount --foreground MP --help`, which would mount.
		{[]string{"help", "mount", "--foreground", mp}, `conquest: help takes command names only (got "--foreground")` + "\n"},
	} {
		out, errs, code := runIn(c.args...)
		if code == 0 || errs != c.want || out != "" {
			t.Errorf("conquest %q: exit %d, stdout %q, stderr %q; want a nonzero exit and %q", c.args, code, out, errs, c.want)
		}
	}
}

// A Conquest disk given as the arena (--pram and --disk swapped), or
// another file system, is named for what it is by mount, fsck, df and
// stat, which never advise mkfs for it (it would destroy what the file
// holds), and nothing is written to either image, not even by fsck
// --repair. They used to say "not a Conquest arena (bad magic) (format it
// with `conquest mkfs`)".
func TestWrongImageAsArena(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	p, d := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", p, "--disk", d, "--pram-size", "8M", "--disk-size", "16M")
	ext := filepath.Join(dir, "ext4.img")
	img := make([]byte, 1<<20)
	img[1080], img[1081] = 0x53, 0xEF
	if err := os.WriteFile(ext, img, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sumFiles(t, p, d, ext)
	mp := c.mountpoint()
	for _, cmd := range []struct {
		args []string
		code int
	}{
		{[]string{"mount"}, 1}, {[]string{"fsck"}, 8}, {[]string{"fsck", "--repair"}, 8}, {[]string{"df"}, 1}, {[]string{"stat"}, 1},
	} {
		with := func(pramImg, diskImg string) []string {
			args := append(append([]string{}, cmd.args...), "--pram", pramImg, "--disk", diskImg)
			if cmd.args[0] == "mount" {
				args = append(args, mp)
			}
			return args
		}
		for _, e := range []struct {
			args []string
			want string
		}{
			{with(d, p), d + ": not a Conquest arena (bad magic): it holds a Conquest disk, and " + p + " the arena: --pram and --disk are swapped (give --pram " + p + " --disk " + d + ")"},
			{with(d, filepath.Join(dir, "absent")), "it holds a Conquest disk, not an arena: were --pram and --disk swapped?"},
			{with(ext, d), ext + ": not a Conquest arena (bad magic): it holds an ext2/ext3/ext4 file system; refusing to use it"},
			// The arena's own disk missing: mkfs (with --force) would lose
			// every file of the arena.
			{with(p, filepath.Join(dir, "gone.img")), "the arena " + p + " holds a file system whose large files are on a disk image; give --disk the disk it was formatted with"},
		} {
			if errs := c.fails(cmd.code, e.want, e.args...); strings.Contains(errs, "mkfs") {
				t.Errorf("conquest %q advises mkfs: %s", e.args, errs)
			}
		}
	}
	if sumFiles(t, p, d, ext) != sum {
		t.Error("a refused command changed an image")
	}
}

// df and stat of images a killed daemon left say that they recovered them,
// as mount and fsck do: the crash would go unnoticed otherwise, since the
// images are clean afterwards (fsck finds nothing to recover).
func TestDfStatReportRecovery(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	p, d := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", p, "--disk", d, "--pram-size", "16M")
	m := mounttest.MountProcess(t, mounttest.WithImages(p, d))
	for i, cmd := range []string{"df", "stat"} {
		if i > 0 {
			m.Remount()
		}
		if err := os.WriteFile(m.Path(cmd), []byte(cmd), 0o644); err != nil {
			t.Fatal(err)
		}
		m.Kill()
		_, errs := c.ok(cmd, "--pram", p, "--disk", d)
		if want := "conquest: " + p + " was not unmounted cleanly (its daemon crashed or was killed): recovered it ("; !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%s of a killed daemon's images: stderr %q, want one line starting %q", cmd, errs, want)
		}
		if _, errs := c.ok(cmd, "--pram", p, "--disk", d); errs != "" {
			t.Errorf("%s again: stderr %q, want nothing", cmd, errs)
		}
		c.ok("fsck", "-n", "--pram", p, "--disk", d)
	}
}

// mkfs names the flag and the sizes given when it refuses a size: an
// arena under the least (not the size rounded to pages), a large-file
// threshold out of range (in human sizes), an empty file as the disk (it
// says how to give the disk a size).
func TestMkfsSizeMessages(t *testing.T) {
	t.Setenv("CONQUEST_HOME", t.TempDir())
	dir := t.TempDir()
	p, d := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	empty := filepath.Join(dir, "empty.img")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--disk", d, "--pram-size", "1000001"}, "conquest: --pram-size: an arena of 1000001 bytes (977K) is too small: the least is 1.0M (1048576 bytes)\n"},
		{[]string{"--disk", d, "--pram-size", "1"}, "conquest: --pram-size: an arena of 1 byte is too small: the least is 1.0M (1048576 bytes)\n"},
		{[]string{"--disk", d, "--large-threshold", "1G"}, "conquest: --large-threshold 1.0G: the large-file threshold must be from 4.0K to 64.0M\n"},
		{[]string{"--disk", empty}, "conquest: " + empty + ": an empty file has no room for a disk: give its size with --disk-size (as for a new image file, 4.0G by default)\n"},
	} {
		args := append([]string{"mkfs", "--pram", p}, c.args...)
		if _, errs, code := runIn(args...); code != 1 || errs != c.want {
			t.Errorf("conquest %q: exit %d, stderr %q; want exit 1 and %q", args, code, errs, c.want)
		}
		if exists(p) || exists(d) {
			t.Fatalf("conquest %q: the refused mkfs created an image", args)
		}
	}
}

// An arena or disk image too large for where it is made is named with its
// size, its path and its file system's free space. mkfs used to say
// "PATH: mkfs: conquest: no space left on device" of an arena, and
// "truncate PATH: file too large" of a disk.
func TestMkfsNoRoom(t *testing.T) {
	dir := t.TempDir()
	p, d := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	im := images{pram: p, disk: d}
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%s: mkfs: %w", p, conquest.ErrNoSpace), p + ": cannot make an arena of 100T there: no space left on device (its file system has "},
		{fmt.Errorf("%s: %w: no room for arena bytes 0..67112960", p, pram.ErrNoSpace), p + ": cannot make an arena of 100T there: no space left on device (its file system has "},
		{fmt.Errorf("%s: mapping 109951162777600 bytes: %w", p, syscall.ENOMEM), p + ": cannot make an arena of 100T there: not enough memory to map it (its file system has "},
		{&fs.PathError{Op: "truncate", Path: d, Err: syscall.EFBIG}, d + ": cannot make a disk of 1.0P there: a file larger than its file system allows (its file system has "},
	} {
		err := explainMkfs(im, 100<<40, 1<<50, c.err)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || !strings.Contains(err.Error(), " free); give a smaller --") {
			t.Errorf("explainMkfs(%v) = %v, want %q...", c.err, err, c.want)
		}
	}
	if other := errors.New("something else"); explainMkfs(im, 100<<40, 1<<50, other) != other {
		t.Error("explainMkfs changed an error that is not for want of room")
	}

	// For real: a 1T arena in a 16M tmpfs.
	small := t.TempDir()
	reaper.Mount(small)
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(small, unix.MNT_DETACH) })
	t.Setenv("CONQUEST_HOME", t.TempDir())
	p = filepath.Join(small, "p.img")
	_, errs, code := runIn("mkfs", "--pram", p, "--disk", d, "--pram-size", "1T")
	if want := "conquest: " + p + ": cannot make an arena of 1.0T there: "; code != 1 || !strings.HasPrefix(errs, want) || !strings.HasSuffix(errs, " (its file system has 16.0M free); give a smaller --pram-size\n") {
		t.Errorf("mkfs of a 1T arena in a 16M tmpfs: exit %d, stderr %q; want %q... (its file system has 16.0M free)...", code, errs, want)
	}
	if exists(p) || exists(d) {
		t.Error("the failed mkfs left an image behind")
	}
}

// TestAddressSpaceLimitNamed: a mapping refused for want of address space
// under `ulimit -v` names the limit (mkfs said "not enough memory to map
// it" beside gigabytes free; mount, fsck, df and stat printed only "cannot
// allocate memory"). Far below the limit the Go runtime cannot start at
// all, and near it its threads may fail to start, so this is checked on
// the messages with the limit stubbed, not in a process under the limit.
func TestAddressSpaceLimitNamed(t *testing.T) {
	dir := t.TempDir()
	p, d := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	if err := conquest.Mkfs(p, d, conquest.MkfsOptions{PramSize: 16 << 20, DiskSize: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	im := images{pram: p, disk: d}
	mapErr := fmt.Errorf("%s: mapping 16777216 bytes: %w", p, syscall.ENOMEM)
	saved := addressSpaceLimit
	t.Cleanup(func() { addressSpaceLimit = saved })
	addressSpaceLimit = func() uint64 { return 879 << 20 }
	want := p + ": cannot make an arena of 100T there: more address space than this process may map (ulimit -v: 879M) (its file system has "
	if err := explainMkfs(im, 100<<40, 1<<50, mapErr); err == nil || !strings.HasPrefix(err.Error(), want) ||
		!strings.HasSuffix(err.Error(), "; raise the limit (ulimit -v unlimited) or give a smaller --pram-size") {
		t.Errorf("explainMkfs under ulimit -v = %v, want %q...", err, want)
	}
	if err := explainOpen(im, mapErr); err == nil || !strings.Contains(err.Error(), "cannot allocate memory: this process may map at most 879M of address space (ulimit -v), and the arena alone takes 16.0M; raise the limit") {
		t.Errorf("explainOpen under ulimit -v = %v", err)
	}
	// No limit, or one with room for the mapping (an ENOMEM from elsewhere:
	// vm.max_map_count, strict overcommit): not put on the limit.
	for _, lim := range []uint64{0, mappedBytes() + 2<<40} {
		addressSpaceLimit = func() uint64 { return lim }
		if err := explainMkfs(im, 1<<30, 1<<30, mapErr); err == nil || !strings.Contains(err.Error(), "not enough memory to map it") {
			t.Errorf("explainMkfs under a limit of %d = %v", lim, err)
		}
		if err := explainOpen(im, mapErr); err == nil || strings.Contains(err.Error(), "ulimit") {
			t.Errorf("explainOpen under a limit of %d = %v", lim, err)
		}
	}
}

// The help of mount and df says what the code does: the signals that
// unmount a --foreground daemon (serve), the data directory's order
// (dataDir), and where df's figures of a mount come from (reportMounted).
func TestHelpTextsMatchCode(t *testing.T) {
	help := func(cmd string) string {
		out, _, code := runIn(cmd, "--help")
		if code != 0 {
			t.Fatalf("%s --help: exit %d", cmd, code)
		}
		return strings.Join(strings.Fields(out), " ")
	}
	mount := help("mount")
	for _, want := range []string{"on SIGINT, SIGTERM or SIGHUP", "($CONQUEST_HOME, else $XDG_DATA_HOME/conquest, else ~/.local/share/conquest)"} {
		if !strings.Contains(mount, want) {
			t.Errorf("mount --help does not say %q:\n%s", want, mount)
		}
	}
	t.Setenv("CONQUEST_HOME", "")
	t.Setenv("XDG_DATA_HOME", "/xdg")
	if d, err := dataDir(); err != nil || d != "/xdg/conquest" {
		t.Errorf("dataDir with $XDG_DATA_HOME=/xdg = %q, %v", d, err)
	}
	df := help("df")
	if !strings.Contains(df, "the read-only extended attribute "+fusefs.SpaceXattr) || strings.Contains(df, "figures come from statfs(2)") {
		t.Errorf("df --help does not say its figures of a mount come from %s:\n%s", fusefs.SpaceXattr, df)
	}
}
