package dirhash

import (
	"testing"

	"conquest/internal/shadowtest"
)

// TestMain gives the tests their own directory of RAM copies and turns on
// pram's checkpoint verification (internal/shadowtest).
func TestMain(m *testing.M) { shadowtest.Main(m) }
