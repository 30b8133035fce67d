/*
 * src/io/throttle.h - an emulated drive in front of a thread-pool backend (private).
 *
 * The backend options throttle_read=B, throttle_write=B (bytes per second) and
 * throttle_latency_ns=N make every transfer of a thread-pool backend (posix, cuda, cufile,
 * fault) take the time a drive of those rates would give it: the drive is one server whose
 * time reads and writes share (a read of n bytes occupies it n / read_rate, a write
 * n / write_rate; a rate of 0 is unlimited), serving transfers in the order the workers take
 * them from the pool's queue, and a transfer completes `latency` after its last byte (the
 * latency does not occupy the server: deep queues overlap it). This is the simulator's model
 * of an SSD array with no mixing penalty and no write cache (docs/simulator.md).
 *
 * The bytes really move: the worker runs the transfer when it takes it, then sleeps until the
 * modelled completion. Where the real transfer ends after that time (the machine's disk or
 * page cache is slower than the model), the completion is as late as the transfer: that time
 * is counted (tio_io_throttle_counts), so a benchmark can tell that the model was the limit.
 */
#ifndef TIO_IO_THROTTLE_H
#define TIO_IO_THROTTLE_H

#include <stdint.h>

struct tio_throttle {
    double read_Bps, write_Bps; /* 0: unlimited */
    uint64_t latency_ns;
    uint64_t free_ns; /* CLOCK_MONOTONIC time the server is free from */
};

/* The throttle options in a backend options string: 1 (some set: *out filled), 0 (none) or
 * TIO_EINVAL (a value is not a number). */
int tio_throttle_parse(const char *options, struct tio_throttle *out);
/* A transfer of len bytes (op: enum tio_io_op) taken now: advances the server and returns
 * the CLOCK_MONOTONIC time (ns) it completes at. Not thread-safe (the pool's lock). */
uint64_t tio_throttle_admit(struct tio_throttle *t, int32_t op, uint64_t len);
/* After the real transfer: sleep until due_ns; count how far past it the transfer already
 * was. Thread-safe. */
void tio_throttle_wait(uint64_t due_ns);

/* Process-wide counts of every throttled backend since the process started. */
struct tio_throttle_counts {
    uint64_t transfers;
    uint64_t read_bytes, write_bytes; /* as admitted (requested lengths) */
    uint64_t busy_ns;                 /* the drives' modelled time with a transfer in them */
    uint64_t behind_ns;     /* sum of the times real transfers ended past their completion */
    uint64_t max_behind_ns; /* the largest of those */
};
void tio_io_throttle_counts(struct tio_throttle_counts *out);

#endif
