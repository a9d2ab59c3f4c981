/* SPDX-License-Identifier: Apache-2.0 */
/* kv_sizing.h - how big the KV cache of this process is, and the start-up line that says so.
 *
 * The engine's KV cache is given either as a byte budget ("4GiB") or as a fraction of the
 * host memory available now ("0.5": half of it, host_memory.h: MemAvailable or the
 * process's cgroup room, whichever is less), or sized exactly for a number of tokens
 * (`deras generate`). A fraction is of host memory on every backend today: on a GPU it
 * should be of the device's free memory, which needs a memory query in the backend and a
 * GPU to check it on (issue 15's notes); give CUDA workers a size until then. The arithmetic is kv_math's; this module turns a
 * budget into a block count for model_opts and logs, at start:
 *   the element type, bytes per token, blocks x block size, tokens that fit, and the
 *   share of the budget the KV blocks use.
 * The element type comes from kv_sizing_dtype, the one rule (backend_kv_dtype's) that
 * deras-worker, `deras generate`, `deras serve` and `deras kvcalc` all apply, so the
 * calculator prints the bytes a worker allocates.
 */
#ifndef DERAS_KV_SIZING_H
#define DERAS_KV_SIZING_H

#include <stddef.h>
#include <stdint.h>

#include "common/checkpoint/model_config.h"

typedef struct kv_sizing {
    int kv_dtype;          /* enum deras_dtype of the cache */
    uint64_t token_bytes;  /* 2 x layers x kv_heads x head_dim x element size */
    uint64_t block_bytes;
    uint64_t budget_bytes; /* what was allowed */
    int block_size;
    int n_blocks;          /* including the null block 0: model_opts.n_kv_blocks */
    int64_t n_tokens;      /* usable tokens: (n_blocks - 1) x block_size */
    double budget_used;    /* n_blocks x block_bytes / budget */
    uint64_t mem_available;/* a fraction budget: the memory it was a share of (else 0) */
    char mem_source[256];  /* where that number came from (engine/host_memory.h) */
} kv_sizing;

/* The KV cache element type (enum deras_dtype) for a backend device spec ("cpu",
 * "cuda:0", ...): `name` as --kv-dtype spells it (f32, f16, bf16, or kv_math.h's other
 * spellings: fp32, float16, half, bfloat16, ...), or NULL / "" for the device's default
 * (backend_kv_dtype: f32 on the CPU, the activation type on CUDA). DERAS_EINVAL for an
 * unknown name or device, DERAS_EUNSUPPORTED naming what the device keeps. O(1). */
int kv_sizing_dtype(const char *device, const char *name, int *out);

/* From a budget spec: a size with a unit ("512MiB", "4GB") or a fraction in (0, 1] of the
 * memory available now (engine/host_memory.h: MemAvailable, or a cgroup's limit less its
 * usage where that is less; the caller has already loaded the weights). DERAS_EINVAL naming the spec when it is neither; DERAS_ERANGE when it holds
 * fewer than 2 blocks. kv_dtype: the cache's element type (kv_sizing_dtype). */
int kv_sizing_from_budget(const model_config *c, int kv_dtype, int block_size,
                          const char *spec, kv_sizing *out);

/* As kv_sizing_from_budget, for a caller that has not loaded its weights yet (the model
 * allocates weights and cache together): a fraction applies to the available memory less
 * pending_bytes, the weights about to be loaded. A size with a unit is taken as it is.
 * DERAS_ERANGE naming both numbers when the weights alone exceed what is available. */
int kv_sizing_from_budget_before(const model_config *c, int kv_dtype, int block_size,
                                 const char *spec, uint64_t pending_bytes, kv_sizing *out);

/* Check a budget spec's form without reading memory: DERAS_EINVAL naming the spec and the
 * accepted forms (for command-line validation before anything is loaded). */
int kv_sizing_check_spec(const char *spec);

/* Exactly enough blocks for n_tokens tokens (plus the null block). */
int kv_sizing_for_tokens(const model_config *c, int kv_dtype, int block_size,
                         int64_t n_tokens, kv_sizing *out);

/* One info line: "KV cache: F32, 46080 B/token, 33 blocks x 16 tokens = 512 tokens,
 * 23.20 MiB, 100.0% of the 23.20 MiB budget". */
void kv_sizing_log(const kv_sizing *s);

#endif
