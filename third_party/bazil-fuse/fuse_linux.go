package fuse

// Maximum file write size we are prepared to receive from the kernel.
//
// Linux 4.2.0 has been observed to cap this value at 128kB
// (FUSE_MAX_PAGES_PER_REQ=32, 4kB pages).
//
// Conquest's patch: 1 MiB, with max_pages negotiated at INIT (InitMaxPages,
// Linux 4.20+), so that a write(2) or a readahead of 1 MiB is one request
// instead of eight (see PATCHES.md). Without InitMaxPages the kernel still
// caps requests at 128 KiB.
const maxWrite = 1024 * 1024
