/*
 * Helpers the benchmark programs (bench/bench_*.c) share: CPU clocks, sorting samples for
 * medians, and finishing a synthetic trace. Compiled into every benchmark (CMakeLists.txt).
 */
#ifndef TIO_BENCHUTIL_H
#define TIO_BENCHUTIL_H

#include <stddef.h>
#include <time.h>

#include <teraio/trace.h>

/* CPU seconds of `clock`: CLOCK_PROCESS_CPUTIME_ID (the process) or CLOCK_THREAD_CPUTIME_ID (the
 * calling thread). On a shared machine CPU time measures the code, wall time the neighbours too. */
double bench_cpu_s(clockid_t clock);

/* Sort the n samples of v in ascending order. */
void bench_sort(double *v, size_t n);

/* The median of the n samples of v (sorted in place): the middle one, or the mean of the two
 * middle ones when n is even. */
double bench_median(double *v, int n);

/*
 * Finish the synthetic trace `tr` that a builder filled, `rc` being the builder's status (0 or a
 * negative TIO_E*, tr possibly NULL then), and return it. On any failure print
 * "<what>: <status>: <detail>" to stderr and exit 1: a benchmark has nothing to measure without
 * its trace.
 */
struct tio_trace *bench_trace_finish(struct tio_trace *tr, int rc, const char *what);

/* s as a decimal int, or INT_MIN when it is not one in full (or out of int's range): the
 * caller's range check then refuses it. */
int bench_int(const char *s);

/* s as a number, or NAN when it is not one in full: the caller's range check then refuses it. */
double bench_double(const char *s);

#endif
