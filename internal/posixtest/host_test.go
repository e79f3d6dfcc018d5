package posixtest

import (
	"errors"
	"os"
	"testing"
	"time"

	"conquest/internal/reaper"
)

func TestMain(m *testing.M) {
	HelperMain()
	reaper.Child()
	reaper.Start()
	os.Exit(m.Run())
}

// TestHost runs the suite against the host file system (the directory
// t.TempDir gives: ext4 or tmpfs), which validates the suite itself.
func TestHost(t *testing.T) {
	tests := Tests()
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			if needsPrivateFS[name] {
				t.Skip("measures file-system-wide counters, which the other test packages running beside this one change on the shared host file system; TestHostTmpfs runs it on a private tmpfs")
			}
			tests[name](t, t.TempDir())
		})
	}
}

// needsPrivateFS names the tests that read counters of the whole file
// system (statfs) and so can only pass where nothing else writes. On the
// host's /tmp, go test runs other packages' tests beside this one: a CI run
// saw free space grow by 3 MiB while StatfsChanges wrote 16 MiB, three
// tries in a row.
var needsPrivateFS = map[string]bool{"StatfsChanges": true}

// TestHostTmpfs runs the suite against a tmpfs as well: the expectations are
// ext4's, and tmpfs (the reference of the simulation) must meet them too.
func TestHostTmpfs(t *testing.T) {
	tests := Tests()
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			dir, mounted := MountTmpfs(t, 256<<20)
			if !mounted {
				t.Skip("cannot mount tmpfs")
			}
			tests[name](t, dir)
		})
	}
}

// TestSimulateHost validates the simulator: ext4 (t.TempDir) against a
// tmpfs must agree on every operation, with sizes crossing 1 MiB.
func TestSimulateHost(t *testing.T) {
	ref, mounted := MountTmpfs(t, 512<<20)
	if !mounted {
		t.Skip("cannot mount tmpfs")
	}
	seed := time.Now().UnixNano()
	Simulate(t, t.TempDir(), ref, SimOptions{Seed: seed, Ops: 3000, CheckEvery: 500, Gen: GenOptions{BigEvery: 20}})
}

// TestSimulateDetects checks that the comparison can fail: a tree with one
// byte changed behind the simulator's back differs.
func TestSimulateDetects(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		g := NewGen(1, GenOptions{})
		for i := 0; i < 300; i++ {
			op := g.Next()
			g.Observe(op, op.Apply(d))
		}
	}
	if err := CheckTree(a, b, Compare{Owners: true}); err != nil {
		t.Fatalf("identical runs differ: %v", err)
	}
	tr, err := Snapshot(a)
	if err != nil {
		t.Fatal(err)
	}
	changed := false
	for p, n := range tr {
		if n.Mode&0170000 == 0100000 && n.Size > 0 && n.Nlink == 1 {
			fd, err := os.OpenFile(a+"/"+p, os.O_WRONLY, 0)
			if err != nil {
				continue
			}
			fd.WriteAt([]byte{'!'}, n.Size-1)
			fd.Close()
			changed = true
			break
		}
	}
	if !changed {
		t.Fatal("no regular file to corrupt")
	}
	if err := CheckTree(a, b, Compare{Owners: true}); !errors.Is(err, ErrTreeDiffers) {
		t.Fatalf("changed tree not detected: %v", err)
	}
}

// TestWorkloadVerify checks the crash-verification logic on the host: a
// clean run verifies; an in-flight operation that happened or did not
// happen both verify; a tree changed otherwise does not.
func TestWorkloadVerify(t *testing.T) {
	dir := t.TempDir()
	shadow, _ := MountTmpfs(t, 256<<20)
	w, err := NewWorkload(dir, shadow, 3, 42, GenOptions{BigEvery: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if n := w.Run(300, nil); n != 900 {
		t.Fatalf("ran %d ops, want 900", n)
	}
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.Verify(dir); err != nil {
		t.Fatalf("clean run: %v", err)
	}
	// An operation that reached the file system but not the shadow, with
	// side effects (retry until one succeeds).
	wk := w.workers[0]
	for {
		op := wk.gen.Next()
		if op.Apply(dir) == nil && op.Kind != OpChmod {
			wk.inflight = &op
			break
		}
		// A failed op changed nothing; keep the shadow in step anyway.
		op.Apply(shadow)
	}
	if err := w.Verify(dir); err != nil {
		t.Fatalf("in-flight op that happened: %v", err)
	}
	if wk.inflight != nil {
		t.Fatal("in-flight op not resolved")
	}
	// An in-flight operation that never happened.
	op := w.workers[1].gen.Next()
	w.workers[1].inflight = &op
	if err := w.Verify(dir); err != nil {
		t.Fatalf("in-flight op that did not happen: %v", err)
	}
	// A change nobody made is caught.
	writeFile(t, dir+"/w2/intruder", []byte("x"), 0644)
	if err := w.Verify(dir); err == nil {
		t.Fatal("an extra file was not detected")
	}
}
