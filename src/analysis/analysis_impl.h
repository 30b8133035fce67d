/* Private: accessors shared by the analysis files. */
#ifndef TIO_ANALYSIS_IMPL_H
#define TIO_ANALYSIS_IMPL_H

#include <teraio/analysis.h>

/* The trace an analysis was built from (borrowed). */
const struct tio_trace *tio_analysis_borrowed_trace(const struct tio_analysis *a);

#endif
