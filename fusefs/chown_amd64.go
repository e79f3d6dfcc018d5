package fusefs

import "golang.org/x/sys/unix"

// chownCallsArch are the owner-changing system calls of amd64 besides
// fchown and fchownat (killpriv.go).
var chownCallsArch = []int{unix.SYS_CHOWN, unix.SYS_LCHOWN}
