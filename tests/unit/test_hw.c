/* Hardware descriptions: presets, derived rates, JSON load with units and "base", bad values. */
#include <stdio.h>
#include <unistd.h>

#include <teraio/alloc.h>
#include <teraio/hw.h>

#include "tio_test.h"

static char tmpdir[256];

static const char *write_file(const char *name, const char *text) {
    static char path[512];
    (void)snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        (void)fputs(text, f);
        (void)fclose(f);
    }
    return path;
}

TIO_TEST(paper_preset_matches_the_paper) {
    struct tio_hw hw;
    CHECK_OK(tio_hw_preset("paper-2xh100nvl", &hw));
    CHECK_STR(hw.name, "paper-2xh100nvl");
    CHECK_EQ_U(hw.gpus, 2);
    CHECK_EQ_U(hw.gpu_memory_bytes, 94ull << 30); /* Table 2: 94 GB (HBM: binary) */
    CHECK_EQ_U(hw.ssd_count, 4);
    CHECK_NEAR(hw.ssd_read_Bps, 6.7e9, 1);
    CHECK_NEAR(hw.ssd_write_Bps, 6.5e9, 1);
    /* ~16 GB/s per 4-drive array as the paper measured: 4 x 6.5 x 16/26 = 16.0 */
    CHECK_NEAR(tio_hw_ssd_write_Bps(&hw), 16.0e9, 1e3);
    CHECK_NEAR(tio_hw_ssd_read_Bps(&hw), 4 * 6.7e9 * 16.0 / 26.0, 1e3);
    CHECK_NEAR(hw.server_price_usd, 91047.9, 1e-6);
    CHECK_NEAR(hw.ssd_price_usd, 1360.0, 1e-9);
    CHECK_EQ_U(hw.host_memory_bytes, 1000000000000ull);
    CHECK_EQ_U(tio_hw_plan_capacity(&hw), (94ull << 30) - hw.gpu_reserve_bytes);
    CHECK_OK(tio_hw_validate(&hw));
    struct tio_hw d = tio_hw_default();
    CHECK_STR(d.name, "paper-2xh100nvl");
    struct tio_hw s;
    CHECK_OK(tio_hw_preset("paper-2xh100nvl-128g", &s));
    CHECK_EQ_U(s.host_memory_bytes, 128000000000ull);
    CHECK_NEAR(s.server_price_usd, 84139.9, 1e-6);
}

TIO_TEST(every_preset_validates) {
    CHECK(tio_hw_preset_count() >= 4);
    for (size_t i = 0; i < tio_hw_preset_count(); i++) {
        struct tio_hw hw;
        CHECK_OK(tio_hw_preset(tio_hw_preset_name(i), &hw));
        CHECK_OK(tio_hw_validate(&hw));
        CHECK_STR(hw.name, tio_hw_preset_name(i));
    }
    CHECK(tio_hw_preset_name(tio_hw_preset_count()) == NULL);
    struct tio_hw hw;
    CHECK_RC(tio_hw_preset("no-such-box", &hw), TIO_ENOTFOUND);
    CHECK_ERR_HAS("paper-2xh100nvl");
}

TIO_TEST(validate_names_bad_fields) {
    struct tio_hw hw = tio_hw_default();
    hw.pcie_h2d_Bps = 0;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("pcie_h2d_Bps");
    hw = tio_hw_default();
    hw.ssd_write_Bps = -1;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("ssd_write_Bps");
    CHECK_ERR_HAS("-1");
    hw = tio_hw_default();
    hw.gpu_memory_bytes = 0;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("gpu_memory_bytes");
    hw = tio_hw_default();
    hw.gpu_reserve_bytes = hw.gpu_memory_bytes;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("gpu_reserve_bytes");
    hw = tio_hw_default();
    hw.ssd_efficiency = 1.5;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("ssd_efficiency");
    hw = tio_hw_default();
    hw.host_offload_cap_bytes = hw.host_memory_bytes + 1;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("host_offload_cap_bytes");
    hw = tio_hw_default();
    hw.pcie_d2h_Bps = (double)NAN;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("pcie_d2h_Bps");
    hw = tio_hw_default();
    hw.ssd_count = 0; /* no SSDs is allowed (host-only offloading) */
    CHECK_OK(tio_hw_validate(&hw));
}

