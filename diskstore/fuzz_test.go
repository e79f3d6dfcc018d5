package diskstore

import (
	"bytes"
	"encoding/binary"
	"testing"

	"conquest/pram"
)

// FuzzStoreOps decodes operations (write, flush, truncate, punch, trim,
// restart) from the input, applies them to one file and to a model, and
// compares contents and runs the consistency walk at the end.
func FuzzStoreOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	// At the end: a write of the byte 16 from MaxFileSize (61680*17 is
	// 16 below the 1 MiB limit), a flush, a punch, a restart.
	f.Add([]byte{1, 0xf0, 0xf0, 0x00, 0x03, 0, 0, 0, 0x05, 0xff, 0xfe, 0x40, 0x07, 0, 0, 0})
	f.Add(bytes.Repeat([]byte{0x10, 0xff, 0x00, 0x80, 0x22}, 12))
	f.Add([]byte{0x00, 0x00, 0x40, 0xff, 0x03, 0x10, 0x30, 0x02, 0x00, 0x01, 0x20, 0x10, 0x00, 0x00, 0x05, 0x41, 0x00, 0x30})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 400 {
			return
		}
		e := newEnv(t, envOpts{arenaSize: 4 << 20, blockSize: 4096, dev: NewMemDevice(4 << 20),
			o: Options{FileBuffer: 64 << 10, MaxExtent: 256 << 10}})
		seg := e.newFile(1)
		var model []byte
		const limit = 1 << 20
		// An odd first byte puts the whole run in the last MiB below
		// MaxFileSize (the model holds the bytes from base on; all below
		// is a hole).
		base := int64(0)
		if len(in) > 0 && in[0]&1 == 1 {
			base = MaxFileSize - limit
		}
		for i := 0; i+4 <= len(in); i += 4 {
			op := in[i] % 8
			a := int64(binary.LittleEndian.Uint16(in[i+1:])) * 17 % limit
			n := int64(in[i+3])*331 + 1
			var err error
			switch op {
			case 0, 1, 2: // write
				n = min(n, limit-a)
				data := pattern(uint32(i), a, int(n))
				if err = e.write(seg, base+a, data); err == nil {
					if a+n > int64(len(model)) {
						model = append(model, make([]byte, a+n-int64(len(model)))...)
					}
					copy(model[a:], data)
				}
			case 3:
				err = e.flush(seg)
			case 4: // truncate
				size := a % (int64(len(model)) + 4096)
				if err = e.do(func(tx *pram.Tx) error { return e.s.Truncate(tx, seg, base+size) }); err == nil {
					if size < int64(len(model)) {
						model = model[:size]
					} else {
						model = append(model, make([]byte, size-int64(len(model)))...)
					}
				}
			case 5: // punch
				if len(model) == 0 {
					continue
				}
				a %= int64(len(model))
				n = min(n, int64(len(model))-a)
				if err = e.do(func(tx *pram.Tx) error { return e.s.PunchHole(tx, seg, base+a, n) }); err == nil {
					clear(model[a : a+n])
				}
			case 6:
				err = e.do(func(tx *pram.Tx) error { return e.s.Trim(tx, seg, base+int64(len(model))) })
			case 7:
				e.must(func(tx *pram.Tx) error { return e.s.FlushAll(tx) })
				e.restart()
			}
			if err != nil {
				t.Fatalf("op %d at %d: %v", op, i, err)
			}
		}
		got, err := e.read(seg, base, len(model))
		if err != nil || !bytes.Equal(got, model) {
			t.Fatalf("contents: %v", err)
		}
		e.must(func(tx *pram.Tx) error { return e.s.FlushAll(tx) })
		e.check(map[pram.Off]int64{seg: base + int64(len(model))})
	})
}
