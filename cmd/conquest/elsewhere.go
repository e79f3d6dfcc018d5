package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// heldMount is a copy of a mount in another mount namespace: a process in
// that namespace, and where the mount is there.
type heldMount struct {
	pid  int
	comm string
	dir  string
}

func (h heldMount) String() string {
	return fmt.Sprintf("process %d (%s) still mounts it on %s", h.pid, h.comm, h.dir)
}

// mountedElsewhere finds the mount namespaces other than this process's
// that still mount the FUSE connection whose device is dev ("0:NN", from
// mountinfo): a namespace made by unshare(1) or a container while the file
// system was mounted holds a copy of the mount, and with it the connection,
// so the daemon goes on serving it there after the mount is gone here (an
// outside review saw `conquest umount` wait a minute for a daemon kept
// alive so). One process per namespace, at most max; namespaces this
// process may not look into are skipped.
//
// A mount matches by its device and its source both: a device number
// freed when the last mount went away is given to the next FUSE mount
// made (an outside review saw umount blame a test's unrelated mount as a
// bind mount of the one it had just taken down).
func mountedElsewhere(dev, source string, max int) []heldMount {
	if dev == "" {
		return nil
	}
	return mountsElsewhere(func(f []string) bool {
		_, src, _ := superFields(f)
		return f[2] == dev && unescapeOctal(src) == source
	}, max)
}

// arenaMountedElsewhere is mountedElsewhere for the Conquest mount of the
// arena at path, found by its source (fsnamePrefix and the path).
func arenaMountedElsewhere(path string, max int) []heldMount {
	return mountsElsewhere(func(f []string) bool {
		fstype, source, _ := superFields(f)
		return fstype == "fuse.conquest" && unescapeOctal(source) == fsnamePrefix+path
	}, max)
}

// superFields returns the fields after the separator of a mountinfo line
// split in fields: the file system type, the source and the super options
// ("" for those missing).
func superFields(f []string) (fstype, source, opts string) {
	for i := 5; i < len(f); i++ {
		if f[i] == "-" {
			rest := append(f[i+1:], "", "", "")
			return rest[0], rest[1], rest[2]
		}
	}
	return "", "", ""
}

// mountsElsewhere is mountedElsewhere for the mountinfo lines (split in
// fields) that match says are the mount.
func mountsElsewhere(match func(f []string) bool, max int) []heldMount {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return nil
	}
	seen := map[string]bool{self: true}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []heldMount
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		proc := "/proc/" + e.Name()
		ns, err := os.Readlink(proc + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		b, err := os.ReadFile(proc + "/mountinfo")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && match(f) {
				comm, _ := os.ReadFile(proc + "/comm")
				out = append(out, heldMount{pid, strings.TrimSpace(string(comm)), unescapeOctal(f[4])})
				break
			}
		}
		if len(out) >= max {
			break
		}
	}
	return out
}

// heldElsewhereErr is umount's error for a file system unmounted here but
// mounted still in other namespaces (mountedElsewhere).
func heldElsewhereErr(arena string, held []heldMount) error {
	var b strings.Builder
	for i, h := range held {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(h.String())
	}
	h := held[0]
	return fmt.Errorf("%s: unmounted here, but another mount namespace still mounts it, so its daemon goes on serving it there: %s. Unmount it there (`nsenter -t %d -m umount %s`) or end those processes; the daemon then closes the arena",
		arena, b.String(), h.pid, shellQuote(h.dir))
}

// heldHere says, for a file system just unmounted from dir whose daemon
// has not exited, what in this mount namespace still holds it: another
// mount of it (a bind mount of it or of one of its directories, made
// before the unmount), or an overlay file system whose layers are
// directories on it (overlayfs keeps private mounts of them, which no
// mountinfo shows). "" when it finds neither. An outside review saw
// `conquest umount` wait its whole minute, then fail without saying why,
// in both cases; ext4's umount returns at once, and the file system lives
// on there, as this one does.
//
// Another mount is the same file system if its device and its source are
// both the same (mountedElsewhere says why).
func heldHere(dev, source, dir string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	var binds, overlays, relative []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		fstype, src, opts := superFields(f)
		if dev != "" && f[2] == dev && unescapeOctal(src) == source {
			binds = append(binds, unescapeOctal(f[4]))
			continue
		}
		if fstype == "overlay" {
			switch under, rel := layersUnder(opts, dir); {
			case under:
				overlays = append(overlays, unescapeOctal(f[4]))
			case rel:
				relative = append(relative, unescapeOctal(f[4]))
			}
		}
	}
	switch {
	case len(binds) > 0:
		return fmt.Sprintf("it is still mounted on %s (a bind mount of it or of a directory on it), where its daemon goes on serving it. Unmount that too (`umount %s`); the daemon then closes the arena",
			strings.Join(binds, ", "), shellQuote(binds[0]))
	case len(overlays) > 0:
		return fmt.Sprintf("the overlay file system on %s uses directories on it as layers, so its daemon goes on serving it. Unmount the overlay (`umount %s`); the daemon then closes the arena",
			strings.Join(overlays, ", "), shellQuote(overlays[0]))
	case len(relative) > 0:
		// The kernel keeps a layer's path as it was given: a relative
		// one cannot be told to be on this file system or not.
		return fmt.Sprintf("the overlay file system on %s names its layers by relative paths, which may be directories on it; if they are, its daemon goes on serving it until the overlay is unmounted (`umount %s`)",
			strings.Join(relative, ", "), shellQuote(relative[0]))
	}
	return ""
}

// layersUnder reports whether an overlay's super options (mountinfo's last
// field) name a layer directory at or under dir, or else any layer by a
// relative path (as given to mount: it may be under dir or not).
func layersUnder(opts, dir string) (under, relative bool) {
	for _, o := range strings.Split(opts, ",") {
		k, v, ok := strings.Cut(o, "=")
		// Linux 6.8 and later show layers added one at a time as
		// "lowerdir+" and "datadir+".
		if !ok || (k != "lowerdir" && k != "lowerdir+" && k != "upperdir" && k != "workdir" && k != "datadir+") {
			continue
		}
		for _, p := range strings.Split(unescapeOctal(v), ":") {
			if p == dir || strings.HasPrefix(p, dir+"/") {
				return true, false
			}
			if p != "" && !strings.HasPrefix(p, "/") {
				relative = true
			}
		}
	}
	return false, relative
}

// shellQuote quotes s for a command a user may paste into a shell.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// connectionAlive reports whether the FUSE connection of the mount whose
// device is dev ("0:NN") still exists: it does while any mount (or an
// overlay's private one) holds the file system, and not once the last is
// gone and the daemon is only closing. known is false where the fusectl
// file system is not mounted to tell.
func connectionAlive(dev string) (alive, known bool) {
	const dir = "/sys/fs/fuse/connections"
	_, minor, ok := strings.Cut(dev, ":")
	if !ok {
		return false, false
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
		return false, false // not mounted, or nothing to compare with
	}
	_, err := os.Stat(dir + "/" + minor)
	return err == nil, true
}
