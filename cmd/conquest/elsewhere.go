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
func mountedElsewhere(dev string, max int) []heldMount {
	if dev == "" {
		return nil
	}
	return mountsElsewhere(func(f []string) bool { return f[2] == dev }, max)
}

// arenaMountedElsewhere is mountedElsewhere for the Conquest mount of the
// arena at path, found by its source (fsnamePrefix and the path).
func arenaMountedElsewhere(path string, max int) []heldMount {
	return mountsElsewhere(func(f []string) bool {
		for i := 5; i+2 < len(f); i++ {
			if f[i] == "-" {
				return f[i+1] == "fuse.conquest" && unescapeOctal(f[i+2]) == fsnamePrefix+path
			}
		}
		return false
	}, max)
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
		arena, b.String(), h.pid, h.dir)
}
