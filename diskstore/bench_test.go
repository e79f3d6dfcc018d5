package diskstore

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"conquest/pram"
)

const (
	benchChunk = 128 << 10 // a FUSE write or read
	benchFile  = 64 << 20
)

func benchDevice(b *testing.B, direct DirectMode) Device {
	path := filepath.Join(b.TempDir(), "disk")
	if err := CreateFile(path, 256<<20); err != nil {
		b.Fatal(err)
	}
	dev, err := OpenDevice(path, DeviceOptions{Direct: direct})
	if errors.Is(err, syscall.EINVAL) {
		b.Skip("no O_DIRECT here")
	}
	if err != nil {
		b.Fatal(err)
	}
	return dev
}

func benchWrite(b *testing.B, direct DirectMode, d Durability, chunk int) {
	e := newEnv(b, envOpts{dev: benchDevice(b, direct), o: Options{Durability: d}})
	data := pattern(1, 0, chunk)
	seg := e.newFile(1)
	b.SetBytes(int64(chunk))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := int64(i%(benchFile/chunk)) * int64(chunk)
		if off == 0 && i > 0 {
			e.must(func(tx *pram.Tx) error {
				if err := e.s.Destroy(tx, seg); err != nil {
					return err
				}
				var err error
				seg, err = e.s.NewFile(tx, 1)
				return err
			})
		}
		if err := e.write(seg, off, data); err != nil {
			b.Fatal(err)
		}
	}
	e.must(func(tx *pram.Tx) error { return e.s.Fsync(tx, seg) })
}

func benchRead(b *testing.B, direct DirectMode, readahead bool) {
	e := newEnv(b, envOpts{dev: benchDevice(b, direct)})
	seg := e.newFile(1)
	for off := int64(0); off < benchFile; off += 8 << 20 {
		e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, off, pattern(1, off, 8<<20)) })
	}
	p := make([]byte, benchChunk)
	var ra *Readahead
	b.SetBytes(benchChunk)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		off := int64(i%(benchFile/benchChunk)) * benchChunk
		if off == 0 && readahead {
			if ra != nil {
				ra.Close()
			}
			ra = e.s.NewReadahead()
		}
		if _, err := e.s.ReadAt(seg, p, off, ra); err != nil {
			b.Fatal(err)
		}
	}
	if ra != nil {
		ra.Close()
	}
}

// Sequential 128 KiB writes (a FUSE write), each written to the device at
// once, a sync every Options.SyncBytes (64 MiB) and at the end.
func BenchmarkSeqWrite(b *testing.B) { benchWrite(b, DirectOff, DurableOnProcessCrash, benchChunk) }
func BenchmarkSeqWriteDirect(b *testing.B) {
	benchWrite(b, DirectOn, DurableOnProcessCrash, benchChunk)
}

// The same gathered into 8 MiB disk writes, one sync each (GatherInMemory).
func BenchmarkSeqWriteGather(b *testing.B)       { benchWrite(b, DirectOff, GatherInMemory, benchChunk) }
func BenchmarkSeqWriteGatherDirect(b *testing.B) { benchWrite(b, DirectOn, GatherInMemory, benchChunk) }

// Sequential 4 KiB appends into the default blocks: every write but the
// first of a block is written in place (appendFast).
func BenchmarkSmallAppend(b *testing.B)       { benchWrite(b, DirectOff, DurableOnProcessCrash, 4096) }
func BenchmarkSmallAppendGather(b *testing.B) { benchWrite(b, DirectOff, GatherInMemory, 4096) }

// Sequential 128 KiB reads with and without readahead, checksums verified.
func BenchmarkSeqRead(b *testing.B)            { benchRead(b, DirectOff, true) }
func BenchmarkSeqReadNoReadahead(b *testing.B) { benchRead(b, DirectOff, false) }
func BenchmarkSeqReadDirect(b *testing.B)      { benchRead(b, DirectOn, true) }
func BenchmarkSeqReadDirectNoRA(b *testing.B)  { benchRead(b, DirectOn, false) }
