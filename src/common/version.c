#include <teraio/version.h>

const char *tio_version(void) {
    return TIO_VERSION_STRING;
}

int tio_version_number(void) {
    return TIO_VERSION_MAJOR * 10000 + TIO_VERSION_MINOR * 100 + TIO_VERSION_PATCH;
}
