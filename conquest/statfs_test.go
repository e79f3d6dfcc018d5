package conquest

import "testing"

// statfs counts inodes as ext4 does, as far as a heap shared with data
// allows: each new file adds one to the inodes in use (f_files - f_ffree)
// and, but for the odd directory growth, takes one from f_ffree.
func TestStatFSInodeCounts(t *testing.T) {
	fs, _ := newTestFS(t)
	d := mkdir(t, fs, RootIno, "d")
	before := fs.StatFS()
	prev, ones := before, 0
	const n = 100
	for i := range n {
		create(t, fs, d.Ino, sprintf("f%d", i), nil)
		st := fs.StatFS()
		if prev.Ffree-st.Ffree == 1 {
			ones++
		}
		prev = st
	}
	if used := (prev.Files - prev.Ffree) - (before.Files - before.Ffree); used != n {
		t.Errorf("inodes in use grew by %d for %d files", used, n)
	}
	if ones < n*9/10 {
		t.Errorf("f_ffree fell by exactly one for %d of %d new files", ones, n)
	}
	if fell := before.Ffree - prev.Ffree; fell < n || fell > 2*n {
		t.Errorf("f_ffree fell by %d for %d new files", fell, n)
	}
}
