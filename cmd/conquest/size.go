package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parseSize reads a byte count with an optional binary suffix: K, M, G, T
// (also KB/KiB and lower case). "1G" is 1<<30.
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	shift := 0
	u := strings.ToUpper(t)
	for _, suf := range []string{"IB", "B"} {
		if strings.HasSuffix(u, suf) && len(u) > len(suf) {
			u = u[:len(u)-len(suf)]
			break
		}
	}
	if n := len(u); n > 0 {
		switch u[n-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift != 0 {
			u = u[:n-1]
		}
	}
	n, err := strconv.ParseUint(strings.TrimSpace(u), 10, 64)
	if err != nil || u == "" {
		return 0, fmt.Errorf("bad size %q: want a number with an optional K, M, G or T suffix", s)
	}
	if n > math.MaxUint64>>shift {
		return 0, fmt.Errorf("bad size %q: too large", s)
	}
	return n << shift, nil
}

// formatSize prints n bytes in the largest binary unit that keeps one
// decimal: 1.5G, 512M, 4.0K, 100B.
func formatSize(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	f := float64(n)
	i := -1
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if f >= 100 {
		return fmt.Sprintf("%.0f%c", f, units[i])
	}
	return fmt.Sprintf("%.1f%c", f, units[i])
}
