/* teraio bench-io: bandwidth and CPU cost of the migration engine on real directories. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <time.h>

#include <teraio/alloc_internal.h>
#include <teraio/device.h>
#include <teraio/io.h>
#include <teraio/status.h>
#include <teraio/units.h>

#include "cli.h"

#define MAX_DIRS 64

static void usage(FILE *f) {
    (void)fprintf(
        f,
        "usage: teraio bench-io --dir DIR [--dir DIR...] [options]\n\n"
        "Write (or write, then read back) --size bytes as tensors of --block bytes through the\n"
        "migration engine, keeping --depth requests in flight, and report the bandwidth and the\n"
        "CPU time per GiB of the whole process (user + system, all threads). The swap files are\n"
        "nameless and vanish at exit. Compare with fio on the same directory: "
        "bench/io_vs_fio.sh.\n\n"
        "options:\n"
        "  --dir DIR         SSD directory (repeat to stripe over several)\n"
        "  --size BYTES      bytes moved in the timed phase (default 1GiB)\n"
        "  --block BYTES     tensor (request) size (default 4MiB)\n"
        "  --depth N         requests in flight (default 16)\n"
        "  --rw read|write|mixed  timed phase (read: the data is written first, untimed;\n"
        "                    mixed: half of it is written first, then reads of it alternate\n"
        "                    with writes of new tensors, 50/50: bytes_per_s is reads plus\n"
        "                    writes, the ssd_mixed_Bps of docs/hardware.md for the whole\n"
        "                    directory set; divide by the drives behind it)\n"
        "  --backend NAME    auto (default), uring, posix, cufile, cuda, null\n"
        "  --chunk BYTES     stripe chunk (default: the block size, at most 1GiB)\n"
        "  --verify          CRC32C per chunk (computed on write, checked on read)\n"
        "  --warmup          write every tensor (and the rewrite room) once, untimed, before\n"
        "                    a timed write phase\n"
        "                    (steady state: the swap file's blocks were written before, as\n"
        "                    when fio rewrites a file it laid out)\n"
        "  --small-pages     buffers of 4 KiB pages (MADV_NOHUGEPAGE) instead of memory from\n"
        "                    tio_io_alloc (2 MiB-aligned, transparent huge pages advised): a\n"
        "                    transfer from scattered pages has more segments, and the kernel\n"
        "                    splits a request over the device's segment limit\n"
        "  --device-mem      buffers in CUDA device memory (cudaMalloc; needs the cufile or\n"
        "                    cuda backend and a GPU): the GPU <-> SSD path of training\n"
        "  --json            print one JSON object (bytes_per_s, cpu_s_per_gib, ...)\n\n"
        "examples:\n"
        "  teraio bench-io --dir /mnt/nvme0/tio --size 2GiB --block 16MiB --depth 8\n"
        "  teraio bench-io --dir /mnt/nvme0 --dir /mnt/nvme1 --rw read --json\n"
        "  teraio bench-io --dir /mnt/nvme0/tio --size 8GiB --block 16MiB --rw "
        "mixed\n\n" TIO_CLI_EXIT_HELP);
}

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { PH_READ = 0, PH_WRITE = 1, PH_MIXED = 2 };

/*
 * Move n tensors of `block` bytes with `depth` in flight; 0 or a status. PH_MIXED alternates
 * reads of tensors [0, n_pre) (written before) with writes of new tensors from n_pre on, so
 * reads and writes share the device half and half: the 50/50 point of its mixed curve.
 */
