/* SPDX-License-Identifier: Apache-2.0 */
/* tp_layout.h - which part of the model each tensor-parallel rank holds (Megatron style).
 *
 * - Attention by query heads: rank r holds a contiguous range of query heads, split as
 *   evenly as possible (the first ranks get one fewer when n_heads % tp != 0), and every
 *   KV head those query heads read. When tp divides n_kv_heads the ranges follow KV
 *   groups exactly and each KV head lives on one rank; otherwise a KV head whose group
 *   straddles two ranks is held (replicated) by both. Q/K/V are column-parallel (rows of
 *   the weights), the output projection row-parallel (its columns).
 * - MLP: gate/up rows and down columns [f0, f1) of d_ff, split evenly.
 * - Embedding and LM head vocab-parallel: rows [v0, v1) of the vocabulary. Embedding rows
 *   of other ranks' tokens are zero, so an all-reduce gives every rank the embeddings;
 *   the logits are all-gathered.
 * - Quantized weights split only at their blocks (tp_shard_of_blocks): the attention
 *   output's columns are whole heads, rounded to whole blocks of its format (Q4_K's 256
 *   columns are two heads of 128), and the MLP split points are multiples of the down
 *   projection's block (32 or 256), so every rank's slice is whole blocks and stays in
 *   the file's format. The units are then split as evenly as possible, as above.
 * A layout is impossible when a rank would get nothing: tp > n_heads (or its units),
 * tp > d_ff (or its units) or tp > vocab size.
 *
 * For SmolLM2-135M (9 query heads, 3 KV heads, groups of 3): tp 1: heads 0-8, KV 0-2;
 * tp 2: heads 0-3 + KV 0-1 | heads 4-8 + KV 1-2 (KV head 1 on both); tp 3: one group per
 * rank; tp 4: heads 0-1 KV 0 | 2-3 KV 0-1 | 4-5 KV 1 | 6-8 KV 2.
 */
#ifndef DERAS_TP_LAYOUT_H
#define DERAS_TP_LAYOUT_H

#include "common/checkpoint/model_config.h"

typedef struct tp_shard {
    int rank, size;
    int h0, h1;     /* query heads [h0, h1) */
    int kv0, kv1;   /* KV heads [kv0, kv1) */
    int f0, f1;     /* MLP intermediate [f0, f1) */
    int v0, v1;     /* vocabulary rows [v0, v1) */
    int v_max;      /* the largest rank's vocabulary share (logits are gathered at this width) */
} tp_shard;

/* Rank `rank`'s shard of a model with config c split `size` ways. DERAS_EINVAL for a
 * rank outside [0, size) or size < 1; DERAS_EUNSUPPORTED, with the numbers and the
 * largest size that works, when the layout is impossible. O(1). */
int tp_shard_of(const model_config *c, int rank, int size, tp_shard *out);

/* The same with the row-parallel weights' columns split only at whole blocks: out_block
 * and down_block are the elements per block of the format the attention output and the
 * MLP down projection are kept in (1 for F32/F16/BF16: tp_shard_of). DERAS_EUNSUPPORTED
 * also when n_heads * head_dim or d_ff is not whole blocks. O(size). */
int tp_shard_of_blocks(const model_config *c, int rank, int size, int out_block, int down_block,
                       tp_shard *out);

/* "heads 0-3, KV heads 0-1 (KV 1 shared), ffn 0-767, vocab 0-24575" for logs. */
void tp_shard_describe(const tp_shard *s, const model_config *c, char *buf, size_t cap);

#endif
