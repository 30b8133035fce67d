/* teraio hw: list presets, show one description, check a JSON file. */
#include <stdio.h>
#include <string.h>

#include <teraio/alloc.h>
#include <teraio/hw.h>
#include <teraio/plan.h>
#include <teraio/units.h>

#include "cli.h"

static const char *const CMD = "hw";

static void hw_usage(FILE *f) {
    (void)fprintf(f,
                  "usage: teraio hw list [--json]\n"
                  "       teraio hw show NAME|FILE [--json]\n"
                  "       teraio hw check FILE\n\n"
                  "Hardware descriptions the planner and the simulator work against: GPU memory,\n"
                  "PCIe, SSDs per GPU, host memory and its offload cap (docs/hardware.md). A JSON\n"
                  "file may start from a preset with \"base\" and override fields, in bytes or\n"
                  "with units (\"80GiB\", \"6.5GB/s\", \"20us\").\n\n"
                  "examples:\n"
                  "  teraio hw list\n"
                  "  teraio hw show paper-2xh100nvl --json > mine.json   # then edit and:\n"
                  "  teraio hw check mine.json\n\n" TIO_CLI_EXIT_HELP);
}

/* The drives' behaviour beyond their rates (docs/hardware.md, "SSD model"): how reads and
 * writes share them, and the write cache with the rate once it is full. */
static void show_ssd_behaviour(const struct tio_hw *hw) {
    char a[32], b[32];
    if (hw->ssd_mixed_Bps > 0) {
        printf("  SSD mix         %s per SSD under a 50/50 read/write mix\n",
               tio_format_rate(hw->ssd_mixed_Bps, a, sizeof a));
    } else {
        printf("  SSD mix         reads and writes share each drive's time\n");
    }
    if (hw->ssd_write_cache_bytes > 0 && hw->ssd_sustained_write_Bps > 0) {
        printf("  SSD write cache %s per SSD, then the array writes at %s\n",
               tio_format_bytes(hw->ssd_write_cache_bytes, a, sizeof a),
               tio_format_rate(tio_hw_ssd_sustained_write_Bps(hw), b, sizeof b));
    } else {
        printf("  SSD write cache not modelled (writes at the array's rate throughout)\n");
    }
}

static void show_human(const struct tio_hw *hw) {
    char a[32], b[32], c[32];
    printf("%s: %u x %s\n", hw->name, hw->gpus, hw->gpu);
    printf("  GPU memory      %s (reserve %s, planning capacity %s)\n",
           tio_format_bytes(hw->gpu_memory_bytes, a, sizeof a),
           tio_format_bytes(hw->gpu_reserve_bytes, b, sizeof b),
           tio_format_bytes(tio_hw_plan_capacity(hw), c, sizeof c));
    printf("  PCIe            %s host->GPU, %s GPU->host\n",
           tio_format_rate(hw->pcie_h2d_Bps, a, sizeof a),
           tio_format_rate(hw->pcie_d2h_Bps, b, sizeof b));
    printf("  SSDs per GPU    %u x %s read / %s write, efficiency %.3f, latency %s, %s\n",
           hw->ssd_count, tio_format_rate(hw->ssd_read_Bps, a, sizeof a),
           tio_format_rate(hw->ssd_write_Bps, b, sizeof b), hw->ssd_efficiency,
           tio_format_duration(hw->ssd_latency_s, c, sizeof c),
           hw->gds ? "GPUDirect Storage" : "bounce via host");
    printf("  SSD array       %s read, %s write (each direction alone)\n",
           tio_format_rate(tio_hw_ssd_read_Bps(hw), a, sizeof a),
           tio_format_rate(tio_hw_ssd_write_Bps(hw), b, sizeof b));
    if (hw->ssd_count > 0) {
        show_ssd_behaviour(hw);
    }
    printf("  host memory     %s (%s), offload cap %s per GPU, %u cores\n",
           tio_format_bytes(hw->host_memory_bytes, a, sizeof a),
           tio_format_rate(hw->host_memory_Bps, b, sizeof b),
           tio_format_bytes(hw->host_offload_cap_bytes, c, sizeof c), hw->cpu_cores);
    if (hw->server_price_usd > 0 || hw->ssd_price_usd > 0) {
        printf("  prices          server $%.1f, SSDs $%.1f\n", hw->server_price_usd,
               hw->ssd_price_usd);
    }
    printf("  software costs  launch %s, executor %s per kernel, %s per move, kernel slowdown "
           "%.2f x link use\n",
           tio_format_duration(hw->kernel_launch_s, a, sizeof a),
           tio_format_duration(hw->kernel_executor_s, b, sizeof b),
           tio_format_duration(hw->move_issue_s, c, sizeof c), hw->kernel_io_slowdown);
}

