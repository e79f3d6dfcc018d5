package conquest

import "conquest/dirhash"

// eachInodeLocked calls visit once for every inode reachable from the root
// (a file with several links once), breadth first, and returns the first
// error met on the way (an inode it cannot read is skipped). Orphans are
// not reached (the orphan list has them).
// Preconditions: fs.mu held.
func (fs *FS) eachInodeLocked(visit func(in inode)) error {
	root, err := fs.inode(RootIno)
	if err != nil {
		return err
	}
	seen := map[Ino]bool{root.ino: true}
	visit(root)
	queue := []inode{root}
	var first error
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if d.data() == 0 {
			continue
		}
		serr := fs.dir(d).Scan(0, func(e dirhash.Entry, next uint64) bool {
			in, err := fs.inode(Ino(e.Ino))
			if err != nil {
				if first == nil {
					first = err
				}
				return true
			}
			if seen[in.ino] {
				return true
			}
			seen[in.ino] = true
			visit(in)
			if in.isDir() {
				queue = append(queue, in)
			}
			return true
		})
		if serr != nil && first == nil {
			first = serr
		}
	}
	return first
}
