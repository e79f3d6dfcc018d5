package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize reads a byte count: a number with an optional binary suffix K, M,
// G or T (also KB/KiB, MB/MiB, ...; any case). Fractions are allowed and
// rounded to the nearest byte: "1.01M" is 1,059,062 bytes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	u := strings.ToUpper(t)
	u = strings.TrimSuffix(strings.TrimSuffix(u, "IB"), "B")
	if u == "" && strings.TrimSpace(s) != "" { // "B" alone
		return 0, fmt.Errorf("bad size %q", s)
	}
	mult := 1.0
	if n := len(u); n > 0 {
		switch u[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			u = strings.TrimSpace(u[:n-1])
		}
	}
	v, err := strconv.ParseFloat(u, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("bad size %q: want a number with an optional K, M, G or T suffix", s)
	}
	b := math.Round(v * mult)
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q too large", s)
	}
	return int64(b), nil
}

// FormatSize writes n bytes with a binary unit: "512 B", "1 KiB", "1.01 MiB".
func FormatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i, v := 0, float64(n)
	for i < len(units)-1 && math.Abs(v) >= 1024 {
		v /= 1024
		i++
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + " " + units[i]
}
