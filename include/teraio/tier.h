/*
 * teraio/tier.h - where a tensor lives: the memory tiers shared by plans (plan.h) and the
 * migration engine (io.h), so that a plan's moves reach the engine unchanged.
 *
 *     if (move.to == TIO_TIER_SSD) ...
 *     printf("%s\n", tio_tier_name(move.to));   // "ssd"
 */
#ifndef TERAIO_TIER_H
#define TERAIO_TIER_H

#include <stdint.h>

#include <teraio/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where a tensor lives. Stored as int32_t. */
enum tio_tier { TIO_TIER_GPU = 0, TIO_TIER_HOST = 1, TIO_TIER_SSD = 2, TIO_TIER_COUNT };

/* tio_tier_name: "gpu", "host", "ssd" (a static string; "?" for anything else). */
TIO_API const char *tio_tier_name(int32_t tier);

#ifdef __cplusplus
}
#endif
#endif
