package racetest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestPattern(t *testing.T) {
	re := regexp.MustCompile(Pattern([]string{"TestA", "TestB.x"}))
	for name, want := range map[string]bool{"TestA": true, "TestB.x": true, "TestAB": false, "TestBax": false, "XTestA": false} {
		if re.MatchString(name) != want {
			t.Errorf("%q matched %v, want %v", name, !want, want)
		}
	}
	if regexp.MustCompile(Pattern(nil)).MatchString("TestA") {
		t.Error("the empty list matches a test")
	}
}

// fakeTB records a Fatalf instead of ending the test.
type fakeTB struct {
	testing.TB
	name  string
	fatal string
}

func (f *fakeTB) Name() string { return f.name }
func (f *fakeTB) Helper()      {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
}

func TestReducedNeedsListing(t *testing.T) {
	t.Setenv(HeavyOnlyEnv, "") // Select must not select here
	Select("TestListed")
	f := &fakeTB{TB: t, name: "TestUnlisted/sub"}
	Reduced(f)
	if !strings.Contains(f.fatal, "TestUnlisted") {
		t.Errorf("Reduced of an unlisted test: %q, want a failure naming it", f.fatal)
	}
	f = &fakeTB{TB: t, name: "TestListed/sub/x"}
	t.Setenv(FullEnv, "")
	if got := Reduced(f); f.fatal != "" || got != Enabled {
		t.Errorf("Reduced of a listed subtest = %v (failure %q), want %v", got, f.fatal, Enabled)
	}
	t.Setenv(FullEnv, "1")
	if Reduced(f) {
		t.Errorf("Reduced with $%s set", FullEnv)
	}
	t.Setenv(FullEnv, "")
	var ran []int
	for i := range 10 {
		if Sample(f, i, 10, 4) {
			ran = append(ran, i)
		}
	}
	want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	if Enabled {
		want = []int{0, 4, 8, 9}
	}
	if !slices.Equal(ran, want) {
		t.Errorf("Sample ran %v, want %v", ran, want)
	}
}

// TestHeavyPackagesInMakefile: the packages whose TestMain names heavy
// tests are exactly the Makefile's HEAVYPKGS, the ones `make test` runs a
// second time without -race; a package missing there would have its heavy
// tests run only scaled down.
func TestHeavyPackagesInMakefile(t *testing.T) {
	root := filepath.Join("..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HEAVYPKGS\s*:=\s*(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no HEAVYPKGS in the Makefile")
	}
	listed := strings.Fields(string(m[1]))
	var callers []string
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == "." {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if regexp.MustCompile(`\bracetest\.Select\(`).Match(b) {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			callers = append(callers, "./"+filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(listed)
	slices.Sort(callers)
	callers = slices.Compact(callers)
	if !slices.Equal(listed, callers) {
		t.Errorf("Makefile HEAVYPKGS = %v, packages calling racetest.Select = %v", listed, callers)
	}
	if len(callers) == 0 {
		t.Error("no package names heavy tests")
	}
}
