package fusefs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"bazil.org/fuse"

	"conquest/conquest"
	"conquest/internal/reaper"
	"conquest/pram"
)

// mountHere mounts a fresh file system in-process (package-internal tests
// cannot use internal/mounttest, which imports this package).
func mountHere(t *testing.T, o Options) (*Server, string) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("no fusermount3")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "pram.img")
	if err := conquest.Mkfs(img, "", conquest.MkfsOptions{PramSize: 64 << 20}); err != nil {
		t.Fatal(err)
	}
	fsys, err := conquest.Open(img, "", conquest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	reaper.Mount(mnt)
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	s, err := Mount(fsys, mnt, o)
	if err != nil {
		fsys.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Unmount(); err != nil {
			t.Error(err)
		}
		select {
		case <-s.Done():
		case <-time.After(30 * time.Second):
			t.Error("serve loop did not end")
			return
		}
		if err := s.Wait(); err != nil {
			t.Error(err)
		}
		if errs := fsys.Check(); len(errs) > 0 {
			t.Errorf("check: %v", errs)
		}
		if err := fsys.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, mnt
}

// blockLookups makes LOOKUPs of names starting with prefix wait until the
// returned release function is called. Other requests pass.
func blockLookups(t *testing.T, prefix string) (release func(), blocked *sync.WaitGroup) {
	gate := make(chan struct{})
	blocked = new(sync.WaitGroup)
	h := func(req fuse.Request) {
		if r, ok := req.(*fuse.LookupRequest); ok && strings.HasPrefix(r.Name, prefix) {
			blocked.Done()
			<-gate
		}
	}
	testHookServe.Store(&h)
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(gate)
			testHookServe.Store(nil)
		})
	}
	t.Cleanup(release)
	return release, blocked
}