static int run_phase(struct tio_engine *e,
                     int write,
                     uint64_t n,
                     uint64_t n_pre,
                     uint64_t block,
                     uint32_t depth,
                     unsigned char **bufs,
                     enum tio_mem_kind mem) {
    uint64_t next = 0, done = 0;
    uint32_t *free_slots = tio_malloc(depth * sizeof(*free_slots));
    if (!free_slots) {
        return TIO_ENOMEM;
    }
    uint32_t nfree = depth;
    for (uint32_t i = 0; i < depth; i++) {
        free_slots[i] = i;
    }
    int rc = 0;
    while (done < n && rc == 0) {
        while (next < n && nfree) {
            uint32_t slot = free_slots[--nfree];
            /* tag: slot in the low 32 bits, tensor in the high */
            uint64_t tag = (next << 32) | slot;
            int w = write == PH_MIXED ? (int)(next & 1) : write;
            uint64_t id = write != PH_MIXED ? next : w ? n_pre + next / 2 : (next / 2) % n_pre;
            rc = w ? tio_engine_write(e,
                                      &(struct tio_engine_write_request){
                                          .struct_size = sizeof(struct tio_engine_write_request),
                                          .tensor_id = id,
                                          .src = bufs[slot],
                                          .bytes = block,
                                          .mem = mem,
                                          .tier = TIO_TIER_SSD,
                                          .priority = TIO_PRIO_NORMAL,
                                          .tag = tag })
                   : tio_engine_read(e, &(struct tio_engine_read_request){
                                            .struct_size = sizeof(struct tio_engine_read_request),
                                            .tensor_id = id,
                                            .dst = bufs[slot],
                                            .bytes = block,
                                            .mem = mem,
                                            .priority = TIO_PRIO_NORMAL,
                                            .tag = tag });
            if (rc == -EAGAIN) {
                free_slots[nfree++] = slot;
                rc = 0;
                break;
            }
            if (rc < 0) {
                break;
            }
            next++;
        }
        if (rc < 0) {
            break;
        }
        struct tio_completion c[64];
        int k = tio_engine_wait(e, c, 1, 64, -1);
        if (k < 0) {
            rc = k;
            break;
        }
        for (int i = 0; i < k; i++) {
            if (c[i].res < 0) {
                rc = tio_set_error((int)c[i].res, "%s", tio_engine_last_error(e));
                break;
            }
            free_slots[nfree++] = (uint32_t)(c[i].tag & 0xffffffffu);
            done++;
        }
    }
    /* drain what is still in flight after an error */
    while (rc < 0 && next > done) {
        struct tio_completion c;
        if (tio_engine_wait(e, &c, 1, 1, -1) <= 0) {
            break;
        }
        done++;
    }
    tio_free(free_slots);
    return rc;
}

/* The parsed command line. */
struct bench_opts {
    const char *dirs[MAX_DIRS];
    size_t ndirs;
    uint64_t size, block, depth, chunk;
    const char *backend, *rw;
    int json, verify, warmup, small_pages, device_mem;
};

/* --dir, repeated: one directory per SSD. */
static int add_dir(void *ctx, const char *opt, const char *text) {
    struct bench_opts *o = ctx;
    if (o->ndirs == MAX_DIRS) {
        cli_error("bench-io", "%s: at most %d directories", opt, MAX_DIRS);
        return TIO_EXIT_USAGE;
    }
    o->dirs[o->ndirs++] = text;
    return 0;
}

/* Parse argv into *o. Returns -1 to go on, or the exit code to end with (0 after --help). */
static int parse_args(int argc, char **argv, struct bench_opts *o) {
    const struct cli_opt opts[] = {
        { .name = "--json", .kind = CLI_FLAG, .dst = &o->json, .value = 1 },
        { .name = "--verify", .kind = CLI_FLAG, .dst = &o->verify, .value = 1 },
        { .name = "--warmup", .kind = CLI_FLAG, .dst = &o->warmup, .value = 1 },
        { .name = "--small-pages", .kind = CLI_FLAG, .dst = &o->small_pages, .value = 1 },
        { .name = "--device-mem", .kind = CLI_FLAG, .dst = &o->device_mem, .value = 1 },
        { .name = "--dir", .kind = CLI_CALL, .call = add_dir },
        { .name = "--size", .kind = CLI_BYTES, .dst = &o->size, CLI_LIMITS_MEMORY },
        /* a multiple of 4 KiB, checked with the others */
        { .name = "--block",
          .kind = CLI_BYTES,
          .dst = &o->block,
          .min = 4096,
          .max = 4294967296.0 },
        { .name = "--chunk",
          .kind = CLI_BYTES,
          .dst = &o->chunk,
          .min = 4096,
          .max = 1073741824.0 },
        { .name = "--depth", .kind = CLI_COUNT, .dst = &o->depth, CLI_LIMITS_COUNT(1, 4096) },
        { .name = "--rw", .kind = CLI_TEXT, .dst = &o->rw },
        { .name = "--backend", .kind = CLI_TEXT, .dst = &o->backend },
    };
    struct cli_spec spec = { "bench-io",    opts, sizeof opts / sizeof opts[0], usage, NULL, 0, 0,
                             "options only" };
    int rc = cli_parse_args(&spec, argc, argv, 1, o);
    return rc == CLI_HELP_SHOWN ? TIO_EXIT_OK : rc ? rc : -1;
}

