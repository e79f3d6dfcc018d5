package bench

import "testing"

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"0": 0, "512": 512, "1K": 1024, "1k": 1024, "1KB": 1024, "1KiB": 1024, "8K": 8192,
		"1M": 1 << 20, "1.01M": 1059062, "100M": 100 << 20, "2G": 2 << 30, "1T": 1 << 40, " 3 MiB ": 3 << 20, "10B": 10,
	}
	for in, want := range good {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "B", "K", "-1", "1X", "abc", "NaN", "1e30G"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
	for in, want := range map[int64]string{512: "512 B", 1024: "1 KiB", 1059062: "1.01 MiB", 80 << 20: "80 MiB", 4 << 30: "4 GiB"} {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
	}
}