// A request that blocks must not starve the others: with every initial
// reader stuck in a slow operation, another reader is started and a plain
// stat still completes.
func TestBlockedReadersDoNotStarve(t *testing.T) {
	const slow = 2 * defaultReaders
	s, mnt := mountHere(t, Options{NegativeTTL: -1})
	if err := os.WriteFile(filepath.Join(mnt, "fast"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	release, blocked := blockLookups(t, "slow")
	blocked.Add(slow)
	done := make(chan error, slow)
	for i := range slow {
		go func() {
			_, err := os.Stat(filepath.Join(mnt, "slow"+string(rune('a'+i))))
			done <- err
		}()
	}
	waitGroupTimeout(t, blocked, 10*time.Second, "slow lookups never reached the server: readers starved")

	// Every slow lookup holds a reader; the fast one must still be served.
	statDone := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(mnt, "fast"))
		statDone <- err
	}()
	select {
	case err := <-statDone:
		if err != nil {
			t.Fatalf("stat fast: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stat blocked behind slow operations")
	}
	s.mu.Lock()
	readers := s.readers
	s.mu.Unlock()
	if readers <= slow {
		t.Errorf("readers = %d with %d blocked; want more than %d", readers, slow, slow)
	}
	release()
	for range slow {
		if err := <-done; !errors.Is(err, os.ErrNotExist) {
			t.Errorf("slow stat: %v, want not-exist", err)
		}
	}
	// Extra readers retire once idle: back to the idle target.
	deadline := time.Now().Add(10 * time.Second)
	for {
		os.Stat(filepath.Join(mnt, "fast")) // wake a reader so it can retire
		s.mu.Lock()
		idle := s.idle
		s.mu.Unlock()
		if idle <= defaultReaders {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle readers = %d, want <= %d", idle, defaultReaders)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A signal to a process waiting on a request makes the kernel send
// INTERRUPT, which is acknowledged without a reply; the late answer to the
// interrupted request is dropped by the kernel, and serving goes on.
func TestInterrupt(t *testing.T) {
	s, mnt := mountHere(t, Options{})
	release, blocked := blockLookups(t, "victim")
	blocked.Add(1)
	cmd := exec.Command("stat", filepath.Join(mnt, "victim"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitGroupTimeout(t, blocked, 10*time.Second, "lookup never arrived")
	// The process stays in the kernel until the request is answered.
	cmd.Process.Signal(syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for s.Stats()["INTERRUPT"] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no INTERRUPT received; stats %v", s.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	release()
	cmd.Wait()
	if err := os.WriteFile(filepath.Join(mnt, "after"), []byte("ok"), 0o644); err != nil {
		t.Fatalf("serving after interrupt: %v", err)
	}
}

func waitGroupTimeout(t *testing.T, wg *sync.WaitGroup, d time.Duration, msg string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatal(msg)
	}
}

func TestErrnoTable(t *testing.T) {
	for _, e := range errnoTable {
		got, known := Errno(errors.Join(errors.New("context"), e.err))
		if !known || got != e.errno {
			t.Errorf("Errno(wrapped %v) = %v, %v; want %v", e.err, got, known, e.errno)
		}
	}
	if got, known := Errno(syscall.EXDEV); got != syscall.EXDEV || !known {
		t.Errorf("bare errno: %v %v", got, known)
	}
	if got, known := Errno(errors.New("surprise")); got != syscall.EIO || known {
		t.Errorf("unknown error: %v %v; want EIO, false", got, known)
	}
	seen := map[error]bool{}
	for _, e := range errnoTable {
		if seen[e.err] {
			t.Errorf("%v listed twice", e.err)
		}
		seen[e.err] = true
	}
}

func TestModeRoundTrip(t *testing.T) {
	for _, typ := range []uint32{conquest.S_IFREG, conquest.S_IFDIR, conquest.S_IFLNK, conquest.S_IFIFO,
		conquest.S_IFSOCK, conquest.S_IFCHR, conquest.S_IFBLK} {
		for _, perm := range []uint32{0, 0o644, 0o7777, 0o1777, 0o4755, 0o2711} {
			u := typ | perm
			if got := unixMode(fileMode(u)); got != u {
				t.Errorf("unixMode(fileMode(%#o)) = %#o", u, got)
			}
		}
	}
}

func TestDirentEncoding(t *testing.T) {
	for _, name := range []string{"a", "1234567", "12345678", strings.Repeat("n", 255)} {
		b := make([]byte, direntSize(len(name)))
		for i := range b {
			b[i] = 0xff // the padding must be cleared
		}
		n := putDirent(b, 77, 1<<61+5, conquest.DT_REG, name)
		if n != len(b) || n%8 != 0 || n < 24+len(name) || n >= 24+len(name)+8 {
			t.Fatalf("%q: size %d", name, n)
		}
		if ne.Uint64(b) != 77 || ne.Uint64(b[8:]) != 1<<61+5 || ne.Uint32(b[16:]) != uint32(len(name)) ||
			ne.Uint32(b[20:]) != uint32(conquest.DT_REG) || string(b[24:24+len(name)]) != name {
			t.Fatalf("%q: bad encoding %x", name, b[:24])
		}
		for _, c := range b[24+len(name):] {
			if c != 0 {
				t.Fatalf("%q: padding not zero", name)
			}
		}
	}
}

// The fallback through bazil's encoders (used when the device descriptor
// cannot be found) serves every reply kind correctly, except that it cannot
// carry the sticky bit.
func TestBazilReplyFallback(t *testing.T) {
	_, mnt := mountHere(t, Options{bazilReplies: true})
	p := func(n string) string { return filepath.Join(mnt, n) }
	if err := os.WriteFile(p("f"), []byte("data"), 0o640); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p("f")); err != nil || string(b) != "data" {
		t.Fatalf("read: %q %v", b, err)
	}
	if err := os.Mkdir(p("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", p("l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p("f"), p("h")); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p("f"), 2); err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(p("h"))
	if err != nil || st.Size() != 2 || st.Mode().Perm() != 0o640 {
		t.Fatalf("stat h: %v %v", st, err)
	}
	names, err := os.ReadDir(mnt)
	if err != nil || len(names) != 4 {
		t.Fatalf("readdir: %v %v", names, err)
	}
	if _, err := os.Stat(p("missing")); !os.IsNotExist(err) {
		t.Fatalf("missing: %v", err)
	}
	if err := syscall.Chmod(p("d"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p("d")); err != nil || st.Mode().Perm() != 0o777 {
		t.Fatalf("chmod 1777: %v %v", st, err)
	}
}

// inGroup: the fsgid, then the supplementary groups from /proc; no pid or
// an unknown process counts as not a member.
func TestInGroup(t *testing.T) {
	pid := uint32(os.Getpid())
	gs, ok := procGroups(pid)
	want, err := os.Getgroups()
	if !ok || err != nil || len(gs) != len(want) {
		t.Fatalf("procGroups(%d) = %v %v, os.Getgroups = %v %v", pid, gs, ok, want, err)
	}
	for i := range gs {
		if gs[i] != uint32(want[i]) {
			t.Fatalf("procGroups(%d) = %v, os.Getgroups = %v", pid, gs, want)
		}
	}
	const other = 4242424
	h := &fuse.Header{Uid: 65534, Gid: 65534, Pid: pid}
	if !inGroup(h, 65534) {
		t.Error("fsgid is not a member")
	}
	if inGroup(h, other) {
		t.Errorf("member of %d, which is not among the groups %v", other, gs)
	}
	for _, g := range gs {
		if !inGroup(h, g) {
			t.Errorf("not a member of supplementary group %d", g)
		}
		if inGroup(&fuse.Header{Gid: 65534, Pid: 0}, g) && g != 65534 {
			t.Errorf("pid 0 counts as a member of %d", g)
		}
	}
	if _, ok := procGroups(1 << 30); ok {
		t.Error("groups of a process that does not exist")
	}
}

// close(2) sends RELEASE in the background, and the kernel its FORGET of an
// unlinked inode: a statfs right after an unlink of a file just closed must
// still see its space freed, even when the requests that free it are slow
// to serve.
func TestStatfsWaitsForRelease(t *testing.T) {
	srv, mnt := mountHere(t, Options{})
	h := func(req fuse.Request) {
		if frees, _ := freesInode(req); frees {
			time.Sleep(5 * time.Millisecond)
		}
	}
	testHookServe.Store(&h)
	t.Cleanup(func() { testHookServe.Store(nil) })
	// The FORGET that the kernel queues only when the daemon answers the
	// RELEASE (the file was unlinked while its RELEASE was being served)
	// STATFS waited for only 1 ms after the RELEASE until session 39: under load its
	// reader can take longer, and with -race and another test beside it
	// 5 of 320 rounds missed (session 38). Now it waits for that FORGET
	// itself (TestStatfsWaitsForLateForget).
	// Before session 38 a RELEASE read but not yet registered was missed
	// too (up to 3 rounds of 20 beside other packages). Without the wait 3
	// or 4 rounds of 10 miss (measured six times; the rest find the RELEASE
	// served already), so 40 rounds with up to 6 missed tell the two apart.
	const rounds = 40
	if missed := unlinkThenStatfs(t, mnt, rounds); missed > 6 {
		t.Fatalf("%d of %d statfs calls right after unlink did not see the space freed", missed, rounds)
	}
	if srv.Stats()["STATFS-WAITS"] == 0 {
		t.Error("no statfs waited for the slowed RELEASE and FORGET")
	}
}

// unlinkThenStatfs writes a 4 MiB file under mnt and closes it, unlinks it
// and calls statfs at once, rounds times, and returns in how many rounds
// statfs did not show the file's space free again.
func unlinkThenStatfs(t *testing.T, mnt string, rounds int) (missed int) {
	t.Helper()
	const size = 4 << 20
	p := filepath.Join(mnt, "big")
	bfree := func() uint64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
		return st.Bfree * uint64(st.Frsize)
	}
	for round := range rounds {
		before := bfree()
		if err := os.WriteFile(p, make([]byte, size), 0o644); err != nil { // closes: RELEASE
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if after := bfree(); after+size/2 < before {
			missed++
			t.Logf("round %d: statfs right after unlink: %d bytes free, %d before the file was written", round, after, before)
		}
	}
	return missed
}

// The FORGET that frees a file unlinked while its RELEASE was being served
// is queued by the kernel only when the daemon answers that RELEASE, after
// the STATFS that follows the unlink may have been read. STATFS waits for
// it (conquest.FS.ForgetDue), however long its reader takes to get to it:
// here every FORGET is registered 5 ms after its read, where the wait that
// expected it within 1 ms of the RELEASE (session 38) missed all 20 rounds.
func TestStatfsWaitsForLateForget(t *testing.T) {
	srv, mnt := mountHere(t, Options{})
	h := func(req fuse.Request) {
		if _, release := freesInode(req); release {
			time.Sleep(5 * time.Millisecond) // still in progress at the unlink
		}
	}
	testHookServe.Store(&h)
	t.Cleanup(func() { testHookServe.Store(nil) })
	hr := func(req fuse.Request) {
		if frees, release := freesInode(req); frees && !release {
			time.Sleep(5 * time.Millisecond)
		}
	}
	testHookRead.Store(&hr)
	t.Cleanup(func() { testHookRead.Store(nil) })
	const rounds = 20
	missed := unlinkThenStatfs(t, mnt, rounds)
	// Each round's wait is bounded (freeWait, 50 ms): one round in ten
	// may overrun it on a loaded machine.
	if missed > rounds/10 {
		t.Fatalf("%d of %d statfs calls right after unlink did not see the space freed", missed, rounds)
	}
	if srv.Stats()["STATFS-WAITS"] == 0 {
		t.Error("no statfs waited")
	}
}

// A read right after a writer's close updates atime (relatime), though the
// kernel sends that close's RELEASE in the background and another reader
// may still be serving it, or not even have registered it, when the
// reader's OPEN arrives: the open waits for the RELEASEs in progress before
// it decides that the file is still open for writing and keeps its cached
// first page (atimeCache), and readers register a RELEASE before the next
// read (readMu).
func TestAtimeReadRightAfterWriterClose(t *testing.T) {
	srv, mnt := mountHere(t, Options{})
	p := filepath.Join(mnt, "f")
	data := make([]byte, 8192)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// The writer's RELEASE is slow to serve, and slow to register: the
	// reader that has it registers it 5 ms after its read returns (in a
	// run of this test one came back from read(2) 160 µs after another
	// reader had the OPEN that followed it), and no other reader reads
	// meanwhile (readMu), so the OPEN still finds it.
	writerRelease := func(req fuse.Request) bool {
		r, ok := req.(*fuse.ReleaseRequest)
		return ok && !r.Dir && r.Flags&fuse.OpenAccessModeMask == fuse.OpenWriteOnly
	}
	h := func(req fuse.Request) {
		if writerRelease(req) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	testHookServe.Store(&h)
	t.Cleanup(func() { testHookServe.Store(nil) })
	hr := func(req fuse.Request) {
		if writerRelease(req) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	testHookRead.Store(&hr)
	t.Cleanup(func() { testHookRead.Store(nil) })
	page := make([]byte, 4096)
	for round := range 40 {
		time.Sleep(2 * time.Millisecond)
		// The reader's RELEASE of the round before has been served: the
		// OPEN below has no other RELEASE to wait for.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Microsecond) {
			if busy, _ := srv.frees.startedBefore(time.Now(), true); !busy {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a RELEASE still in progress after 10 s")
			}
		}
		w, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		data[1] = byte(round + 1)
		_, err = syscall.Pwrite(w, data[:4096], 0) // cached by the kernel, a whole page
		if err := errors.Join(err, syscall.Close(w)); err != nil {
			t.Fatal(err)
		}
		reads := srv.Stats()["READ"]
		r, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		n, err := syscall.Pread(r, page, 0)
		if err := errors.Join(err, syscall.Close(r)); err != nil || n != len(page) || page[1] != data[1] {
			t.Fatalf("round %d: read %d bytes, byte 1 %d (want %d): %v", round, n, page[1], data[1], err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Atim.Nano() < st.Mtim.Nano() {
			t.Errorf("round %d: a read right after the writer's close left atime %v before mtime %v (%d READs)",
				round, st.Atim, st.Mtim, srv.Stats()["READ"]-reads)
		}
	}
}

// A statfs when no inode is being freed, and none was freed just before,
// answers without waiting: programs that poll free space (stress-ng, a
// database before each write) took 4.5 ms a call when every STATFS waited
// for a quiet period.
func TestStatfsDoesNotWaitWhenIdle(t *testing.T) {
	srv, mnt := mountHere(t, Options{})
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil { // may wait: the RELEASE just ended
		t.Fatal(err)
	}
	waits := srv.Stats()["STATFS-WAITS"]
	fd, err := syscall.Open(filepath.Join(mnt, "f"), syscall.O_RDONLY|syscall.O_CLOEXEC, 0) // held open: no RELEASE below
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	for range 100 {
		if err := syscall.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Fstatfs(fd, &st); err != nil {
			t.Fatal(err)
		}
	}
	if got := srv.Stats()["STATFS-WAITS"] - waits; got != 0 {
		t.Errorf("%d of 200 statfs calls waited with nothing being freed", got)
	}
	if n := srv.Stats()["STATFS"]; n < 200 {
		t.Fatalf("only %d STATFS requests reached the daemon", n)
	}
}

// parseRename2 takes a well-formed FUSE_RENAME2 message apart and refuses
// every malformed one (wrong length or opcode, missing terminators, bytes
// after the second name), so that rename2 answers ENOSYS instead of acting
// on garbage.
func TestParseRename2(t *testing.T) {
	build := func(newDir uint64, flags uint32, names string) []byte {
		m := make([]byte, inHeaderSize+rename2InSize, inHeaderSize+rename2InSize+len(names))
		m = append(m, names...)
		binary.LittleEndian.PutUint32(m[0:], uint32(len(m)))
		binary.LittleEndian.PutUint32(m[4:], opcodeRename2)
		binary.LittleEndian.PutUint64(m[inHeaderSize:], newDir)
		binary.LittleEndian.PutUint32(m[inHeaderSize+8:], flags)
		return m
	}
	in, ok := parseRename2(build(7, 2, "old\x00new\x00"))
	if !ok || in.newDir != 7 || in.flags != 2 || in.oldName != "old" || in.newName != "new" {
		t.Fatalf("parsed %+v, %v", in, ok)
	}
	bad := map[string][]byte{
		"no second name": build(7, 1, "old\x00"),
		"unterminated":   build(7, 1, "old\x00new"),
		"trailing bytes": build(7, 1, "old\x00new\x00x"),
		"no names":       build(7, 1, ""),
		"short":          build(7, 1, "a\x00b\x00")[:inHeaderSize+8],
		"nil":            nil,
	}
	wrongOp := build(7, 1, "a\x00b\x00")
	binary.LittleEndian.PutUint32(wrongOp[4:], 12)
	bad["another opcode"] = wrongOp
	wrongLen := build(7, 1, "a\x00b\x00")
	binary.LittleEndian.PutUint32(wrongLen[0:], 99)
	bad["length mismatch"] = wrongLen
	for what, m := range bad {
		if in, ok := parseRename2(m); ok {
			t.Errorf("%s: parsed as %+v", what, in)
		}
	}
}

// parseLseek takes a well-formed FUSE_LSEEK message apart (fh, offset,
// whence) and refuses a malformed one, so that lseek answers ENOSYS
// instead of acting on garbage.
func TestParseLseek(t *testing.T) {
	build := func(off int64, whence uint32) []byte {
		m := make([]byte, inHeaderSize+lseekInSize)
		binary.LittleEndian.PutUint32(m[0:], uint32(len(m)))
		binary.LittleEndian.PutUint32(m[4:], opcodeLseek)
		binary.LittleEndian.PutUint64(m[inHeaderSize:], 99) // fh
		binary.LittleEndian.PutUint64(m[inHeaderSize+8:], uint64(off))
		binary.LittleEndian.PutUint32(m[inHeaderSize+16:], whence)
		return m
	}
	in, ok := parseLseek(build(1<<40+3, 4))
	if !ok || in.offset != 1<<40+3 || in.whence != 4 {
		t.Fatalf("parsed %+v, %v", in, ok)
	}
	if in, ok := parseLseek(build(-1, 3)); !ok || in.offset != -1 {
		t.Fatalf("negative offset parsed %+v, %v", in, ok)
	}
	long := append(build(0, 3), 0)
	binary.LittleEndian.PutUint32(long[0:], uint32(len(long)))
	wrongOp := build(0, 3)
	binary.LittleEndian.PutUint32(wrongOp[4:], opcodeRename2)
	for what, m := range map[string][]byte{
		"short":          build(0, 3)[:inHeaderSize+16],
		"trailing bytes": long,
		"another opcode": wrongOp,
		"nil":            nil,
	} {
		if in, ok := parseLseek(m); ok {
			t.Errorf("%s: parsed as %+v", what, in)
		}
	}
}

// STATFS waits for frees that started before it arrived and never for
// later ones: among other processes' endless deletes it must not wait out
// freeWait every time (stress-ng's symlink stressor, two instances, took
// 27 s instead of 5 when it did).
func TestFreesAwait(t *testing.T) {
	var f frees
	if waited, timedOut := f.await(false); waited || timedOut {
		t.Fatalf("nothing ever freed: waited %v, timed out %v", waited, timedOut)
	}

	// A free that started before STATFS and does not end: wait, up to freeWait.
	id := f.begin(true)
	if waited, timedOut := f.await(false); !waited || !timedOut {
		t.Fatalf("free in progress: waited %v, timed out %v", waited, timedOut)
	}

	// It ends while STATFS waits: STATFS answers then, not at the deadline.
	done := make(chan [2]bool)
	go func() {
		w, to := f.await(false)
		done <- [2]bool{w, to}
	}()
	time.Sleep(time.Millisecond)
	f.end(id)
	if r := <-done; !r[0] || r[1] {
		t.Fatalf("free ended during the wait: waited %v, timed out %v", r[0], r[1])
	}

	// A free that starts after STATFS arrived and never ends (other
	// processes' deletes go on) is not waited for.
	later := frees{started: map[uint64]freeing{100: {start: time.Now().Add(time.Hour)}}}
	if waited, timedOut := later.await(false); waited || timedOut {
		t.Fatalf("free started after STATFS: waited %v, timed out %v", waited, timedOut)
	}

	// Nor is anything after a FORGET that ended: nothing follows it.
	var forgot frees
	forgot.end(forgot.begin(false))
	if waited, timedOut := forgot.await(false); waited || timedOut {
		t.Fatalf("after a FORGET: waited %v, timed out %v", waited, timedOut)
	}

	// Nor after a RELEASE that ended: the FORGET that may follow it is
	// awaitForgets' (the core knows whether one is due).
	var released frees
	released.end(released.begin(true))
	if waited, timedOut := released.await(false); waited || timedOut {
		t.Fatalf("after a RELEASE: waited %v, timed out %v", waited, timedOut)
	}

	// An OPEN waits only for the RELEASEs in progress, not for a FORGET.
	var both frees
	both.begin(false)
	rel := both.begin(true)
	go func() {
		time.Sleep(time.Millisecond)
		both.end(rel)
	}()
	if waited, timedOut := both.await(true); !waited || timedOut {
		t.Fatalf("RELEASE in progress beside a FORGET: waited %v, timed out %v", waited, timedOut)
	}
}

// parseTmpfile takes a well-formed FUSE_TMPFILE message apart and refuses
// malformed ones, so that tmpfile answers ENOSYS instead of acting on
// garbage.
func TestParseTmpfile(t *testing.T) {
	build := func(flags, mode uint32, name string) []byte {
		m := make([]byte, inHeaderSize+createInSize, inHeaderSize+createInSize+len(name))
		m = append(m, name...)
		binary.LittleEndian.PutUint32(m[0:], uint32(len(m)))
		binary.LittleEndian.PutUint32(m[4:], opcodeTmpfile)
		binary.LittleEndian.PutUint32(m[inHeaderSize:], flags)
		binary.LittleEndian.PutUint32(m[inHeaderSize+4:], mode)
		return m
	}
	in, ok := parseTmpfile(build(0o20200002, 0o100640, "/\x00"))
	if !ok || in.flags != 0o20200002 || in.mode != 0o100640 {
		t.Fatalf("parsed %+v, %v", in, ok)
	}
	wrongOp := build(2, 0o600, "/\x00")
	binary.LittleEndian.PutUint32(wrongOp[4:], opcodeRename2)
	wrongLen := build(2, 0o600, "/\x00")
	binary.LittleEndian.PutUint32(wrongLen[0:], 7)
	for what, m := range map[string][]byte{
		"unterminated name": build(2, 0o600, "/"),
		"bytes after name":  build(2, 0o600, "/\x00x"),
		"no name":           build(2, 0o600, ""),
		"short":             build(2, 0o600, "/\x00")[:inHeaderSize+8],
		"another opcode":    wrongOp,
		"length mismatch":   wrongLen,
		"nil":               nil,
	} {
		if in, ok := parseTmpfile(m); ok {
			t.Errorf("%s: parsed as %+v", what, in)
		}
	}
}

// whyNoFUSE names a missing fusermount3 (bazil's error would only say
// that the mount failed), and nothing when FUSE is usable.
func TestWhyNoFUSE(t *testing.T) {
	if _, err := exec.LookPath("fusermount3"); err == nil && os.Geteuid() == 0 {
		if why := whyNoFUSE(); why != "" {
			t.Errorf("root with fusermount3 installed: %q, want nothing", why)
		}
	}
	t.Setenv("PATH", t.TempDir())
	if why := whyNoFUSE(); !strings.Contains(why, "apt-get install fuse3") {
		t.Errorf("without fusermount3 on PATH: %q", why)
	}
}

// The space attribute's value round-trips, skips lines a newer daemon may
// add, and refuses a value that lacks a field or has a bad number.
func TestSpaceFormat(t *testing.T) {
	sp := conquest.Space{ArenaBytes: 1 << 30, HeapBytes: 1<<30 - 4096, HeapUsed: 12345, HeapFree: 999,
		Inodes: 7, DiskBytes: 4 << 30, DiskUsed: 3 << 20, DiskFree: 4<<30 - 3<<20, DiskAvail: 4<<30 - 3<<20 - 16<<20}
	v := FormatSpace(sp)
	got, err := ParseSpace(append(v, "future_field 1\n"...))
	if err != nil || got != sp {
		t.Fatalf("round trip of %q: %+v %v", v, got, err)
	}
	// A daemon from before the disk's overwrite reserve sends no
	// disk_avail: all of disk_free is available.
	old := strings.Replace(string(v), fmt.Sprintf("disk_avail %d\n", sp.DiskAvail), "", 1)
	if got, err := ParseSpace([]byte(old)); err != nil || got.DiskAvail != sp.DiskFree {
		t.Fatalf("value without disk_avail %q: %+v %v", old, got, err)
	}
	for _, bad := range []string{"", "arena_bytes 1\n", strings.Replace(string(v), "inodes 7", "inodes x", 1), "junk"} {
		if _, err := ParseSpace([]byte(bad)); err == nil {
			t.Errorf("ParseSpace(%q) accepted", bad)
		}
	}
}

// A request that a damaged arena stops with a panic the core's guards did
// not catch (an offset out of the arena's range) gets EIO and one log line
// that names the damage, without a stack that would look like a crash;
// any other panic, which may be a bug, is logged with its stack.
func TestPanicServingLogged(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(format, args...))
	}
	_, mnt := mountHere(t, Options{Logf: logf})
	h := func(req fuse.Request) {
		if r, ok := req.(*fuse.LookupRequest); ok {
			switch r.Name {
			case "damaged":
				panic(fmt.Errorf("%w: [8, +4096) in arena of 4096 bytes", pram.ErrOutOfRange))
			case "bug":
				var s []int
				_ = s[len(r.Name)]
			}
		}
	}
	testHookServe.Store(&h)
	t.Cleanup(func() { testHookServe.Store(nil) })
	for _, name := range []string{"damaged", "bug"} {
		if _, err := os.Lstat(filepath.Join(mnt, name)); !errors.Is(err, syscall.EIO) {
			t.Errorf("lstat %s: %v, want EIO", name, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var damaged, bug []string
	for _, l := range logs {
		switch {
		case strings.Contains(l, `"damaged"`):
			damaged = append(damaged, l)
		case strings.Contains(l, `"bug"`):
			bug = append(bug, l)
		}
	}
	if len(damaged) != 1 || !strings.Contains(damaged[0], "the arena is damaged") ||
		strings.Contains(damaged[0], "goroutine ") || strings.Contains(damaged[0], "panic") {
		t.Errorf("logs of the damaged lookup: %q, want one line naming the damage, no stack", damaged)
	}
	if len(bug) != 1 || !strings.Contains(bug[0], "index out of range") || !strings.Contains(bug[0], "goroutine ") {
		t.Errorf("logs of the other panic: %q, want one with its stack", bug)
	}
}

// With the writeback cache the kernel keeps a regular file's mtime and
// ctime and ignores the daemon's. A truncate(2) to the size the file
// already has changes neither there, so the daemon must not stamp them
// either: an outside review saw such files' times jump at the next mount
// (stat showed the old times until then). A truncate that changes the size
// carries the kernel's times, which the daemon stores as given.
func TestWritebackTruncateKeepsKernelTimes(t *testing.T) {
	srv, mnt := mountHere(t, Options{WritebackCache: true})
	p := filepath.Join(mnt, "f")
	if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	stat := func() (syscall.Stat_t, conquest.Attr) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		a, err := srv.fs.GetAttr(conquest.Ino(st.Ino))
		if err != nil {
			t.Fatal(err)
		}
		return st, a
	}
	same := func(k syscall.Timespec, c conquest.Timespec) bool {
		return k.Sec == c.Sec && k.Nsec == int64(c.Nsec)
	}
	before, _ := stat()
	for _, size := range []int64{5, 3} {
		time.Sleep(20 * time.Millisecond)
		if err := syscall.Truncate(p, size); err != nil {
			t.Fatal(err)
		}
		st, a := stat()
		if !same(st.Mtim, a.Mtime) || !same(st.Ctim, a.Ctime) {
			t.Errorf("truncate to %d: stat shows mtime %v ctime %v, the daemon stored %v %v",
				size, st.Mtim, st.Ctim, a.Mtime, a.Ctime)
		}
		if size == 5 && (st.Mtim != before.Mtim || st.Ctim != before.Ctim) {
			// The kernel's own rule, which this test relies on; should it
			// change, the daemon may stamp times again.
			t.Logf("the kernel changed times on a truncate to the same size: mtime %v -> %v", before.Mtim, st.Mtim)
		}
		if size == 3 && st.Mtim == before.Mtim {
			t.Errorf("a truncate that changed the size left mtime at %v", st.Mtim)
		}
	}
}

// With the writeback cache the kernel stamps a written file's mtime from
// its coarse clock, and the daemon stamps the times of a create from the
// same clock (UseCoarseClock): a file written after another was created is
// never older than it, and a file created and then written has atime at
// most mtime, as on ext4. With the daemon's finer clock both failed in
// almost every round (relatime then skipped the file's first read).
func TestWritebackTimesFollowKernelClock(t *testing.T) {
	_, mnt := mountHere(t, Options{WritebackCache: true})
	before := func(a, b syscall.Timespec) bool { return a.Sec < b.Sec || a.Sec == b.Sec && a.Nsec < b.Nsec }
	const n = 200
	older, atimeAfter := 0, 0
	for i := range n {
		pa, pb := filepath.Join(mnt, fmt.Sprintf("a%d", i)), filepath.Join(mnt, fmt.Sprintf("b%d", i))
		if err := os.WriteFile(pa, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pb, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		var a, b syscall.Stat_t
		if err := syscall.Stat(pa, &a); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(pb, &b); err != nil {
			t.Fatal(err)
		}
		if before(b.Mtim, a.Mtim) {
			older++
		}
		if before(b.Mtim, b.Atim) {
			atimeAfter++
		}
	}
	if older > 0 || atimeAfter > 0 {
		t.Errorf("of %d rounds: the file written later was older in %d, atime was after mtime in %d; want none", n, older, atimeAfter)
	}
}
