package fusefs

import (
	"os"
	"time"

	"bazil.org/fuse"
)

// Options tunes a mount. The zero value is the production configuration.
type Options struct {
	// AllowOther lets users other than the mounter use the file system
	// (mount option allow_other; non-root mounters need user_allow_other in
	// /etc/fuse.conf). Permission bits are always enforced by the kernel
	// (default_permissions).
	AllowOther bool

	// WritebackCache lets the kernel buffer writes in its page cache and send
	// them later (and own mtime and size meanwhile). Off by default: it makes
	// large writes several times faster (PostMark 500 B–1 MB 1.8x, 8 KiB
	// sequential writes 4.8x) but small-file work slower (PostMark 500 B–10
	// KB 0.8x, Sprite delete 0.6x), small files are what Conquest is for,
	// and buffered data is not in the arena until close or fsync (see
	// README, "Caching").
	WritebackCache bool

	// CachedWrites sends writes through handles opened O_WRONLY into the
	// page cache as well, as through every other handle, without the
	// writeback cache. Off by default: such handles then bypass the page
	// cache (FOPEN_DIRECT_IO; directio.go), which makes their writes faster
	// (1 GiB in 1 MiB writes 1.1–1.5x, PostMark 1.14–1.16x) but leaves a
	// file just written to be fetched from the daemon on its first read
	// (a 1 GiB file re-read at 2.6 GB/s instead of 11; README, "Caching").
	CachedWrites bool

	// NoSUID and NoDev make set-user-ID and set-group-ID bits of programs
	// on the mount, and device nodes there, ineffective (mount options
	// nosuid and nodev). Without them a mount made by root honours both, as
	// a disk file system mounted by root does; FUSE gives other users'
	// mounts nosuid and nodev in any case.
	NoSUID, NoDev bool

	// ReadOnly mounts read-only (mount option ro): the kernel refuses every
	// change with EROFS before it reaches the daemon. The core should then
	// be opened with NoAtime, as reads on a read-only mount change nothing.
	ReadOnly bool

	// NoExec makes programs on the mount impossible to execute (mount
	// option noexec). fusermount3 takes it, but bazil.org/fuse passes only
	// the options it knows, so Mount sets it afterwards on the mount point
	// (mountflags.go); that needs CAP_SYS_ADMIN (root).
	NoExec bool

	// NoAtime marks the mount noatime, as /proc/mounts and findmnt show it
	// (root only; the same way as NoExec). The kernel leaves a FUSE file's
	// atime to the daemon, so what keeps atime still is the core's
	// NoAtime, which the caller sets with it.
	NoAtime bool

	// Readers is the number of reader goroutines kept waiting for requests
	// (default 2; more measured slower, see doc.go). More are started while all are busy, up to MaxReaders
	// (default 64); the extra ones retire when idle.
	Readers    int
	MaxReaders int

	// OnBusy, if set, is called each time a request is read while at least
	// BusyCallers-1 others that callers wait for are being served: several
	// callers wait on the daemon at once (cmd/conquest then runs it on more
	// CPUs; procs.go). It must not block. Server.Busy counts these requests.
	OnBusy func()

	// ReadaheadKB is how far ahead the kernel reads a file sequentially
	// read (the mount's bdi read_ahead_kb; bdi.go). Zero means 1024; a
	// negative value leaves the kernel's default (128). Setting it needs
	// root; other mounts keep the default.
	ReadaheadKB int

	// EntryTTL, AttrTTL and NegativeTTL are how long the kernel may cache a
	// name, an inode's attributes and the absence of a name. Zero means the
	// default (one hour each: every change passes through this daemon, which
	// invalidates what the kernel cannot see change); a negative value
	// disables that cache.
	EntryTTL, AttrTTL, NegativeTTL time.Duration

	// FSName is the source shown in /proc/mounts (default "conquest").
	FSName string

	// Logf receives messages about requests that failed in unexpected ways;
	// nil discards them.
	Logf func(format string, args ...any)

	// bazilReplies makes every reply go through bazil's encoders, as when
	// the device descriptor cannot be found (tests of that fallback).
	bazilReplies bool
}

// BusyCallers is how many requests in service that callers wait for, the
// one just read included, make the server busy (Options.OnBusy): about that
// many processes or threads wait on the daemon at once. A single caller
// has one, beside what the kernel sends on its own (RELEASE, FORGET,
// INTERRUPT, the writeback cache's WRITEs: not counted), and the count may
// include a request or two already answered whose reader has not yet
// taken it off, or READs the kernel sends ahead of a reader: so 4, not 2.
// The count is only a hint (the governor in cmd/conquest boosts on a rate
// of them).
const BusyCallers = 4

const (
	defaultReaders    = 2
	defaultMaxReaders = 64
	defaultTTL        = time.Hour
	maxReadahead      = 1 << 20 // the kernel caps it at its own bdi limit
	maxBackground     = 64
	congestion        = 48
)

func ttl(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return defaultTTL
	case d < 0:
		return 0
	}
	return d
}

func (o Options) withDefaults() Options {
	if o.Readers <= 0 {
		o.Readers = defaultReaders
	}
	if o.MaxReaders < o.Readers {
		o.MaxReaders = max(defaultMaxReaders, o.Readers)
	}
	if o.ReadaheadKB == 0 {
		o.ReadaheadKB = defaultReadaheadKB
	}
	o.EntryTTL = ttl(o.EntryTTL)
	o.AttrTTL = ttl(o.AttrTTL)
	o.NegativeTTL = ttl(o.NegativeTTL)
	if o.FSName == "" {
		o.FSName = "conquest"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// mountOptions are the bazil mount options for o.
func (o Options) mountOptions() []fuse.MountOption {
	opts := []fuse.MountOption{
		fuse.FSName(o.FSName),
		fuse.Subtype("conquest"),
		fuse.DefaultPermissions(),
		fuse.AsyncRead(),
		fuse.MaxReadahead(maxReadahead),
		fuse.MaxBackground(maxBackground),
		fuse.CongestionThreshold(congestion),
		// Symlink targets never change: let the kernel keep them.
		fuse.CacheSymlinks(),
		// HANDLE_KILLPRIV_V2: we clear S_ISUID/S_ISGID on write, truncate
		// and chown ourselves (WriteKillSUIDGID, SetattrKillSUIDGID), and the
		// kernel sets SB_NOSEC, so it asks for security.capability once per
		// inode instead of before every write.
		fuse.HandleKillPriv(),
	}
	if o.AllowOther {
		opts = append(opts, fuse.AllowOther())
	}
	if os.Geteuid() == 0 {
		if !o.NoSUID {
			opts = append(opts, fuse.AllowSUID())
		}
		if !o.NoDev {
			opts = append(opts, fuse.AllowDev())
		}
	}
	if o.WritebackCache {
		opts = append(opts, fuse.WritebackCache())
	}
	if o.ReadOnly {
		opts = append(opts, fuse.ReadOnly())
	}
	return opts
}
