/* libFuzzer target: the JSON trace reader (and the writers, on whatever it accepts). */
#include "fuzz_trace_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fuzz_trace_one(data, size, TIO_TRACE_FORMAT_JSON);
}