TIO_TEST(json_units_and_base) {
    const char *p =
        write_file("a.json", "{\"base\": \"paper-2xh100nvl\", \"name\": \"mine\","
                             " \"gpu_memory_bytes\": \"80GiB\", \"ssd_count\": 8,"
                             " \"pcie_h2d_Bps\": \"25GB/s\", \"ssd_latency_s\": \"50us\","
                             " \"host_offload_cap_bytes\": 1000000000}");
    struct tio_hw hw;
    CHECK_OK(tio_hw_load(p, &hw));
    CHECK_STR(hw.name, "mine");
    CHECK_EQ_U(hw.gpu_memory_bytes, 80ull << 30);
    CHECK_EQ_U(hw.ssd_count, 8);
    CHECK_NEAR(hw.pcie_h2d_Bps, 25e9, 1);
    CHECK_NEAR(hw.ssd_latency_s, 50e-6, 1e-12);
    CHECK_EQ_U(hw.host_offload_cap_bytes, 1000000000ull);
    CHECK_NEAR(hw.ssd_write_Bps, 6.5e9, 1); /* inherited */
    /* a file based on a file */
    char text[600];
    (void)snprintf(text, sizeof text, "{\"base\": \"%s\", \"gpus\": 4}", p);
    const char *q = write_file("b.json", text);
    CHECK_OK(tio_hw_load(q, &hw));
    CHECK_EQ_U(hw.gpus, 4);
    CHECK_EQ_U(hw.gpu_memory_bytes, 80ull << 30);
    CHECK_STR(hw.name, "b.json");
    /* round trip through tio_hw_to_json */
    char *json = NULL;
    CHECK_OK(tio_hw_to_json(&hw, &json));
    const char *r = write_file("c.json", json ? json : "");
    tio_free(json);
    struct tio_hw back;
    CHECK_OK(tio_hw_load(r, &back));
    CHECK_EQ_U(back.gpu_memory_bytes, hw.gpu_memory_bytes);
    CHECK_NEAR(back.pcie_h2d_Bps, hw.pcie_h2d_Bps, 1e-3);
    CHECK_NEAR(back.ssd_efficiency, hw.ssd_efficiency, 1e-15);
    CHECK_STR(back.name, hw.name);
    /* a preset name works as a path */
    CHECK_OK(tio_hw_load("cpu-ci", &hw));
    CHECK_STR(hw.name, "cpu-ci");
}

TIO_TEST(json_errors_name_the_field) {
    struct tio_hw hw;
    CHECK_RC(tio_hw_load(write_file("e1.json", "{\"pcie_h2d_Bps\": \"-3GB/s\"}"), &hw), TIO_EINVAL);
    CHECK_ERR_HAS("pcie_h2d_Bps");
    CHECK_RC(tio_hw_load(write_file("e2.json", "{\"ssd_read_Bps\": 0}"), &hw), TIO_EINVAL);
    CHECK_ERR_HAS("ssd_read_Bps");
    CHECK_RC(tio_hw_load(write_file("e3.json", "{\"gpu_memroy_bytes\": 1}"), &hw), TIO_EFORMAT);
    CHECK_ERR_HAS("gpu_memroy_bytes");
    CHECK_RC(tio_hw_load(write_file("e4.json", "{\"gpus\": -2}"), &hw), TIO_EINVAL);
    CHECK_ERR_HAS("gpus");
    CHECK_RC(tio_hw_load(write_file("e5.json", "{\"gpu_memory_bytes\": \"12 parsecs\"}"), &hw),
             TIO_EINVAL);
    CHECK_ERR_HAS("gpu_memory_bytes");
    CHECK_RC(tio_hw_load(write_file("e6.json", "[1,2]"), &hw), TIO_EFORMAT);
    CHECK_RC(tio_hw_load(write_file("e7.json", "{\"gpus\": "), &hw), TIO_EFORMAT);
    CHECK_RC(tio_hw_load(write_file("e8.json", "{\"base\": \"nope\"}"), &hw), TIO_ENOTFOUND);
    /* a base loop is caught */
    char text[600];
    (void)snprintf(text, sizeof text, "{\"base\": \"%s/loop.json\"}", tmpdir);
    CHECK_RC(tio_hw_load(write_file("loop.json", text), &hw), TIO_EFORMAT);
    CHECK_ERR_HAS("deeper");
    CHECK(tio_hw_load("/nonexistent/dir/x.json", &hw) < 0);
    CHECK_RC(tio_hw_load(
                 write_file("e9.json", "{\"gpu_memory_bytes\": 1000, \"gpu_reserve_bytes\": 2000}"),
                 &hw),
             TIO_EINVAL);
    CHECK_ERR_HAS("gpu_reserve_bytes");
}

/* Names reach terminals and reports: control characters are refused (an escape sequence in a
 * hardware file must not be echoed raw), a name taken from a file name is made printable, and
 * capacities above 2^60 bytes are refused as absurd. */
