/* teraio model: generate a training trace from a model preset and a GPU (teraio/model.h). */
#include <stdio.h>
#include <string.h>

#include <teraio/model.h>
#include <teraio/trace.h>
#include <teraio/units.h>

#include "cli.h"

#define CMD "model"

static void help(FILE *f) {
    (void)fprintf(
        f, "usage: teraio model [--preset NAME] [options] [-o FILE.tio] [--json]\n\n"
           "Generate one training iteration of one GPU as a trace: every operator of the forward\n"
           "and backward pass, gradient accumulation, communication and an AdamW step per\n"
           "parameter, timed by a roofline model of the GPU (docs/model.md).\n\n"
           "model:\n"
           "  --preset NAME        llama3-8b (default), llama3-70b, granite-code-8b, tiny, small,\n"
           "                       or custom (start from llama3-8b and override the dimensions)\n"
           "  --layers N --hidden N --heads N --kv-heads N --head-dim N --ffn-hidden N --vocab N\n"
           "  --tied | --untied    share the embedding with the LM head or not\n"
           "training (defaults: the paper's setting for the preset):\n"
           "  --batch N            global batch (sequences per iteration)\n"
           "  --micro-batch N      sequences per micro-batch\n"
           "  --seq N              sequence length\n"
           "  --grad-accum N       micro-batches per iteration (checked against the batch)\n"
           "  --precision P        fp32 (the paper) or bf16 (mixed, fp32 master weights)\n"
           "  --tf32               fp32 matmuls on TF32 tensor cores (default: true fp32)\n"
           "  --dp N --tp N --pp N data / tensor / pipeline parallel degrees (pipeline: 1F1B)\n"
           "  --rank R             which GPU's trace, 0..dp*tp*pp-1 (stage = R / (dp*tp))\n"
           "  --checkpointing      activation checkpointing per block (--no-checkpointing: off)\n"
           "  --fused-adamw        one fused AdamW kernel per parameter (default: PyTorch's\n"
           "                       per-parameter loop, 8 kernels each)\n"
           "hardware:\n"
           "  --gpu NAME           h100-nvl (default), h100-sxm, h200, a100-80gb\n"
           "  --gpu-memory SIZE    override the capacity, e.g. 80GiB\n"
           "output:\n"
           "  -o FILE              write the trace (.json: JSON, else binary .tio)\n"
           "  --json               print the summary as JSON on stdout\n"
           "  --list               list the model and GPU presets\n\n"
           "examples:\n"
           "  teraio model --preset llama3-8b -o llama3-8b.tio\n"
           "  teraio model --preset llama3-70b --rank 1 --json\n"
           "  teraio model --preset llama3-8b --precision bf16 --gpu h200 --pp 1 --batch 32\n"
           "  teraio model --preset custom --layers 16 --hidden 2048 --heads 16 --kv-heads 4 \\\n"
           "               --ffn-hidden 8192 --vocab 32000 --batch 16 --micro-batch 2 --seq "
           "1024\n\n" TIO_CLI_EXIT_HELP);
}

static void list_presets(void) {
    printf("models:");
    for (size_t i = 0; i < tio_model_preset_count(); i++) {
        printf(" %s", tio_model_preset_name(i));
    }
    printf("\ngpus:  ");
    for (size_t i = 0; i < tio_gpu_preset_count(); i++) {
        printf(" %s", tio_gpu_preset_name(i));
    }
    printf("\n");
}

