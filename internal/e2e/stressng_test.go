package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"conquest/fusefs"
	"conquest/internal/mounttest"
)

// stressGroups are stress-ng runs against one mount: each line's stressors
// run at once, with --verify (each checks what it reads back, its
// metadata results and its locks). The data group crosses the 1 MB
// threshold (hdd's 3 MB files, iomix, mmap, fallocate and punch holes), so
// both data paths and the moves between them run concurrently.
var stressGroups = map[string][]string{
	"data": {"--hdd", "2", "--hdd-bytes", "3M", "--fallocate", "1", "--fallocate-bytes", "4M",
		"--fpunch", "1", "--iomix", "1", "--iomix-bytes", "8M", "--seek", "1", "--seek-size", "4M",
		"--mmap", "1", "--mmap-file", "--mmap-bytes", "4M", "--sync-file", "1", "--sync-file-bytes", "4M",
		"--readahead", "1", "--readahead-bytes", "4M", "--msync", "1", "--msync-bytes", "4M",
		"--sendfile", "1"},
	"metadata": {"--rename", "1", "--dentry", "1", "--dir", "1", "--link", "1", "--symlink", "1",
		"--xattr", "1", "--getdent", "1", "--filename", "1", "--open", "1", "--utime", "1",
		"--chmod", "1", "--chown", "1", "--mknod", "1"},
	"locks": {"--lockf", "2", "--fcntl", "2", "--flock", "2"},
}

// stressMetricsUntrustworthy is stress-ng's exit code 7,
// EXIT_METRICS_UNTRUSTWORTHY: every stressor passed, but a bogo-ops counter
// was not in its ready state when counted.
const stressMetricsUntrustworthy = 7

// TestStressNG runs stress-ng's file-system stressors through a mount (with
// the kernel's writeback cache off, the default, and on), as an
// independent exerciser: it must report no failure, leave nothing behind,
// and the file system must check clean after each group. (It found STATFS
// waiting up to 50 ms a call while other processes deleted files.)
func TestStressNG(t *testing.T) {
	t.Parallel() // see doc.go, "Time"
	if testing.Short() {
		t.Skip("-short")
	}
	bin, err := exec.LookPath("stress-ng")
	if err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("stress-ng is not installed (.ci/deps.sh installs it)")
		}
		t.Skip("no stress-ng")
	}
	t.Run("writethrough", func(t *testing.T) { stressNG(t, bin, mount(t)) })
	t.Run("writeback", func(t *testing.T) {
		stressNG(t, bin, mount(t, mounttest.WithFuseOptions(fusefs.Options{AllowOther: true, WritebackCache: true})))
	})
}

func stressNG(t *testing.T, bin string, m *mounttest.Mounted) {
	for _, name := range []string{"data", "metadata", "locks"} {
		t.Run(name, func(t *testing.T) {
			dir := m.Path("stress-" + name)
			if err := os.Mkdir(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			args := append([]string{"--temp-path", dir, "--verify", "--timeout", "3", "--metrics-brief"}, stressGroups[name]...)
			out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, " fail: ") || strings.Contains(line, "unsuccessful") {
					t.Errorf("stress-ng: %s", line)
				}
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ExitCode() == stressMetricsUntrustworthy {
				// Only stress-ng's own bookkeeping: a stressor was stopped
				// before it marked its counter ready (seen on flock under a
				// loaded CI run). Its checks still ran; failures show as
				// "fail:" lines above and as other exit codes.
				t.Logf("stress-ng: exit %d (its metrics are untrustworthy), not a failure", ee.ExitCode())
				err = nil
			}
			if err != nil {
				t.Fatalf("stress-ng %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			if !strings.Contains(string(out), "successful run completed") {
				t.Fatalf("stress-ng did not report success:\n%s", out)
			}
			left, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) != 0 {
				t.Errorf("stress-ng left %d entries behind, first %s", len(left), left[0].Name())
			}
			check(t, m, "after stress-ng "+name)
		})
	}
}
