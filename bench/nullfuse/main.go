package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"bazil.org/fuse"
)

const fileNode = 2

// nullFS is the state: the one file's size.
type nullFS struct{ size atomic.Uint64 }

func (n *nullFS) attr(node fuse.NodeID) fuse.Attr {
	if node == fuse.RootID {
		return fuse.Attr{Inode: 1, Mode: os.ModeDir | 0o755, Nlink: 2, Valid: time.Hour}
	}
	return fuse.Attr{Inode: fileNode, Mode: 0o644, Nlink: 1, Size: n.size.Load(), Valid: time.Hour}
}

// grow raises the size to at least end.
func (n *nullFS) grow(end uint64) {
	for {
		old := n.size.Load()
		if end <= old || n.size.CompareAndSwap(old, end) {
			return
		}
	}
}

// serve answers one request.
func (n *nullFS) serve(req fuse.Request) {
	switch r := req.(type) {
	case *fuse.LookupRequest:
		if r.Node != fuse.RootID || r.Name != "f" {
			r.RespondError(syscall.ENOENT)
			return
		}
		r.Respond(&fuse.LookupResponse{Node: fileNode, Attr: n.attr(fileNode), EntryValid: time.Hour})
	case *fuse.GetattrRequest:
		r.Respond(&fuse.GetattrResponse{Attr: n.attr(r.Node)})
	case *fuse.SetattrRequest:
		if r.Valid.Size() && r.Node == fileNode {
			n.size.Store(r.Size)
		}
		r.Respond(&fuse.SetattrResponse{Attr: n.attr(r.Node)})
	case *fuse.OpenRequest:
		r.Respond(&fuse.OpenResponse{Handle: 1})
	case *fuse.WriteRequest:
		n.grow(uint64(r.Offset) + uint64(len(r.Data)))
		r.Respond(&fuse.WriteResponse{Size: len(r.Data)})
	case *fuse.ReadRequest:
		if r.Dir {
			r.Respond(&fuse.ReadResponse{})
			return
		}
		size := n.size.Load()
		k := 0
		if off := uint64(r.Offset); off < size {
			k = int(min(uint64(r.Size), size-off))
		}
		r.Respond(&fuse.ReadResponse{Data: make([]byte, k)})
	case *fuse.FlushRequest:
		r.Respond()
	case *fuse.ReleaseRequest:
		r.Respond()
	case *fuse.FsyncRequest:
		r.Respond()
	case *fuse.StatfsRequest:
		r.Respond(&fuse.StatfsResponse{Bsize: 4096, Frsize: 4096, Namelen: 255})
	case *fuse.ForgetRequest:
		r.Respond()
	case *fuse.BatchForgetRequest:
		r.Respond()
	default:
		req.RespondError(syscall.ENOSYS)
	}
}

// run mounts at dir and serves until it is unmounted.
func run(dir string, ready func()) error {
	c, err := fuse.Mount(dir, fuse.FSName("nullfuse"), fuse.Subtype("nullfuse"))
	if err != nil {
		return err
	}
	defer c.Close()
	if ready != nil {
		ready()
	}
	n := &nullFS{}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				req, err := c.ReadRequest()
				if err == io.EOF {
					return // unmounted
				}
				var errno syscall.Errno
				if errors.As(err, &errno) && errno != syscall.EINTR && errno != syscall.EAGAIN {
					return // the connection is gone
				}
				if err != nil {
					continue // interrupted, or a malformed message bazil dropped
				}
				n.serve(req)
			}
		}()
	}
	wg.Wait()
	return nil
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: nullfuse MOUNTPOINT")
		os.Exit(2)
	}
	dir := os.Args[1]
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		if err := fuse.Unmount(dir); err != nil {
			fmt.Fprintf(os.Stderr, "nullfuse: unmounting %s: %v\n", dir, err)
		}
	}()
	if err := run(dir, nil); err != nil {
		fmt.Fprintf(os.Stderr, "nullfuse: %v\n", err)
		os.Exit(1)
	}
}
