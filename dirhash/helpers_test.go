package dirhash

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"conquest/alloc"
	"conquest/pram"
)

// env is one arena holding one directory under test.
type env struct {
	t    testing.TB
	path string
	a    *pram.Arena
	h    *alloc.Heap
	root pram.Off

	maxJournal uint64 // most journal bytes one update used
}

// newEnv formats an arena of size bytes in t.TempDir and creates an empty
// directory in it.
func newEnv(t testing.TB, size uint64) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "arena")
	a, err := pram.Format(path, pram.Options{Size: size})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, path: path, a: a}
	t.Cleanup(func() {
		if e.a != nil {
			e.a.Close()
		}
	})
	tx := a.Begin()
	if e.h, err = alloc.Format(tx); err != nil {
		tx.Abort()
		t.Fatal(err)
	}
	tx.Commit()
	if err := e.update(func(tx *pram.Tx) (err error) {
		e.root, err = Create(tx, e.h)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) dir() Dir { return Open(e.h, e.root) }

// update runs fn in a transaction, committing on success and aborting on
// error. A panic (pram.ErrTxFull) aborts and fails the test.
func (e *env) update(fn func(tx *pram.Tx) error) (err error) {
	tx := e.a.Begin()
	defer func() {
		if p := recover(); p != nil {
			tx.Abort()
			e.t.Fatalf("panic in transaction: %v", p)
		}
	}()
	err = fn(tx)
	e.maxJournal = max(e.maxJournal, tx.Used())
	if err != nil {
		tx.Abort()
		return err
	}
	tx.Commit()
	return nil
}

func (e *env) insert(name string, ino uint64, typ uint8) error {
	return e.update(func(tx *pram.Tx) error { return e.dir().Insert(tx, []byte(name), ino, typ) })
}

func (e *env) delete(name string) (uint64, uint8, error) {
	var ino uint64
	var typ uint8
	err := e.update(func(tx *pram.Tx) (err error) {
		ino, typ, err = e.dir().Delete(tx, []byte(name))
		return err
	})
	return ino, typ, err
}

func (e *env) replace(name string, ino uint64, typ uint8) (uint64, uint8, error) {
	var oi uint64
	var ot uint8
	err := e.update(func(tx *pram.Tx) (err error) {
		oi, ot, err = e.dir().Replace(tx, []byte(name), ino, typ)
		return err
	})
	return oi, ot, err
}

// restart closes the arena cleanly and opens it again.
func (e *env) restart() {
	e.t.Helper()
	if err := e.a.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.reopen()
}

// crash drops the mapping without closing (kill -9) and opens it again.
func (e *env) crash() {
	e.t.Helper()
	if err := e.a.Abandon(); err != nil {
		e.t.Fatal(err)
	}
	e.reopen()
}

func (e *env) reopen() {
	e.t.Helper()
	var err error
	e.a = nil
	a, err := pram.Open(e.path)
	if err != nil {
		e.t.Fatal(err)
	}
	e.a = a
	if e.h, err = alloc.Open(a); err != nil {
		e.t.Fatal(err)
	}
}

// check runs the consistency walk: the directory's Check and the heap's
// leak check (every allocation reached exactly once).
func (e *env) check() {
	e.t.Helper()
	c := e.h.NewChecker()
	errs := e.dir().Check(c)
	errs = append(errs, c.Finish()...)
	for i, err := range errs {
		if i == 10 {
			e.t.Errorf("... and %d more", len(errs)-10)
			break
		}
		e.t.Errorf("check: %v", err)
	}
	if len(errs) > 0 {
		e.t.FailNow()
	}
}

type val struct {
	ino uint64
	typ uint8
}

// contents scans the whole directory, failing on a duplicate name or a
// cursor that does not move forward.
func (e *env) contents() map[string]val {
	e.t.Helper()
	got := map[string]val{}
	last := uint64(0)
	err := e.dir().Scan(0, func(en Entry, next uint64) bool {
		if next <= last || next >= 1<<62 {
			e.t.Errorf("cursor %d after %d", next, last)
		}
		last = next
		if _, dup := got[string(en.Name)]; dup {
			e.t.Errorf("scan returned %q twice", en.Name)
		}
		got[string(en.Name)] = val{en.Ino, en.Type}
		return true
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// sameAs fails unless the directory holds exactly model, by Scan, Lookup
// and Len.
func (e *env) sameAs(model map[string]val) {
	e.t.Helper()
	got := e.contents()
	if len(got) != len(model) {
		e.t.Fatalf("scan has %d entries, model %d", len(got), len(model))
	}
	for k, v := range model {
		if g, ok := got[k]; !ok || g != v {
			e.t.Fatalf("scan: %q = %v,%v, model %v", k, g, ok, v)
		}
		ino, typ, ok := e.dir().Lookup([]byte(k))
		if !ok || ino != v.ino || typ != v.typ {
			e.t.Fatalf("lookup %q = %d,%d,%v, model %v", k, ino, typ, ok, v)
		}
	}
	if n := e.dir().Len(); n != uint64(len(model)) {
		e.t.Fatalf("Len = %d, model %d", n, len(model))
	}
}

// setHash replaces HashFunc for the rest of the test.
func setHash(t testing.TB, f func([]byte) uint64) {
	old := HashFunc
	HashFunc = f
	t.Cleanup(func() { HashFunc = old })
}

// shape is a summary of the directory's structure.
func (e *env) shape() rootHdr {
	e.t.Helper()
	r, err := e.dir().loadRoot()
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func sortedNames(m map[string]val) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

func name(i int) string { return fmt.Sprintf("file-%07d", i) }

var (
	_ = bytes.Equal
	_ = errors.Is
)