static void
print_json(const struct tio_model_params *p, const struct tio_model_info *in, const char *output) {
    printf("{\n  \"model\": ");
    cli_json_string(stdout, p->model);
    printf(",\n  \"gpu\": ");
    cli_json_string(stdout, p->gpu.name);
    printf(",\n  \"precision\": \"%s\",\n", tio_model_precision_name(p->precision));
    printf("  \"rank\": %u,\n  \"stage\": %u,\n  \"dp\": %u,\n  \"tp\": %u,\n  \"pp\": %u,\n",
           p->rank, in->stage, p->dp, p->tp, p->pp);
    printf("  \"global_batch\": %u,\n  \"micro_batch\": %u,\n  \"seq_len\": %u,\n", p->global_batch,
           p->micro_batch, p->seq_len);
    printf("  \"micro_batches\": %u,\n  \"checkpointing\": %s,\n", in->micro_batches,
           p->checkpointing ? "true" : "false");
    printf("  \"params\": %llu,\n  \"params_rank\": %llu,\n", (unsigned long long)in->params_total,
           (unsigned long long)in->params_rank);
    printf("  \"stage_first_layer\": %u,\n  \"stage_layers\": %u,\n", in->stage_first_layer,
           in->stage_layers);
    printf("  \"kernels\": %zu,\n  \"tensors\": %zu,\n  \"uses\": %zu,\n", in->n_kernels,
           in->n_tensors, in->n_uses);
    printf("  \"tokens_per_iteration\": %llu,\n", (unsigned long long)in->tokens_per_iteration);
    printf("  \"flops_per_iteration\": %.6e,\n  \"model_flops_per_iteration\": %.6e,\n",
           in->flops_per_iteration, in->model_flops_per_iteration);
    printf("  \"global_bytes\": %llu,\n  \"peak_bytes\": %llu,\n  \"peak_kernel\": %zu,\n",
           (unsigned long long)in->global_bytes, (unsigned long long)in->peak_bytes,
           in->peak_kernel);
    printf("  \"capacity_bytes\": %llu,\n  \"memory_ratio\": %.6f,\n",
           (unsigned long long)in->capacity_bytes, in->memory_ratio);
    printf("  \"activation_bytes_per_layer\": %llu,\n",
           (unsigned long long)in->activation_bytes_per_layer);
    printf("  \"ideal_iteration_s\": %.6f,\n  \"rank_busy_s\": %.6f,\n", in->ideal_iteration_s,
           in->rank_busy_s);
    printf("  \"ideal_tokens_per_s\": %.3f,\n  \"output\": ", in->ideal_tokens_per_s);
    if (output) {
        cli_json_string(stdout, output);
    } else {
        printf("null");
    }
    printf("\n}\n");
}

static void
print_human(const struct tio_model_params *p, const struct tio_model_info *in, const char *output) {
    char b1[32], b2[32], b3[32], b4[32];
    printf("%s on %s, %s, batch %u (micro %u x %u), seq %u, dp %u tp %u pp %u, rank %u "
           "(stage %u: layers %u-%u)%s\n",
           p->model, p->gpu.name, tio_model_precision_name(p->precision), p->global_batch,
           p->micro_batch, in->micro_batches, p->seq_len, p->dp, p->tp, p->pp, p->rank, in->stage,
           in->stage_first_layer, in->stage_first_layer + in->stage_layers - 1,
           p->checkpointing ? ", checkpointing" : "");
    printf("  parameters     %llu total, %llu on this rank\n", (unsigned long long)in->params_total,
           (unsigned long long)in->params_rank);
    printf("  trace          %zu kernels, %zu tensors, %zu uses\n", in->n_kernels, in->n_tensors,
           in->n_uses);
    printf("  memory         peak %s (%.2f%% of %s), weights+grads+optimizer %s\n",
           tio_format_bytes(in->peak_bytes, b1, sizeof b1), 100.0 * in->memory_ratio,
           tio_format_bytes(in->capacity_bytes, b2, sizeof b2),
           tio_format_bytes(in->global_bytes, b3, sizeof b3));
    printf("  activations    %s saved per layer per micro-batch\n",
           tio_format_bytes(in->activation_bytes_per_layer, b4, sizeof b4));
    printf("  compute        %.3e FLOPs on this rank, %.3e for the model\n",
           in->flops_per_iteration, in->model_flops_per_iteration);
    printf("  ideal time     %s per iteration (%s busy on this rank), %.1f tokens/s\n",
           tio_format_duration(in->ideal_iteration_s, b1, sizeof b1),
           tio_format_duration(in->rank_busy_s, b2, sizeof b2), in->ideal_tokens_per_s);
    if (output) {
        printf("  wrote          %s\n", output);
    }
}

/* --precision: fp32 or bf16. */
static int parse_precision(void *ctx, const char *opt, const char *text) {
    int pr = tio_model_precision_parse(text);
    if (pr < 0) {
        cli_error(CMD, "%s: %s", opt, tio_last_error());
        return TIO_EXIT_USAGE;
    }
    *(int32_t *)ctx = pr;
    return 0;
}

/* The counts of the command line, each overriding the preset's when given. */
// clang-format off
#define MODEL_COUNTS(X) \
    X("--layers", layers) \
    X("--hidden", hidden) \
    X("--heads", heads) \
    X("--kv-heads", kv_heads) \
    X("--head-dim", head_dim) \
    X("--ffn-hidden", ffn_hidden) \
    X("--vocab", vocab) \
    X("--batch", global_batch) \
    X("--micro-batch", micro_batch) \
    X("--seq", seq_len) \
    X("--dp", dp) \
    X("--tp", tp) \
    X("--pp", pp) \
    X("--grad-accum", grad_accum)
// clang-format on

enum {
#define MODEL_COUNT_ENUM(opt, field) COUNT_##field,
    MODEL_COUNTS(MODEL_COUNT_ENUM) N_COUNTS
#undef MODEL_COUNT_ENUM
};

