package reaper

import (
	"os"
	"testing"
)

func TestTestRoot(t *testing.T) {
	for _, c := range []struct{ tmp, path, want string }{
		{"/tmp", "/tmp/TestX123/001/mnt", "/tmp/TestX123"},
		{"/tmp", "/tmp/TestX123", "/tmp/TestX123"},
		{"/tmp", "/tmp/other/001/mnt", ""}, // not t.TempDir's
		{"/tmp", "/mnt/TestX/001", ""},     // not under tmp
		{"/tmp", "/tmp", ""},               // tmp itself
		{"/var/tmp", "/tmp/TestX/1", ""},   // another tmp
		{"/tmp", "/tmp/../etc/TestX", ""},  // not below
	} {
		if got := testRoot(c.tmp, c.path); got != c.want {
			t.Errorf("testRoot(%q, %q) = %q, want %q", c.tmp, c.path, got, c.want)
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/a\011b`: "/a\tb", `/plain`: "/plain", `/end\04`: `/end\04`, `\134x`: `\x`} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestZombie(t *testing.T) {
	if zombie(os.Getpid()) {
		t.Error("this process taken for a zombie")
	}
	if !zombie(1 << 30) {
		t.Error("a process that does not exist not taken as gone")
	}
}
