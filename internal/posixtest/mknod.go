package posixtest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Special files made with mknod(2).
var mknodTests = map[string]Test{
	"MknodFifo":   testMknodFifo,
	"MknodSocket": testMknodSocket,
	"MknodDevice": testMknodDevice,
	"MknodErrors": testMknodErrors,
	"MknodReg":    testMknodReg,
	"DeviceOpen":  testDeviceOpen,
}

func testMknodFifo(t *testing.T, dir string) {
	p := join(dir, "fifo")
	ok(t, unix.Mknod(p, unix.S_IFIFO|0640, 0), "mknod fifo")
	st := lstat(t, p)
	if st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Size != 0 || st.Nlink != 1 {
		t.Fatalf("fifo: mode %o size %d nlink %d", st.Mode, st.Size, st.Nlink)
	}
	// The FIFO works: what is written comes out the other end. Opening
	// both ends with O_RDWR avoids blocking.
	fd := open(t, p, unix.O_RDWR, 0)
	_, err := unix.Write(fd, []byte("through the pipe"))
	ok(t, err, "write fifo")
	buf := make([]byte, 64)
	n, err := unix.Read(fd, buf)
	ok(t, err, "read fifo")
	if string(buf[:n]) != "through the pipe" {
		t.Fatalf("fifo read %q", buf[:n])
	}
	// Writing through the FIFO does not change the file system.
	if st := lstat(t, p); st.Size != 0 {
		t.Fatalf("fifo size %d after use", st.Size)
	}
}

func testMknodSocket(t *testing.T, dir string) {
	p := join(dir, "sock")
	ok(t, unix.Mknod(p, unix.S_IFSOCK|0600, 0), "mknod socket")
	st := lstat(t, p)
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		t.Fatalf("socket mode %o", st.Mode)
	}
	// Nobody listens: connect is refused.
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	ok(t, err, "socket")
	defer unix.Close(fd)
	wantErr(t, unix.Connect(fd, &unix.SockaddrUnix{Name: p}), unix.ECONNREFUSED, "connect to an unbound socket file")
}

func testMknodDevice(t *testing.T, dir string) {
	needRoot(t)
	for _, c := range []struct {
		name  string
		typ   uint32
		major uint32
		minor uint32
	}{
		{"null", unix.S_IFCHR, 1, 3},
		{"loop", unix.S_IFBLK, 7, 0},
		{"big", unix.S_IFCHR, 4095, 1048575}, // widest dev_t the kernel encodes
	} {
		p := join(dir, c.name)
		ok(t, unix.Mknod(p, c.typ|0620, int(unix.Mkdev(c.major, c.minor))), "mknod "+c.name)
		st := lstat(t, p)
		if st.Mode&unix.S_IFMT != c.typ {
			t.Fatalf("%s: mode %o", c.name, st.Mode)
		}
		if unix.Major(st.Rdev) != c.major || unix.Minor(st.Rdev) != c.minor {
			t.Fatalf("%s: rdev %d:%d, want %d:%d", c.name, unix.Major(st.Rdev), unix.Minor(st.Rdev), c.major, c.minor)
		}
		if st.Size != 0 {
			t.Fatalf("%s: size %d", c.name, st.Size)
		}
	}
}

// A device node works as the device it names (unless the mount is nodev,
// which a root mount of a disk file system is not by default): here the
// null device, which takes every write and reads as empty.
func testDeviceOpen(t *testing.T, dir string) {
	needRoot(t)
	needMountFlagOff(t, dir, unix.ST_NODEV, "nodev")
	p := join(dir, "null")
	ok(t, unix.Mknod(p, unix.S_IFCHR|0666, int(unix.Mkdev(1, 3))), "mknod null")
	fd := open(t, p, unix.O_RDWR, 0)
	defer unix.Close(fd)
	n, err := unix.Write(fd, []byte("into the void"))
	ok(t, err, "write to the null device")
	if n != len("into the void") {
		t.Fatalf("write to the null device: %d bytes", n)
	}
	buf := make([]byte, 16)
	n, err = unix.Read(fd, buf)
	ok(t, err, "read the null device")
	if n != 0 {
		t.Fatalf("read %d bytes from the null device", n)
	}
	if st := lstat(t, p); st.Size != 0 {
		t.Fatalf("device node size %d after use", st.Size)
	}
}

func testMknodErrors(t *testing.T, dir string) {
	p := join(dir, "fifo")
	ok(t, unix.Mkfifo(p, 0644), "mkfifo")
	wantErr(t, unix.Mkfifo(p, 0644), unix.EEXIST, "mkfifo existing")
	wantErr(t, unix.Mknod(join(dir, "missing", "x"), unix.S_IFIFO|0644, 0), unix.ENOENT, "mknod in missing dir")
	wantErr(t, unix.Mknod(join(dir, "dirnode"), unix.S_IFDIR|0755, 0), unix.EPERM, "mknod S_IFDIR")
}

func testMknodReg(t *testing.T, dir string) {
	// mknod with S_IFREG (or type 0) makes an empty regular file.
	ok(t, unix.Mknod(join(dir, "r"), unix.S_IFREG|0644, 0), "mknod S_IFREG")
	ok(t, unix.Mknod(join(dir, "z"), 0644, 0), "mknod type 0")
	for _, n := range []string{"r", "z"} {
		st := lstat(t, join(dir, n))
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0 {
			t.Fatalf("%s: mode %o size %d", n, st.Mode, st.Size)
		}
	}
	writeFile(t, join(dir, "r"), []byte("x"), 0644)
	wantContent(t, join(dir, "r"), []byte("x"))
}