/* The options against each other and the machine. Returns 0 or an exit code. */
static int check_args(const struct bench_opts *o) {
    const char *cmd = "bench-io";
    if (!o->ndirs) {
        cli_error(cmd, "--dir is required (the directory to benchmark, e.g. on an NVMe SSD)");
        return TIO_EXIT_USAGE;
    }
    if (strcmp(o->rw, "read") != 0 && strcmp(o->rw, "write") != 0 && strcmp(o->rw, "mixed") != 0) {
        cli_error(cmd, "--rw must be read, write or mixed, not '%s'", o->rw);
        return TIO_EXIT_USAGE;
    }
    if (!o->block || o->block % 4096 || o->block > (UINT64_C(1) << 32)) {
        cli_error(cmd, "--block must be a multiple of 4KiB up to 4GiB");
        return TIO_EXIT_USAGE;
    }
    if (o->size < o->block) {
        cli_error(cmd, "--size must be at least --block");
        return TIO_EXIT_USAGE;
    }
    if (!o->depth || o->depth > 4096) {
        cli_error(cmd, "--depth must be 1..4096");
        return TIO_EXIT_USAGE;
    }
    if (o->device_mem && o->small_pages) {
        cli_error(cmd, "--device-mem and --small-pages exclude each other");
        return TIO_EXIT_USAGE;
    }
    if (o->device_mem) {
        char why[256];
        if (!tio_device_usable(why, sizeof why)) {
            cli_error(cmd, "--device-mem needs a CUDA device: %s", why);
            return TIO_EXIT_RUNTIME;
        }
    }
    return 0;
}

/* `depth` buffers of `block` bytes sliced from one arena (*arena; 1 MiB blocks then share huge
 * pages too), each filled with its own pattern: host memory, or device memory filled from one
 * host block. Returns 0 or a library status; *arena and *bufs are set either way (may be NULL). */
static int
alloc_buffers(const struct bench_opts *o, unsigned char **arena, unsigned char ***bufs_out) {
    uint64_t depth = o->depth, block = o->block;
    int rc = 0;
    unsigned char **bufs = tio_calloc(depth, sizeof(*bufs));
    unsigned char *pattern = NULL; /* device memory: filled from one host block */
    *arena = NULL;
    *bufs_out = bufs;
    if (bufs && o->device_mem) {
        void *d = NULL;
        rc = tio_device_alloc(depth * block, &d);
        if (rc < 0) {
            return rc;
        }
        *arena = d;
        pattern = tio_io_alloc(block);
    } else if (bufs) {
        *arena =
            o->small_pages ? tio_aligned_alloc(4096, depth * block) : tio_io_alloc(depth * block);
#if defined(__linux__) && defined(MADV_NOHUGEPAGE)
        if (*arena && o->small_pages) {
            (void)madvise(*arena, depth * block, MADV_NOHUGEPAGE);
        }
#endif
    }
    if (!bufs || !*arena || (o->device_mem && !pattern)) {
        rc = TIO_ENOMEM;
    }
    for (uint64_t i = 0; rc == 0 && i < depth; i++) {
        bufs[i] = *arena + i * block;
        unsigned char *fill = o->device_mem ? pattern : bufs[i];
        for (uint64_t j = 0; j < block; j += 4096) { /* touch and fill */
            memset(fill + j, (int)((i * 131 + j / 4096) & 0xff), 4096);
        }
        if (o->device_mem) {
            rc = tio_device_copy_from_host(bufs[i], pattern, block);
        }
    }
    tio_free(pattern);
    return rc;
}

/* The result on stdout, as JSON or a line of text. */
static void print_result(const struct bench_opts *o,
                         const struct tio_engine_stats *st,
                         uint64_t n,
                         double wall,
                         double cpu) {
    uint64_t block = o->block;
    int reading = !strcmp(o->rw, "read"), mixed = !strcmp(o->rw, "mixed");
    uint64_t bytes = n * block;
    uint64_t wbytes = mixed ? n / 2 * block : reading ? 0 : bytes;
    double bps = wall > 0 ? (double)bytes / wall : 0.0;
    double gib = (double)bytes / (double)(UINT64_C(1) << 30);
    double cpu_gib = gib > 0 ? cpu / gib : 0.0;
    if (o->json) {
        printf("{\"backend\": ");
        cli_json_string(stdout, st->backend);
        printf(", \"rw\": \"%s\", \"dirs\": [", o->rw);
        for (size_t i = 0; i < o->ndirs; i++) {
            printf("%s", i ? ", " : "");
            cli_json_string(stdout, o->dirs[i]);
        }
        printf(
            "], \"block\": %llu, \"chunk\": %llu, \"depth\": %llu, \"bytes\": %llu, "
            "\"read_bytes\": %llu, \"write_bytes\": %llu, "
            "\"seconds\": %.6f, \"bytes_per_s\": %.1f, \"cpu_s\": %.6f, \"cpu_s_per_gib\": %.6f, "
            "\"ops\": %llu, \"staged_bytes\": %llu, \"short_transfers\": %llu, \"buffers\": "
            "\"%s\"}\n",
            (unsigned long long)block, (unsigned long long)o->chunk, (unsigned long long)o->depth,
            (unsigned long long)bytes, (unsigned long long)(bytes - wbytes),
            (unsigned long long)wbytes, wall, bps, cpu, cpu_gib, (unsigned long long)st->ops_issued,
            (unsigned long long)st->staged_bytes, (unsigned long long)st->short_transfers,
            o->device_mem    ? "device"
            : o->small_pages ? "small-pages"
                             : "io-alloc");
    } else {
        char b1[32], b2[32], b3[32];
        printf("%s %s in %.3f s: %s, CPU %.3f s/GiB (backend %s, %zu dir(s), block %s, depth "
               "%llu)\n",
               o->rw, tio_format_bytes(bytes, b1, sizeof b1), wall,
               tio_format_rate(bps, b2, sizeof b2), cpu_gib, st->backend, o->ndirs,
               tio_format_bytes(block, b3, sizeof b3), (unsigned long long)o->depth);
    }
}

