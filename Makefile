# Conquest: build, test, demo and benchmark.
#
#   make test    the test suite (CI runs `bash .ci/deps.sh && make test`, as the README says: a
#                fresh Debian may have no make): installs what is missing (make deps), then
#                go vet ./... && go test -race ./... (mounts for real; run as root),
#                the three longest packages named first so that they start first, then
#                the heavy tests of HEAVYPKGS again in full without -race
#   make demo    installs what is missing, builds, mounts the embedded default on a temporary
#                directory, writes and reads files, shows df, unmounts
#   make bench   PostMark and Sprite LFS against tmpfs and ext4 (bench/scripts/make-bench.sh)

GO ?= go
export PATH := /usr/local/go/bin:$(PATH)

.PHONY: all build test vet fmt deps demo bench install clean

all: build

build:
	$(GO) build -o bin/conquest ./cmd/conquest

# go test runs packages in the order named, -p (the CPUs) at a time: the
# longest ones start first, or the end of the run waits on one of them
# alone with the other CPUs idle (a run on two CPUs: 13.6 min with ./...
# alone, internal/e2e the last 4 min by itself).
TESTPKGS := ./internal/e2e ./conquest ./diskstore ./...

# The packages whose heavy tests (crash-point enumerations, simulations,
# full-arena loops; named in each one's TestMain) run only a sample under
# -race, and in full in a second step without it (internal/racetest).
# -count=1: the step's selection is made in TestMain, which go test's
# cache does not see, so a cached result would pass for the whole package.
HEAVYPKGS := ./internal/e2e ./conquest ./diskstore ./dirhash ./alloc ./pram

test: deps
	$(GO) vet ./... && $(GO) test -race -timeout 30m $(TESTPKGS) && \
	CONQUEST_HEAVY_ONLY=1 $(GO) test -count=1 -timeout 30m $(HEAVYPKGS)

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w .

deps:
	bash .ci/deps.sh

install: build
	install -m 0755 bin/conquest /usr/local/bin/conquest

# The demo mounts the embedded default ($$CONQUEST_HOME, else
# ~/.local/share/conquest; formatted on first use) on a temporary directory.
demo: deps build
	@set -e; \
	mnt=$$(mktemp -d /tmp/conquest-demo.XXXXXX); \
	trap 'bin/conquest umount "$$mnt" 2>/dev/null || true; rmdir "$$mnt" 2>/dev/null || true' EXIT; \
	echo "+ conquest mount $$mnt"; bin/conquest mount "$$mnt"; \
	echo "+ write and read files in $$mnt/demo"; \
	d="$$mnt/demo"; rm -rf "$$d"; mkdir "$$d"; \
	echo "hello from Conquest" > "$$d/hello.txt"; cat "$$d/hello.txt"; \
	mkdir "$$d/small"; for i in $$(seq 1 1000); do echo "file $$i" > "$$d/small/f$$i"; done; \
	echo "1000 small files: $$(ls "$$d/small" | wc -l) listed, f500 says: $$(cat "$$d/small/f500")"; \
	src=$$(mktemp); head -c 3M /dev/urandom > "$$src"; cp "$$src" "$$d/large"; \
	cmp "$$src" "$$d/large"; rm -f "$$src"; echo "a 3 MiB file (its data on the disk) reads back the same"; \
	ln -s hello.txt "$$d/link"; ln "$$d/hello.txt" "$$d/hard"; rm -r "$$d/small"; ls -li "$$d"; \
	echo "+ conquest df $$mnt (with the demo files)"; bin/conquest df "$$mnt"; \
	rm -r "$$d"; \
	echo "+ conquest df $$mnt"; bin/conquest df "$$mnt"; \
	echo "+ conquest umount $$mnt"; bin/conquest umount "$$mnt"; \
	echo "+ conquest fsck"; bin/conquest fsck; \
	echo "+ conquest df"; bin/conquest df

bench:
	bash bench/scripts/make-bench.sh

clean:
	rm -rf bin
