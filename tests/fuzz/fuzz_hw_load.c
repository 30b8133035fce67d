/*
 * libFuzzer target: the hardware-description reader (JSON text, units, "base" chains,
 * validation) on arbitrary bytes. A description that loads must be valid, and must survive
 * tio_hw_to_json and a second parse unchanged (the second serialization equals the first).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <teraio/alloc.h>
#include <teraio/hw.h>

#include "plan/planner_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct tio_hw hw;
    int rc = tio_hw_parse_json(data, size, "fuzz.json", &hw);
    if (rc != 0) {
        /* refusals name a field (EFORMAT, EINVAL), an unknown preset (ENOTFOUND), or a "base"
         * file that cannot be opened (-errno); anything else is a finding */
        if (rc <= -1000 && rc != TIO_EFORMAT && rc != TIO_EINVAL && rc != TIO_ENOTFOUND) {
            abort();
        }
        return 0;
    }
    if (tio_hw_validate(&hw) != 0) {
        abort();
    }
    char *a = NULL, *b = NULL;
    struct tio_hw back;
    if (tio_hw_to_json(&hw, &a) != 0 || tio_hw_parse_json(a, strlen(a), "a.json", &back) != 0 ||
        tio_hw_to_json(&back, &b) != 0 || strcmp(a, b) != 0) {
        abort();
    }
    tio_free(a);
    tio_free(b);
    return 0;
}
