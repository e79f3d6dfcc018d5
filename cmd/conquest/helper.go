package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
)

// mount(8) and /etc/fstab.
//
// With fuse3 installed, `mount -t fuse.conquest SOURCE DIR -o OPTIONS`, or an
// fstab line of type fuse.conquest, runs mount.fuse3, which runs
//
//	conquest SOURCE DIR -o OPTIONS
//
// through /bin/sh, OPTIONS being the line's options less those meant for
// mount(8) alone (user, auto, nofail, _netdev...), with dev and suid added
// unless nodev or nosuid was given. helperArgs turns that command line into
// the `conquest mount` one, so that both take the same path (the daemon, its
// checks and its messages). SOURCE is the arena, or "default" for the
// embedded default; the disk is the option disk=PATH.

// defaultSource is the SOURCE that names the embedded default images.
const defaultSource = "default"

// isHelperCall reports whether args is mount.fuse3's command line: a first
// argument that is no command and no flag, a mount point, and -o.
func isHelperCall(args []string, isCommand func(string) bool) bool {
	if len(args) < 4 || strings.HasPrefix(args[1], "-") || isCommand(args[1]) {
		return false
	}
	for _, a := range args[3:] {
		if a == "-o" {
			return true
		}
	}
	return false
}

// helperArgs translates mount.fuse3's command line into `conquest mount`'s.
// Every option a Conquest mount cannot honour is refused by name, as ext4
// refuses an option it does not know, rather than ignored.
func helperArgs(args []string) ([]string, error) {
	source, dir := args[1], args[2]
	opts, err := helperOptions(args)
	if err != nil {
		return nil, err
	}

	var (
		disk                string
		flags               uintptr // mountFlagOptions' flags in effect
		nodiratime, wbcache bool
		cachedWrites        bool
		private             bool
		commit              string
	)
	for _, o := range opts {
		name, val, hasVal := strings.Cut(o, "=")
		switch {
		case mount8Option(o, name) || o == "default_permissions":
			// mount(8)'s own, or always so here.
		case mountFlagOptions[o].flag != 0:
			flags = mountFlagOptions[o].apply(flags)
		case o == "diratime":
			nodiratime = false
		case o == "nodiratime":
			nodiratime = true
		case o == "lazytime" || o == "nolazytime":
			// Times are kept in the arena, written in place: nothing is lazy.
		case o == "allow_other":
			private = false
		case o == "private" || o == "noallow_other":
			// mount(8) takes "private" itself (a propagation flag) and
			// never passes it on: fstab says noallow_other.
			private = true
		case o == "writeback_cache" || o == "writeback-cache":
			wbcache = true
		case o == "cached_writes" || o == "cached-writes":
			cachedWrites = true
		case name == "disk" && hasVal && val != "":
			disk = val
		case name == "disk":
			return nil, fmt.Errorf("mount option %q: give the disk's path, disk=PATH", o)
		case name == "commit" && hasVal:
			d, err := commitOption(val)
			if err != nil {
				return nil, err
			}
			commit = d.String()
		default:
			return nil, refusedOption(o)
		}
	}
	noatime := flags&unix.MS_NOATIME != 0
	if nodiratime && !noatime {
		return nil, errors.New("mount option nodiratime: not supported alone (noatime, for files and directories alike, is)")
	}

	out := []string{args[0], "mount"}
	switch {
	case source == defaultSource:
		if disk != "" {
			return nil, fmt.Errorf("mount: disk=%s given with the embedded default (source %q): give the arena as the source", disk, defaultSource)
		}
	case disk == "":
		return nil, fmt.Errorf("mount: %s: the disk is missing: add disk=PATH to the options (or mount %q, the embedded default)", source, defaultSource)
	default:
		out = append(out, "--pram", source, "--disk", disk)
	}
	for _, f := range []struct {
		on   bool
		flag string
	}{
		{flags&unix.MS_RDONLY != 0, "--read-only"}, {flags&unix.MS_NOSUID != 0, "--nosuid"},
		{flags&unix.MS_NODEV != 0, "--nodev"}, {flags&unix.MS_NOEXEC != 0, "--noexec"},
		{noatime, "--noatime"}, {wbcache, "--writeback-cache"}, {cachedWrites, "--cached-writes"}, {private, "--private"},
	} {
		if f.on {
			out = append(out, f.flag)
		}
	}
	if commit != "" {
		out = append(out, "--commit="+commit)
	}
	return append(out, dir), nil
}

// helperOptions collects the options of mount.fuse3's command line (every -o,
// split at commas), skipping the flags mount(8) may add.
func helperOptions(args []string) ([]string, error) {
	var opts []string
	for i := 3; i < len(args); i++ {
		switch a := args[i]; a {
		case "-o":
			if i+1 == len(args) {
				return nil, errors.New("mount: -o needs the options")
			}
			i++
			opts = append(opts, strings.Split(args[i], ",")...)
		case "-t", "-N":
			i++ // the type (fuse.conquest), or a namespace mount(8) already entered
		case "-v", "-s", "-n":
			// verbose, sloppy, no mtab: nothing to do here
		default:
			return nil, fmt.Errorf("mount: unexpected argument %q (usage: conquest SOURCE DIR -o OPTIONS, as mount.fuse3 runs it)", a)
		}
	}
	return opts, nil
}

// isRemount reports whether mount.fuse3's command line asks for a remount
// (`mount -o remount,... DIR`: mount(8) hands that to the helper too).
func isRemount(args []string) bool {
	opts, err := helperOptions(args)
	return err == nil && slices.Contains(opts, "remount")
}

