/*
 * teraio/alloc.h - memory the library hands out, and memory for the engine's I/O buffers.
 *
 * Every buffer or string a teraio function returns to its caller (tio_hw_to_json,
 * tio_trace_save_mem, ...) is released with tio_free. tio_io_alloc gives buffers aligned for
 * direct I/O, which the migration engine (teraio/io.h) reads from and writes into.
 *
 *     void *buf = tio_io_alloc(1 << 20);
 *     ...
 *     tio_free(buf);
 *
 * Thread-safe.
 */
#ifndef TERAIO_ALLOC_H
#define TERAIO_ALLOC_H

#include <stddef.h>

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* tio_io_alloc: memory for I/O buffers, free with tio_free. 4 KiB-aligned (O_DIRECT); from
 * 2 MiB up, 2 MiB-aligned and advised for transparent huge pages (Linux MADV_HUGEPAGE, where
 * the system allows it), so that a transfer spans few physically contiguous segments: a 1 MiB
 * transfer from scattered 4 KiB pages is 256 segments, more than many block devices take in
 * one request (virtio-blk: 254), and the kernel then splits it in two. */
TIO_API void *tio_io_alloc(size_t bytes);
/* tio_free: accepts NULL. */
TIO_API void tio_free(void *p);
#ifdef __cplusplus
}
#endif
#endif
