package fusefs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The kernel reads ahead of a FUSE file at most its mount's bdi
// read_ahead_kb, whatever max_readahead the daemon asked for at INIT: a new
// bdi starts at 128 KiB, so a sequential reader has at most two 128 KiB READs
// in flight and waits for each round trip. Raised to 1 MiB, a cold 1 GiB
// read in 1 MiB requests (the benchmark, which checks every byte) measured
// 1,067-1,167 MiB/s against 796-928 at 128 KiB, and 1 MiB random reads
// 546-670 against 405-497 (512 KiB and 2 MiB measured alike to 1 MiB); see
// docs/DESIGN.md, "Session 7". Only root may write the setting; other
// mounts keep the kernel's default.

// defaultReadaheadKB is the read_ahead_kb a mount sets on its bdi.
const defaultReadaheadKB = maxReadahead >> 10

// bdiReadaheadPath is the sysfs file of the read-ahead of the mount on dir.
func bdiReadaheadPath(dir string) (string, error) {
	m, ok := Mounted(dir)
	if !ok {
		return "", fmt.Errorf("%s: not a mount point", dir)
	}
	if !strings.HasPrefix(m.FSType, "fuse") || m.Device == "" {
		return "", fmt.Errorf("%s: not a FUSE mount (%s)", dir, m.FSType)
	}
	return "/sys/class/bdi/" + m.Device + "/read_ahead_kb", nil
}

// ReadaheadKB reports the kernel's read-ahead, in KiB, for the FUSE mount
// on dir.
func ReadaheadKB(dir string) (int, error) {
	p, err := bdiReadaheadPath(dir)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// setReadaheadKB sets the kernel's read-ahead of the FUSE mount on dir.
func setReadaheadKB(dir string, kb int) error {
	p, err := bdiReadaheadPath(dir)
	if err != nil {
		return err
	}
	return os.WriteFile(p, []byte(strconv.Itoa(kb)+"\n"), 0)
}