// helperRemount changes the flags of the live Conquest mount args[2] as the
// options ask: ro/rw, nosuid/suid, nodev/dev, noexec/exec, noatime/relatime,
// and its commit interval (commit=). Options that only take effect at
// mount (disk=, writeback_cache, cached_writes, private) keep the mount's values:
// mount(8) passes the fstab line's options with a remount.
func helperRemount(args []string) error {
	dir, err := mountpointPath(args[2])
	if err != nil {
		return err
	}
	if mi, ok := fusefs.Mounted(dir); !ok || mi.FSType != "fuse.conquest" {
		return fmt.Errorf("remount: %s: no Conquest file system is mounted here", dir)
	}
	opts, err := helperOptions(args)
	if err != nil {
		return err
	}
	var set, clear uintptr
	var commit time.Duration
	for _, o := range opts {
		name, val, hasVal := strings.Cut(o, "=")
		switch f := mountFlagOptions[o]; {
		case f.flag != 0:
			set, clear = f.apply(set), mountFlagOption{f.flag, !f.on}.apply(clear)
		case name == "commit" && hasVal:
			d, err := commitOption(val)
			if err != nil {
				return err
			}
			commit = d
		case o == "remount" || mount8Option(o, name) || o == "default_permissions" ||
			o == "allow_other" || o == "private" || o == "noallow_other" || o == "writeback_cache" || o == "writeback-cache" ||
			o == "cached_writes" || o == "cached-writes" ||
			o == "lazytime" || o == "nolazytime" || o == "diratime" || o == "nodiratime" ||
			name == "disk" ||
			name == "user_id" || name == "group_id" || name == "fd" || name == "rootmode" ||
			name == "max_read" || name == "blksize" || name == "fsname" || name == "subtype":
			// mount(8)'s own, fixed at mount, or the kernel's options of the
			// FUSE mount, which mount(8) passes along: they keep the mount's
			// values.
		default:
			return refusedOption(o)
		}
	}
	if err := fusefs.Remount(dir, set, clear, commit); err != nil {
		return fmt.Errorf("remount: %w", err)
	}
	return nil
}

// mountFlagOption is an option that turns a mount flag on or off.
type mountFlagOption struct {
	flag uintptr // MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC or MS_NOATIME
	on   bool
}

// apply returns flags with o's flag turned on or off.
func (o mountFlagOption) apply(flags uintptr) uintptr {
	if o.on {
		return flags | o.flag
	}
	return flags &^ o.flag
}

// mountFlagOptions are the options that turn a mount flag on or off, at a
// mount and at a remount alike.
var mountFlagOptions = map[string]mountFlagOption{
	"ro": {unix.MS_RDONLY, true}, "rw": {unix.MS_RDONLY, false},
	"nosuid": {unix.MS_NOSUID, true}, "suid": {unix.MS_NOSUID, false},
	"nodev": {unix.MS_NODEV, true}, "dev": {unix.MS_NODEV, false},
	"noexec": {unix.MS_NOEXEC, true}, "exec": {unix.MS_NOEXEC, false},
	"noatime": {unix.MS_NOATIME, true}, "atime": {unix.MS_NOATIME, false},
	"relatime": {unix.MS_NOATIME, false}, "norelatime": {unix.MS_NOATIME, false},
	"nostrictatime": {unix.MS_NOATIME, false},
}

// refusedOption is the error for an option no Conquest mount takes.
func refusedOption(o string) error {
	switch o {
	case "strictatime":
		return errors.New("mount option strictatime: not supported (access times are relatime, or noatime)")
	case "sync", "dirsync":
		return fmt.Errorf("mount option %s: not supported (use fsync(2), O_SYNC or O_DSYNC)", o)
	}
	return fmt.Errorf("mount option %q: unknown to Conquest (it takes disk=PATH, ro, rw, noatime, nosuid, nodev, noexec, writeback_cache, cached_writes, commit=SECONDS, noallow_other)", o)
}

// mount8Option reports whether o (name before any '=') is one of mount(8)'s
// own options, which mean nothing to the file system.
func mount8Option(o, name string) bool {
	switch o {
	case "", "defaults", "auto", "noauto", "nofail", "_netdev", "user", "users", "nouser",
		"owner", "group", "async":
		return true
	}
	return strings.HasPrefix(o, "x-") || name == "comment"
}

// commitOption reads commit=: whole seconds, as ext4 takes it, or a Go
// duration such as 500ms.
func commitOption(v string) (time.Duration, error) {
	d, err := parseCommit(v)
	if err != nil {
		return 0, fmt.Errorf("mount option commit=%s: %w", v, err)
	}
	return d, nil
}

// maxCommit is the longest commit interval: what a time.Duration holds,
// in whole seconds (about 292 years).
const maxCommit = uint64(1<<63-1) / uint64(time.Second) * uint64(time.Second)

// parseCommit reads the commit interval of `mount --commit` and the mount
// option commit=: a number of seconds (ext4's commit=) or a Go duration,
// at least conquest.MinCommit.
func parseCommit(v string) (time.Duration, error) {
	var d time.Duration
	if n, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || n > maxCommit/uint64(time.Second) {
			return 0, fmt.Errorf("the interval must be at most %v", time.Duration(maxCommit))
		}
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(v); err != nil {
		return 0, errors.New("not a number of seconds or a duration (5, 5s, 500ms)")
	}
	if d < conquest.MinCommit {
		return 0, fmt.Errorf("the interval must be at least %v", conquest.MinCommit)
	}
	return d, nil
}

// helperName reports whether the program was started under a mount helper's
// name: mount(8) runs /sbin/mount.TYPE (mount.fuse.conquest by fuse3's
// convention, mount.conquest for -t conquest) when one exists, with the same
// command line as mount.fuse3 gives.
func helperName(arg0 string) bool {
	b := filepath.Base(arg0)
	return b == "mount.conquest" || b == "mount.fuse.conquest"
}