int cli_cmd_model(int argc, char **argv) {
    struct tio_model_params p = tio_model_params_default();
    const char *output = NULL, *preset = "llama3-8b", *gpu = NULL;
    int json = 0, list = 0, tied = -1, ckpt = -1, tf32 = -1, fused = -1, rc;
    int32_t precision = -1;
    uint64_t gpu_mem = 0, rank = UINT64_MAX, counts[N_COUNTS];
    for (size_t i = 0; i < N_COUNTS; i++) {
        counts[i] = UINT64_MAX; /* not given */
    }
    const struct cli_opt opts[] = {
#define MODEL_COUNT_OPT(opt, field)  \
    { .name = (opt),                 \
      .kind = CLI_COUNT,             \
      .dst = &counts[COUNT_##field], \
      .min = 1,                      \
      .max = (double)UINT32_MAX },
        MODEL_COUNTS(MODEL_COUNT_OPT)
#undef MODEL_COUNT_OPT
            { .name = "--rank", .kind = CLI_COUNT, .dst = &rank, .max = (double)UINT32_MAX },
        { .name = "--preset", .kind = CLI_TEXT, .dst = &preset },
        { .name = "--output", .alias = "-o", .kind = CLI_TEXT, .dst = &output },
        { .name = "--precision", .kind = CLI_CALL, .call = parse_precision },
        { .name = "--gpu", .kind = CLI_TEXT, .dst = &gpu },
        { .name = "--gpu-memory", .kind = CLI_BYTES, .dst = &gpu_mem, CLI_LIMITS_MEMORY },
        { .name = "--json", .kind = CLI_FLAG, .dst = &json, .value = 1 },
        { .name = "--list", .kind = CLI_FLAG, .dst = &list, .value = 1 },
        { .name = "--tied", .kind = CLI_FLAG, .dst = &tied, .value = 1 },
        { .name = "--untied", .kind = CLI_FLAG, .dst = &tied, .value = 0 },
        { .name = "--checkpointing", .kind = CLI_FLAG, .dst = &ckpt, .value = 1 },
        { .name = "--no-checkpointing", .kind = CLI_FLAG, .dst = &ckpt, .value = 0 },
        { .name = "--tf32", .kind = CLI_FLAG, .dst = &tf32, .value = 1 },
        { .name = "--fused-adamw", .kind = CLI_FLAG, .dst = &fused, .value = 1 },
    };
    struct cli_spec spec = { CMD, opts,          sizeof opts / sizeof opts[0], help, NULL, 0,
                             0,   "options only" };
    if ((rc = cli_parse_args(&spec, argc, argv, 1, &precision)) != 0) {
        return rc == CLI_HELP_SHOWN ? TIO_EXIT_OK : rc;
    }
    if (list) {
        list_presets();
        return TIO_EXIT_OK;
    }
    /* the preset first, so that the other options override it regardless of order */
    if (strcmp(preset, "custom") == 0) {
        (void)snprintf(p.model, sizeof p.model, "custom");
    } else if (tio_model_preset(preset, &p) < 0) {
        cli_error(CMD, "%s", tio_last_error());
        return TIO_EXIT_INPUT;
    }
#define MODEL_COUNT_SET(opt, field)                \
    if (counts[COUNT_##field] != UINT64_MAX) {     \
        p.field = (uint32_t)counts[COUNT_##field]; \
    }
    MODEL_COUNTS(MODEL_COUNT_SET)
#undef MODEL_COUNT_SET
    if (rank != UINT64_MAX) {
        p.rank = (uint32_t)rank;
    }
    if (precision >= 0) {
        p.precision = precision;
    }
    p.tied_embeddings = tied >= 0 ? tied : p.tied_embeddings;
    p.checkpointing = ckpt >= 0 ? ckpt : p.checkpointing;
    p.allow_tf32 = tf32 >= 0 ? tf32 : p.allow_tf32;
    p.fused_adamw = fused >= 0 ? fused : p.fused_adamw;
    if (gpu && tio_gpu_preset(gpu, &p.gpu) < 0) {
        cli_error(CMD, "%s", tio_last_error());
        return TIO_EXIT_INPUT;
    }
    if (gpu_mem) {
        p.gpu.memory_bytes = gpu_mem;
    }
    struct tio_trace *tr = NULL;
    struct tio_model_info info;
    rc = tio_model_generate(&p, &tr, &info);
    if (rc < 0) {
        cli_error(CMD, "%s", tio_last_error());
        return cli_exit_code(rc);
    }
    if (output) {
        rc = tio_trace_save(tr, output, TIO_TRACE_FORMAT_AUTO);
        if (rc < 0) {
            tio_trace_free(tr);
            return cli_fail(CMD, output, rc);
        }
    }
    tio_trace_free(tr);
    if (json) {
        print_json(&p, &info, output);
    } else {
        print_human(&p, &info, output);
    }
    return TIO_EXIT_OK;
}