/* The SSD model's fields: the paper preset's cache and sustained rate (990 PRO data sheet),
 * the mixing factor and the derived rates by hand, validation, and a JSON round trip. */
TIO_TEST(ssd_model_fields) {
    struct tio_hw hw = tio_hw_default();
    CHECK_EQ_U(hw.ssd_write_cache_bytes, 216000000000ull);
    CHECK_NEAR(hw.ssd_sustained_write_Bps, 1.4e9, 0);
    CHECK_NEAR(hw.ssd_mixed_Bps, 0, 0);
    CHECK_NEAR(tio_hw_ssd_mix_factor(&hw), 1.0, 0); /* time sharing */
    /* 4 drives x 1.4 GB/s = 5.6 GB/s, below the array's 4 x 6.5 x 16/26 = 16 GB/s */
    CHECK_NEAR(tio_hw_ssd_sustained_write_Bps(&hw), 5.6e9, 1e-3);
    /* read 6, write 3 GB/s: harmonic mean 4 GB/s; a 50/50 mix measured at 3 GB/s -> k = 4/3 */
    hw.ssd_read_Bps = 6e9;
    hw.ssd_write_Bps = 3e9;
    hw.ssd_mixed_Bps = 3e9;
    CHECK_OK(tio_hw_validate(&hw));
    CHECK_NEAR(tio_hw_ssd_mix_factor(&hw), 4.0 / 3.0, 1e-12);
    /* no cache: the sustained rate is the array's write rate */
    hw.ssd_write_cache_bytes = 0;
    CHECK_NEAR(tio_hw_ssd_sustained_write_Bps(&hw), tio_hw_ssd_write_Bps(&hw), 0);
    hw.ssd_mixed_Bps = 9.5e9; /* above read + write */
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("ssd_mixed_Bps");
    hw = tio_hw_default();
    hw.ssd_sustained_write_Bps = -1;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("ssd_sustained_write_Bps");
    const char *p = write_file("ssd.json", "{\"ssd_mixed_Bps\": \"5GB/s\", "
                                           "\"ssd_write_cache_bytes\": \"100GB\", "
                                           "\"ssd_sustained_write_Bps\": \"2GB/s\"}");
    CHECK_OK(tio_hw_load(p, &hw));
    CHECK_NEAR(hw.ssd_mixed_Bps, 5e9, 0);
    CHECK_EQ_U(hw.ssd_write_cache_bytes, 100000000000ull);
    CHECK_NEAR(hw.ssd_sustained_write_Bps, 2e9, 0);
    char *json = NULL;
    CHECK_OK(tio_hw_to_json(&hw, &json));
    CHECK(json && strstr(json, "\"ssd_write_cache_bytes\": 100000000000") != NULL);
    tio_free(json);
}

/* The software costs (docs/hardware.md, "Software costs"): the paper preset's measured ones,
 * none on cpu-ci, validation, units in JSON, and a caller whose older header lacks them. */
TIO_TEST(software_cost_fields) {
    struct tio_hw hw = tio_hw_default();
    CHECK_NEAR(hw.kernel_launch_s, 0, 0); /* in the model's kernel durations already */
    CHECK_NEAR(hw.kernel_executor_s, 29.0e-6, 1e-15);
    CHECK_NEAR(hw.move_issue_s, 23.0e-6, 1e-15);
    CHECK_NEAR(hw.kernel_io_slowdown, 0, 0);
    CHECK_OK(tio_hw_preset("cpu-ci", &hw));
    CHECK_NEAR(hw.kernel_launch_s + hw.kernel_executor_s + hw.move_issue_s, 0, 0);
    hw = tio_hw_default();
    hw.move_issue_s = -1e-6;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("move_issue_s");
    hw = tio_hw_default();
    hw.kernel_io_slowdown = 1000;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("kernel_io_slowdown");
    const char *p =
        write_file("sw.json", "{\"kernel_launch_s\": \"5us\", "
                              "\"kernel_executor_s\": 2e-5, "
                              "\"move_issue_s\": \"3us\", \"kernel_io_slowdown\": 0.25}");
    CHECK_OK(tio_hw_load(p, &hw));
    CHECK_NEAR(hw.kernel_launch_s, 5e-6, 1e-18);
    CHECK_NEAR(hw.kernel_executor_s, 2e-5, 1e-18);
    CHECK_NEAR(hw.move_issue_s, 3e-6, 1e-18);
    CHECK_NEAR(hw.kernel_io_slowdown, 0.25, 0);
    char *json = NULL;
    CHECK_OK(tio_hw_to_json(&hw, &json));
    CHECK(json && strstr(json, "\"kernel_io_slowdown\": 0.25") != NULL);
    tio_free(json);
    /* a header from before the costs: its struct ends before them, which are not read */
    hw = tio_hw_default();
    hw.kernel_io_slowdown = -5; /* beyond the older struct: ignored */
    hw.struct_size = (uint32_t)offsetof(struct tio_hw, kernel_launch_s);
    CHECK_OK(tio_hw_validate(&hw));
    json = NULL;
    CHECK_OK(tio_hw_to_json(&hw, &json));
    CHECK(json && strstr(json, "kernel_launch_s") == NULL && strstr(json, "ssd_sustained") != NULL);
    tio_free(json);
}

