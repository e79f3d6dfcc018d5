package pram

import (
	"os"
	"path/filepath"
	"testing"
)

// setBoot makes the "current boot" the one named by id (a file in dir), for
// the rest of the test.
func setBoot(t *testing.T, dir, id string) {
	t.Helper()
	p := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(p, []byte(id+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := bootIDPath
	bootIDPath = p
	t.Cleanup(func() { bootIDPath = old })
}

const (
	bootA = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
	bootB = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
)

// A full check is due only when the arena was left open (dirty) by a boot
// other than the current one: a daemon crash, a clean close before a
// reboot, or an arena that recorded no boot decide nothing. The mark
// survives Close and reopening until ClearCheckDue.
func TestCheckDueAfterSystemCrash(t *testing.T) {
	dir := t.TempDir()
	setBoot(t, dir, bootA)
	path := filepath.Join(dir, "arena")
	a, err := Format(path, Options{Size: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	reopen := func(how string) *Arena {
		t.Helper()
		switch how {
		case "close":
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
		case "crash":
			if err := a.Abandon(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("reopen %q", how)
		}
		b, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	want := func(step string, due bool) {
		t.Helper()
		if a.CheckDue() != due {
			t.Errorf("%s: CheckDue %v, want %v", step, a.CheckDue(), due)
		}
	}

	a = reopen("crash") // the daemon died; same boot
	want("daemon crash", false)
	a = reopen("close")
	setBoot(t, dir, bootB) // a clean reboot
	a = reopen("close")
	want("clean close, then a reboot", false)

	a = reopen("crash")    // open under boot B
	setBoot(t, dir, bootA) // the system went down with the arena open
	a = reopen("crash")
	want("open across a reboot", true)
	a = reopen("close")
	want("after a clean close", true)
	a = reopen("crash")
	want("after a daemon crash", true)
	if err := a.ClearCheckDue(); err != nil {
		t.Fatal(err)
	}
	a = reopen("close")
	want("cleared", false)

	// An arena that recorded no boot (zeros) concludes nothing.
	a.PutU64(offBoot, 0)
	a.PutU64(offBoot+8, 0)
	setBoot(t, dir, bootB)
	a = reopen("crash")
	want("no recorded boot", false)
	// Nor does a kernel without a boot ID; the recorded one is kept.
	setBoot(t, dir, "not a boot id")
	a = reopen("crash")
	want("unreadable boot ID", false)
	setBoot(t, dir, bootA)
	a = reopen("crash")
	want("boot changed behind an unreadable one", true)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}
