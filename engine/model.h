/* SPDX-License-Identifier: Apache-2.0 */
/* model.h - a Llama-family model's weights on a backend, and its forward pass.
 *
 * model_new() takes every weight from a checkpoint, fusing Q/K/V into one matrix and
 * gate/up into another so each layer runs three large matrix products and one output
 * projection. On the CPU backend a weight in a format it computes on (F32, F16, BF16,
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) is used as stored, straight from the
 * checkpoint's file mapping (the model keeps a checkpoint_retain reference), so weight
 * memory is the file's tensor bytes; engine/model_weights.h says when it is copied
 * instead (a tensor-parallel column slice, a misaligned F32 tensor). opts.convert_weights
 * converts every matrix to another format at load. On CUDA every weight is dequantized to
 * f32 and converted to the backend's bf16/fp16 at upload.
 * It also owns the paged KV cache (n_kv_blocks blocks of block_size tokens per layer, in
 * opts.kv_dtype) and the per-step scratch, sized once from the options: a forward pass
 * allocates nothing.
 *
 * model_forward() runs one step over a batch of sequences (model_batch): any mix of
 * prompt chunks, single decode tokens and multi-token verification spans. New tokens' K/V
 * are written into the cache slots their block tables give, attention reads each
 * sequence's cache, and logits are produced only for the rows asked for. The block
 * tables are the caller's business (the KV manager); the model only checks that every
 * slot it touches is inside the cache.
 *
 * Tensor parallelism: with opts.tp_size > 1 the model is rank opts.tp_rank's shard
 * (engine/tp_layout.h says which heads, MLP columns and vocabulary rows): model_new reads
 * only that shard from the checkpoint, the KV cache holds only the rank's KV heads, and
 * model_forward calls the group's communicator (engine/comm.h) - an all-reduce after the
 * embedding, the attention output and the MLP down projection, an all-gather of the
 * logits. Every rank must run the same batches in the same order; only rank 0 gets
 * logits (the others pass NULL).
 */
#ifndef DERAS_MODEL_H
#define DERAS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/checkpoint/checkpoint.h"
#include "common/checkpoint/model_config.h"
#include "kernels/backend.h"
#include "engine/comm.h"
#include "engine/tp_layout.h"

typedef struct model model_t;

typedef struct model_opts {
    int max_batch_tokens; /* most tokens one forward pass may carry */
    int max_seqs;         /* most sequences one forward pass may carry */
    int max_logits;       /* most logit rows one forward pass may ask for */
    int block_size;       /* tokens per KV block */
    int n_kv_blocks;      /* KV cache capacity in blocks (per layer) */
    int kv_dtype;         /* KV cache element type, enum deras_dtype: one the backend keeps
                             (backend_kv_dtype; DT_F32 is 0, the CPU default) */
    int max_blocks_per_seq; /* width of a block table row */
    int max_copies;       /* most copy-on-write block copies one step may carry */
    void (*progress)(void *ctx, int done, int total); /* weight loading progress, or NULL */
    void *progress_ctx;
    int tp_rank, tp_size; /* this rank's shard; tp_size 0 or 1: the whole model */
    comm_t *comm;         /* the group's communicator when tp_size > 1 (not owned) */
    bool convert_weights; /* every matrix (embedding and LM head included) converted to
                             weight_dtype at load; false: each kept as stored where the
                             backend computes on its format */
    int weight_dtype;     /* enum deras_dtype: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 */
} model_opts;

/* One forward step. Tokens of sequence s are rows [q_start[s], q_start[s+1]) and are its
 * newest tokens: positions ctx_len[s] - n .. ctx_len[s] - 1. All arrays are host memory. */
typedef struct model_batch {
    int n_tokens;
    const int32_t *tokens;       /* (n_tokens) */
    int n_seqs;
    const int32_t *q_start;      /* (n_seqs + 1), q_start[0] = 0, q_start[n_seqs] = n_tokens */
    const int32_t *ctx_len;      /* (n_seqs) tokens in the cache after this step */
    const int32_t *block_tables; /* (n_seqs, max_blocks_per_seq) */
    int n_logits;
    const int32_t *logits_rows;  /* (n_logits) rows whose next-token logits are wanted */
    int n_copies;
    const int32_t *copies;       /* (n_copies, 2) KV blocks to copy (src, dst) before the
                                    step: copy-on-write of shared blocks */
} model_batch;

/* Load the model. DERAS_ENOMEM if the weights or cache do not fit; DERAS_EUNSUPPORTED for
 * a weight_dtype or kv_dtype the backend cannot keep or a tensor-parallel size whose split is not
 * whole blocks of the weights' format; DERAS_EFORMAT for a conversion whose rows are not
 * whole blocks; errors from the checkpoint carry its message. Cost: pages in (mapped) or
 * reads and converts every weight once. */
int model_new(const checkpoint_t *ck, backend_t *b, const model_opts *opts, model_t **out);
void model_destroy(model_t **m);

/* A self-draft: a model that runs only the first n_layers layers of `base`, then base's
 * final norm and LM head. It shares base's weights (base must outlive it; destroying it
 * frees only what it owns) and has its own KV cache and scratch, sized by opts.
 * DERAS_EINVAL unless 1 <= n_layers < base's layers; DERAS_ENOMEM. O(n_layers) plus the
 * cache allocation. */
int model_new_partial(const model_t *base, int n_layers, const model_opts *opts, model_t **out);

const model_config *model_get_config(const model_t *m);
const model_opts *model_get_opts(const model_t *m);

/* This rank's shard (the whole model when not tensor-parallel). */
const tp_shard *model_get_shard(const model_t *m);

/* Bytes of weights this rank's shard uses (mapped from the file or in backend memory),
 * of those the part used in place from the file mapping, and of the KV cache:
 * 2 x n_layers x n_kv_blocks x block_size x the rank's KV heads x head_dim x the kv_dtype's
 * size, the arithmetic of kv_math.h's kvmath_token_bytes (test_kv_dtype checks both). */
uint64_t model_weight_bytes(const model_t *m);
uint64_t model_mapped_bytes(const model_t *m);
uint64_t model_kv_bytes(const model_t *m);

/* Run one step; logits (n_logits, vocab) f32 host memory (rank 0; NULL on other ranks).
 * Validates the batch against the options (counts, ids, block ids, positions) and returns
 * DERAS_EINVAL / DERAS_ERANGE with the reason instead of touching memory out of bounds.
 * A tensor-parallel rank also fails with the communicator's status (a dead rank). */
int model_forward(model_t *m, const model_batch *batch, float *logits);

#endif
