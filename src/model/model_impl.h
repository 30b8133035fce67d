/* Private: shared between the model presets and the trace generator. */
#ifndef TIO_MODEL_IMPL_H
#define TIO_MODEL_IMPL_H

#include <stdint.h>

#include <teraio/model.h>

/* Per-head width: head_dim, or hidden / heads when it is 0. */
uint32_t tio_model_head_dim(const struct tio_model_params *p);

#endif
