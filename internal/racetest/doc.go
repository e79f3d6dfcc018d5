// Package racetest lets a test scale down under the race detector without
// losing its full run.
//
// `make test` runs the suite twice over: every package with -race, then the
// packages named in the Makefile's HEAVYPKGS again without it, with
// $CONQUEST_HEAVY_ONLY set, and only their heavy tests. A heavy test is one
// that, instrumented, takes most of the suite's time for nothing the
// detector could find: crash-point enumerations, model simulations and
// full-arena loops that run on one goroutine, or whose other goroutines
// (background syncs, readahead) the lighter tests also drive under -race.
// Under -race it runs a sample (Reduced reports true), in the second step
// all of it.
//
// What it owns: the list of a package's heavy tests (Select, from the
// package's TestMain) and the choice of which run is full. What it must
// never do: let a test scale down that the second step does not run (a
// Reduced from a test not named to Select fails that test), or run the
// second step instrumented.
package racetest
