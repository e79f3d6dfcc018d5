package mounttest_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"conquest/fusefs"
	"conquest/internal/mounttest"
)

func TestMain(m *testing.M) { mounttest.Main(m) }

func TestMountRemountUnmount(t *testing.T) {
	m := mounttest.Mount(t)
	if err := os.WriteFile(m.Path("a"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if mi, ok := fusefs.Mounted(m.Dir); !ok || mi.FSType != "fuse.conquest" {
		t.Fatalf("not mounted: %+v", mi)
	}
	m.Remount()
	if b, err := os.ReadFile(m.Path("a")); err != nil || string(b) != "one" {
		t.Fatalf("after remount: %q %v", b, err)
	}
	m.Unmount()
	if _, ok := fusefs.Mounted(m.Dir); ok {
		t.Fatal("still mounted after Unmount")
	}
	if m.Mounted() {
		t.Fatal("Mounted() after Unmount")
	}
}

// The cleanup unmounts even when a file is left open (lazily), and the
// serve loop ends once the file is closed.
func TestCleanupWithOpenFile(t *testing.T) {
	var dir string
	var f *os.File
	t.Run("inner", func(t *testing.T) {
		m := mounttest.Mount(t)
		dir = m.Dir
		var err error
		f, err = os.Create(m.Path("open"))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			// Close after the cleanup has started waiting.
			for {
				if _, ok := fusefs.Mounted(dir); !ok {
					f.Close()
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	})
	if _, ok := fusefs.Mounted(dir); ok {
		t.Error("mount left behind by the cleanup")
	}
}

func TestProcessKillRemount(t *testing.T) {
	m := mounttest.MountProcess(t)
	if m.Pid() == 0 {
		t.Fatal("no daemon pid")
	}
	if err := os.WriteFile(m.Path("a"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	if _, ok := fusefs.Mounted(m.Dir); ok {
		t.Fatal("dead mount left after Kill")
	}
	m.Remount()
	if b, err := os.ReadFile(m.Path("a")); err != nil || string(b) != "kept" {
		t.Fatalf("after kill and remount: %q %v", b, err)
	}
	if !strings.Contains(m.Output(), "not unmounted cleanly") {
		t.Errorf("daemon did not report recovery:\n%s", m.Output())
	}
}

func TestCheckImagesDetectsDamage(t *testing.T) {
	m := mounttest.Mount(t)
	m.Unmount()
	if err := mounttest.CheckImages(m.Pram, m.Disk); err != nil {
		t.Fatalf("fresh images: %v", err)
	}
	f, err := os.OpenFile(m.Pram, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("garbage!"), 48)
	f.Close()
	if err := mounttest.CheckImages(m.Pram, m.Disk); err == nil {
		t.Fatal("CheckImages passed a damaged superblock")
	}
	m.NoCheck()
}
