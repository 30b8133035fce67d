/*
 * src/io/engine_ordered.h - the engine's stream-ordered write, for the executor (private; never
 * installed).
 *
 * tio_eng_write_ordered: tio_engine_write of `req` (device memory, req->mem TIO_MEM_DEVICE, to
 * the host tier) with a `done` event (a cudaEvent_t of the caller's, on the engine's device) that
 * the engine records on its device-to-host stream after the write's last copy into the pinned
 * pool. The write completes as soon as its copies are queued, without waiting for them: the
 * device memory may be reused only by work ordered after `done` (the caller makes its stream wait
 * on it, cudaStreamWaitEvent), and the stored copy is valid once `done` has completed (the engine
 * orders its own reads of the copy after it: engine_internal.h, H8). A write that fails or is
 * canceled completes only once its copies ran. With `done` NULL it is tio_engine_write. Errors as
 * tio_engine_write; TIO_EINVAL when the write is not device memory to the host tier of an engine
 * with a usable CUDA device.
 */
#ifndef TIO_IO_ENGINE_ORDERED_H
#define TIO_IO_ENGINE_ORDERED_H

#include <teraio/io.h>

TIO_MUST_CHECK int
tio_eng_write_ordered(struct tio_engine *e, const struct tio_engine_write_request *req, void *done);

#endif
