/*
 * libFuzzer target: the binary trace reader (and the writers, on whatever it accepts).
 *
 * Each input is tried twice: as is (exercises the header and checksum checks), and with its
 * trailing CRC32C recomputed, because otherwise almost every mutation dies at the checksum and
 * the section, string, metadata and validation code behind it would never be reached.
 */
#include "common/common_impl.h"
#include "fuzz_trace_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_trace_one(data, size, TIO_TRACE_FORMAT_BINARY);
    if (size >= 84) {
        uint8_t *copy = malloc(size);
        if (!copy) {
            return 0;
        }
        memcpy(copy, data, size);
        uint32_t crc = tio_crc32c(0, copy, size - 4);
        memcpy(copy + size - 4, &crc, 4);
        fuzz_trace_one(copy, size, TIO_TRACE_FORMAT_BINARY);
        free(copy);
    }
    return 0;
}
