module bazil.org/fuse

go 1.19

require (
	github.com/dvyukov/go-fuzz v0.0.0-20220726122315-1d375ef9f9f6
	github.com/tv42/httpunix v0.0.0-20191220191345-2ba4b9c3382c
	golang.org/x/sys v0.4.0
)

require (
	github.com/elazarl/go-bindata-assetfs v1.0.0 // indirect
	github.com/stephens2424/writerset v1.0.2 // indirect
	golang.org/x/tools v0.0.0-20200423201157-2723c5de0d66 // indirect
	golang.org/x/xerrors v0.0.0-20191204190536-9bdfabe68543 // indirect
)
