// Package shadowtest gives a test binary a directory of its own for the RAM
// copies of shadowed arenas (pram/shadow.go) and turns on pram's
// verification mode, in the process and in the daemons it starts.
//
// What it owns: the directory's life (made before the tests, removed after,
// with whatever RAM copies abandoned arenas left in it). What it must never
// do: touch the default shadow directory, which a real mount may be using.
package shadowtest