static int load(const char *what, struct tio_hw *hw) {
    int rc = tio_hw_load(what, hw);
    return rc < 0 ? cli_fail(CMD, what, rc) : 0;
}

int cli_cmd_hw(int argc, char **argv) {
    int json = 0;
    const char *pos[2] = { NULL, NULL };
    const struct cli_opt opts[] = {
        { .name = "--json", .kind = CLI_FLAG, .dst = &json, .value = 1 }
    };
    struct cli_spec spec = { CMD, opts, 1, hw_usage, pos, 2, 0, "a subcommand and one NAME" };
    int prc = cli_parse_args(&spec, argc, argv, 1, NULL);
    if (prc) {
        return prc == CLI_HELP_SHOWN ? TIO_EXIT_OK : prc;
    }
    const char *sub = pos[0], *arg = pos[1];
    if (!sub) {
        hw_usage(stderr);
        return TIO_EXIT_USAGE;
    }
    struct tio_hw hw;
    int rc;
    if (strcmp(sub, "list") == 0) {
        if (json) {
            printf("[");
        }
        for (size_t i = 0; i < tio_hw_preset_count(); i++) {
            if (tio_hw_preset(tio_hw_preset_name(i), &hw) < 0) {
                continue;
            }
            char a[32], b[32], c[32];
            if (json) {
                printf("%s\n  {\"name\": ", i ? "," : "");
                cli_json_string(stdout, hw.name);
                printf(", \"gpu\": ");
                cli_json_string(stdout, hw.gpu);
                printf(", \"gpu_memory_bytes\": %llu, \"ssd_count\": %u, "
                       "\"host_offload_cap_bytes\": %llu}",
                       (unsigned long long)hw.gpu_memory_bytes, hw.ssd_count,
                       (unsigned long long)hw.host_offload_cap_bytes);
            } else {
                printf("%-22s %u x %-9s %9s, %u SSD%s/GPU (%s), host cap %s\n", hw.name, hw.gpus,
                       hw.gpu, tio_format_bytes(hw.gpu_memory_bytes, a, sizeof a), hw.ssd_count,
                       hw.ssd_count == 1 ? "" : "s",
                       tio_format_rate(tio_hw_ssd_write_Bps(&hw), b, sizeof b),
                       tio_format_bytes(hw.host_offload_cap_bytes, c, sizeof c));
            }
        }
        if (json) {
            printf("\n]\n");
        }
        return TIO_EXIT_OK;
    }
    if (strcmp(sub, "show") == 0 || strcmp(sub, "check") == 0) {
        if (!arg) {
            cli_error(CMD, "%s needs a preset name or a JSON file", sub);
            return TIO_EXIT_USAGE;
        }
        if ((rc = load(arg, &hw)) != 0) {
            return rc;
        }
        if (strcmp(sub, "check") == 0) {
            if (json) {
                printf("{\"ok\": true, \"name\": ");
                cli_json_string(stdout, hw.name);
                printf("}\n");
            } else {
                printf("%s: ok (%s)\n", arg, hw.name);
            }
            return TIO_EXIT_OK;
        }
        if (json) {
            char *text = NULL;
            if ((rc = tio_hw_to_json(&hw, &text)) < 0) {
                return cli_fail(CMD, "json", rc);
            }
            printf("%s\n", text);
            tio_free(text);
        } else {
            show_human(&hw);
        }
        return TIO_EXIT_OK;
    }
    cli_error(CMD, "unknown subcommand '%s' (list, show, check)", sub);
    return TIO_EXIT_USAGE;
}