int cli_cmd_bench_io(int argc, char **argv) {
    const char *cmd = "bench-io";
    struct bench_opts o;
    memset(&o, 0, sizeof o);
    o.size = UINT64_C(1) << 30;
    o.block = 4u << 20;
    o.depth = 16;
    o.backend = "auto";
    o.rw = "write";
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0) {
        return rc;
    }
    if ((rc = check_args(&o)) != 0) {
        return rc;
    }
    uint64_t block = o.block, depth = o.depth;
    enum tio_mem_kind mem = o.device_mem ? TIO_MEM_DEVICE : TIO_MEM_HOST;
    if (!o.chunk) {
        o.chunk = block < (UINT64_C(1) << 30) ? block : (UINT64_C(1) << 30);
    }
    uint64_t n = o.size / block;
    if (depth * block > (UINT64_C(16) << 30)) {
        cli_error(cmd, "--depth x --block needs more than 16GiB of buffers");
        return TIO_EXIT_USAGE;
    }

    struct tio_engine_params p = tio_engine_params_default();
    p.dirs = o.dirs;
    p.ndirs = o.ndirs;
    p.backend = o.backend;
    p.chunk_bytes = o.chunk;
    uint64_t qd = depth * ((block + o.chunk - 1) / o.chunk);
    p.queue_depth = (uint32_t)(qd > 4096 ? 4096 : qd);
    p.verify = o.verify;
    p.max_requests = (uint32_t)depth;
    /* every tensor once, plus room for rewrites in flight */
    p.ssd_reserve_bytes = n * block + depth * block;
    struct tio_engine *e = NULL;
    rc = tio_engine_new(&p, &e);
    if (rc < 0) {
        return cli_fail(cmd, "creating the engine", rc);
    }
    unsigned char *arena = NULL, **bufs = NULL;
    rc = alloc_buffers(&o, &arena, &bufs);
    if (rc < 0 && o.device_mem && !arena && bufs) {
        cli_error(cmd, "%s", tio_last_error());
        tio_free(bufs);
        tio_engine_free(e);
        return TIO_EXIT_RUNTIME;
    }
    int reading = !strcmp(o.rw, "read"), mixed = !strcmp(o.rw, "mixed");
    uint64_t n_pre = mixed ? (n + 1) / 2 : n; /* tensors the timed reads read */
    if (rc == 0 && (reading || mixed)) {      /* prefill, untimed */
        rc = run_phase(e, PH_WRITE, n_pre, 0, block, (uint32_t)depth, bufs, mem);
    }
    if (rc == 0 && o.warmup && !reading) {
        /* Write the whole swap file once, untimed: the n tensors plus `depth` more that fill
         * the room rewrites in flight use, then drop those. A timed rewrite's new copy then
         * lands on blocks written before (as fio rewrites its laid-out file), not on
         * unwritten extents the file system must convert, which costs large writes at high
         * depth (depth x block of never-written space) a tenth or more of their bandwidth. */
        rc = run_phase(e, PH_WRITE, n + depth, 0, block, (uint32_t)depth, bufs, mem);
        for (uint64_t i = n; rc == 0 && i < n + depth; i++) {
            rc = tio_engine_drop(e, i);
        }
    }
    double w0 = wall_now(), c0 = cpu_now();
    if (rc == 0) {
        rc = run_phase(e,
                       mixed     ? PH_MIXED
                       : reading ? PH_READ
                                 : PH_WRITE,
                       n, n_pre, block, (uint32_t)depth, bufs, mem);
    }
    double wall = wall_now() - w0, cpu = cpu_now() - c0;
    struct tio_engine_stats st;
    (void)tio_engine_stats(e, &st);
    if (o.device_mem) {
        tio_device_free(arena);
    } else {
        tio_free(arena);
    }
    tio_free(bufs);
    if (rc < 0) {
        int code = cli_fail(cmd,
                            mixed     ? "reading and writing"
                            : reading ? "reading"
                                      : "writing",
                            rc);
        tio_engine_free(e);
        return code;
    }
    tio_engine_free(e);
    print_result(&o, &st, n, wall, cpu);
    return TIO_EXIT_OK;
}
