/*
 * teraio/teraio.h - umbrella header of libteraio.
 *
 * libteraio expands GPU memory for LLM training by moving inactive tensors to host memory and
 * NVMe SSDs and back just in time (TeraIO, NeurIPS 2025). The pipeline, each stage usable alone:
 *
 *   trace.h     one training iteration: kernels, tensors, uses (profiled or modelled)
 *   analysis.h  liveness, inactive periods, memory curves
 *   model.h     transformer training workload generator (what-if traces)
 *   hw.h        the hardware description
 *   io.h        the migration engine: async tensor I/O to SSDs and host memory
 *   plan.h      migration plans: teraio's lifetime-aware planner and the baselines
 *   sim.h       the simulator: replay a trace and a plan or baseline on a hardware model
 *   runtime.h   the plan executor: runs a plan's moves on the engine around each kernel
 *   tier.h      the memory tiers plans and the engine share (GPU, host, SSD)
 *   units.h     "94GiB", "6.5GB/s"
 *   status.h, log.h, alloc.h, version.h: common infrastructure
 *
 * Link with -lteraio (pkg-config --cflags --libs teraio) or find_package(teraio) in CMake.
 */
#ifndef TERAIO_TERAIO_H
#define TERAIO_TERAIO_H

#include <teraio/alloc.h>
#include <teraio/analysis.h>
#include <teraio/hw.h>
#include <teraio/io.h>
#include <teraio/log.h>
#include <teraio/model.h>
#include <teraio/plan.h>
#include <teraio/runtime.h>
#include <teraio/sim.h>
#include <teraio/status.h>
#include <teraio/tier.h>
#include <teraio/trace.h>
#include <teraio/units.h>
#include <teraio/version.h>

#endif
