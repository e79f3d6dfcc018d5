// Command nullfuse is a FUSE file system that stores nothing: the floor
// under any FUSE daemon's write path, measured beside Conquest and ext4.
//
// Its root holds one regular file, "f", of any size. WRITE is answered at
// once with the full length and the data is dropped (the size grows to
// cover it); READ returns zeros up to the size; FSYNC, FLUSH and RELEASE do
// nothing. It serves requests on bazil.org/fuse's protocol layer with two
// reader goroutines, each reading a request and answering it in turn, the
// shape of Conquest's own serve loop (fusefs/server.go) without the file
// system behind it.
//
// So `dd if=/dev/zero of=MNT/f bs=8k count=12800 conv=fsync,notrunc` on
// it measures what a write(2) costs when the daemon's own work is nothing:
// the kernel's FUSE request, two context switches and the copy. On the
// 2-core test VM of 2026-12-04 that was 196–308 MB/s, against 321–466 MB/s
// for ext4 on a loop file in the same rounds (docs/PERFORMANCE.md, session
// 36): no write-through FUSE daemon reaches ext4 with 8 KiB writes there.
//
// Usage, as root: nullfuse MOUNTPOINT (unmounts on SIGINT or SIGTERM, or
// with fusermount3 -u).
package main
