package posixtest

import (
	"fmt"
	"sort"
	"testing"
)

// Test is one conformance test. dir is an empty directory on the file system
// under test, owned by root with mode 0755 or stricter; the test may create
// anything inside it and need not clean up.
type Test func(t *testing.T, dir string)

// groups lists the per-topic tables; each topic file contributes one.
var groups = []map[string]Test{
	ioTests,
	dirTests,
	readdirTests,
	linkTests,
	symlinkTests,
	mknodTests,
	renameTests,
	truncateTests,
	attrTests,
	timeTests,
	xattrTests,
	statfsTests,
	lockTests,
	permTests,
	fsxTests,
}

// Tests returns the conformance suite, a fresh map on every call. Names are
// unique across topics (checked by the host test).
func Tests() map[string]Test {
	out := make(map[string]Test)
	for _, g := range groups {
		for name, fn := range g {
			if _, dup := out[name]; dup {
				panic(fmt.Sprintf("posixtest: duplicate test name %q", name))
			}
			out[name] = fn
		}
	}
	return out
}

// Names returns the names of Tests in sorted order, so runners iterate
// deterministically.
func Names() []string {
	m := Tests()
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