TIO_TEST(names_printable_and_capacities_sane) {
    struct tio_hw hw;
    CHECK_RC(tio_hw_load(write_file("n1.json", "{\"base\": \"cpu-ci\", \"name\": "
                                               "\"x\\u001b]0;owned\\u0007\"}"),
                         &hw),
             TIO_EINVAL);
    CHECK_ERR_HAS("name: control character 0x1b");
    CHECK_RC(tio_hw_load(write_file("n2.json", "{\"base\": \"cpu-ci\", \"gpu\": \"h\\tx\"}"), &hw),
             TIO_EINVAL);
    CHECK_ERR_HAS("gpu: control character 0x09");
    const char *odd = write_file("a\033[2Jb.json", "{\"base\": \"cpu-ci\"}");
    CHECK_OK(tio_hw_load(odd, &hw));
    CHECK_STR(hw.name, "a?[2Jb.json");
    CHECK_RC(tio_hw_load(write_file("n3.json", "{\"base\": \"cpu-ci\", \"gpu_memory_bytes\": "
                                               "\"2EiB\", \"host_memory_bytes\": \"4EiB\"}"),
                         &hw),
             TIO_EINVAL);
    CHECK_ERR_HAS("gpu_memory_bytes");
    CHECK_ERR_HAS("2^60");
    hw = tio_hw_default();
    hw.host_memory_bytes = UINT64_C(1) << 61;
    CHECK_RC(tio_hw_validate(&hw), TIO_EINVAL);
    CHECK_ERR_HAS("host_memory_bytes");
}

/* A bandwidth sweep's point: the array at the bandwidth asked, no caches, PCIe not the limit. */
TIO_TEST(at_ssd_bandwidth) {
    struct tio_hw hw, h;
    CHECK_OK(tio_hw_preset("paper-2xh100nvl", &hw));
    CHECK_OK(tio_hw_at_ssd_bandwidth(&hw, 64e9, &h));
    CHECK_NEAR(tio_hw_ssd_read_Bps(&h), 64e9, 1); /* 4 drives at 16 GB/s x efficiency */
    CHECK_NEAR(tio_hw_ssd_write_Bps(&h), 64e9, 1);
    CHECK_EQ_U(h.ssd_write_cache_bytes, 0);
    CHECK_NEAR(h.ssd_mixed_Bps, 0, 0);
    CHECK_NEAR(h.pcie_h2d_Bps, 64e9, 0); /* raised to the array's rate */
    CHECK_NEAR(h.pcie_d2h_Bps, 64e9, 0);
    CHECK_OK(tio_hw_at_ssd_bandwidth(&hw, 4e9, &h));
    CHECK_NEAR(h.pcie_h2d_Bps, hw.pcie_h2d_Bps, 0); /* never lowered */
    CHECK_STR(h.name, hw.name);
    CHECK_EQ_I(tio_hw_at_ssd_bandwidth(&hw, 0, &h), TIO_EINVAL);
    CHECK(strstr(tio_last_error(), "must be > 0") != NULL);
    hw.ssd_count = 0;
    CHECK_EQ_I(tio_hw_at_ssd_bandwidth(&hw, 8e9, &h), TIO_EINVAL);
    CHECK(strstr(tio_last_error(), "no SSDs") != NULL);
}

int main(void) {
    (void)snprintf(tmpdir, sizeof tmpdir, "/tmp/tio_test_hw_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        TIO_SKIP("mkdtemp failed");
    }
    RUN(paper_preset_matches_the_paper);
    RUN(every_preset_validates);
    RUN(validate_names_bad_fields);
    RUN(json_units_and_base);
    RUN(json_errors_name_the_field);
    RUN(ssd_model_fields);
    RUN(software_cost_fields);
    RUN(names_printable_and_capacities_sane);
    RUN(at_ssd_bandwidth);
    char cmd[300];
    (void)snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) {
        printf("warning: could not remove %s\n", tmpdir);
    }
    return tio_test_done();
}
