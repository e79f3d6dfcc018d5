package bench

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes where a report was measured.
type Machine struct {
	Hostname  string `json:"hostname"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	Kernel    string `json:"kernel,omitempty"`
	CPU       string `json:"cpu,omitempty"`
	CPUs      int    `json:"cpus"`
	MemBytes  int64  `json:"mem_bytes,omitempty"`
	LLCBytes  int64  `json:"llc_bytes,omitempty"` // largest CPU cache
	GoVersion string `json:"go_version"`
}

// CurrentMachine reads this machine's description from the runtime, /proc and
// /sys; what cannot be read is left empty.
func CurrentMachine() Machine {
	m := Machine{
		OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
		GoVersion: runtime.Version(),
		LLCBytes:  largestCPUCache("/sys/devices/system/cpu/cpu0/cache"),
	}
	m.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.CPU = procField("/proc/cpuinfo", "model name")
	if v := procField("/proc/meminfo", "MemTotal"); v != "" {
		kb, err := strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
		if err == nil {
			m.MemBytes = kb << 10
		}
	}
	return m
}

// procField returns the value of the first "key : value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
