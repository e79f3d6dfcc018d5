module conquest

go 1.26

require (
	bazil.org/fuse v0.0.0-20230120002735-62a210ff1fd5
	github.com/dgryski/go-farm v0.0.0-20240924180020-3414d57e47da
	github.com/edsrzf/mmap-go v1.2.0
	github.com/urfave/cli/v2 v2.27.7
	golang.org/x/sys v0.4.0
)

require (
	github.com/cpuguy83/go-md2man/v2 v2.0.7 // indirect
	github.com/russross/blackfriday/v2 v2.1.0 // indirect
	github.com/xrash/smetrics v0.0.0-20240521201337-686a1a2994c1 // indirect
)

replace bazil.org/fuse => ./third_party/bazil-fuse
