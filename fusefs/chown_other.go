//go:build !amd64

package fusefs

// chownCallsArch: architectures other than amd64 have only fchown and
// fchownat (the generic system call table), or are not checked here.
var chownCallsArch []int
