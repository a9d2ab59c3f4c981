/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint.h - one door to a model's weights, whether a GGUF file or a Hugging Face directory.
 *
 * A checkpoint is either a single .gguf file or a directory holding config.json and
 * model.safetensors, or shards listed in model.safetensors.index.json. The model asks for
 * tensors by role and layer (CKPT_ATTN_Q of layer 3), never by file-specific name, and gets
 * them as f32 in Hugging Face layout: a linear weight is (out_features, in_features) and
 * Q/K rows are in Hugging Face head order (GGUF's llama files store Q and K permuted for
 * interleaved RoPE; that permutation is undone here, so the model uses one RoPE
 * convention: rotate-half). Reading a row range reads and dequantizes only those rows, so
 * a tensor-parallel rank never holds the full weights.
 *
 * Every tensor's shape is checked against the config before any data is read; a missing
 * tensor (DERAS_ENOTFOUND), wrong shape (DERAS_EFORMAT) or non-computable dtype
 * (DERAS_EUNSUPPORTED) is an error naming the file and the tensor. A llama GGUF carrying
 * projection biases deras would ignore is refused too. An HF config with tied embeddings
 * uses the embedding as the LM head even if an lm_head tensor was saved.
 *
 * After open everything is resolved: the accessors are O(1) table lookups and the object
 * is read-only, so threads (or tensor-parallel ranks in one process) may read concurrently.
 */
#ifndef DERAS_CHECKPOINT_H
#define DERAS_CHECKPOINT_H

#include <stdint.h>

#include "gguf.h"
#include "model_config.h"

typedef struct checkpoint checkpoint_t;

enum ckpt_tensor {
    CKPT_TOK_EMBD,      /* (vocab, d_model) */
    CKPT_OUTPUT_NORM,   /* (d_model) */
    CKPT_OUTPUT,        /* (vocab, d_model); absent when embeddings are tied */
    CKPT_ATTN_NORM,     /* (d_model), per layer */
    CKPT_ATTN_Q,        /* (n_heads * head_dim, d_model) */
    CKPT_ATTN_K,        /* (n_kv_heads * head_dim, d_model) */
    CKPT_ATTN_V,        /* (n_kv_heads * head_dim, d_model) */
    CKPT_ATTN_Q_BIAS,   /* (n_heads * head_dim), qkv_bias only */
    CKPT_ATTN_K_BIAS,   /* (n_kv_heads * head_dim), qkv_bias only */
    CKPT_ATTN_V_BIAS,   /* (n_kv_heads * head_dim), qkv_bias only */
    CKPT_ATTN_OUT,      /* (d_model, n_heads * head_dim) */
    CKPT_FFN_NORM,      /* (d_model) */
    CKPT_FFN_GATE,      /* (d_ff, d_model) */
    CKPT_FFN_UP,        /* (d_ff, d_model) */
    CKPT_FFN_DOWN,      /* (d_model, d_ff) */
    CKPT_N_TENSORS
};

/* Open a .gguf file or a Hugging Face model directory, read its config and check that
 * every tensor the config implies is present with the right shape and a computable dtype.
 * Tensor data is mapped, not read. On failure *out is NULL: DERAS_EIO (path missing or
 * unreadable), DERAS_ENOTFOUND (no config.json / weights / tensor), DERAS_EFORMAT,
 * DERAS_EUNSUPPORTED, from the readers and the config loaders. O(header sizes + tensors). */
int checkpoint_open(const char *path, checkpoint_t **out);
/* Unmap everything and free; sets *c to NULL. NULL-safe. */
void checkpoint_destroy(checkpoint_t **c);

const model_config *checkpoint_config(const checkpoint_t *c);
const char *checkpoint_path(const checkpoint_t *c);

/* The GGUF file for a .gguf checkpoint (its metadata carries the tokenizer), else NULL. */
const gguf_t *checkpoint_gguf(const checkpoint_t *c);
/* The directory of a Hugging Face checkpoint (tokenizer.json lives there), else NULL. */
const char *checkpoint_hf_dir(const checkpoint_t *c);

/* True if the checkpoint holds this tensor (CKPT_OUTPUT is absent when tied, biases when
 * the architecture has none). layer is ignored for non-layer tensors. */
bool checkpoint_has(const checkpoint_t *c, enum ckpt_tensor t, int layer);

/* The shape in Hugging Face layout: rows (out_features, or 1 for a vector) and cols.
 * DERAS_ENOTFOUND if absent, DERAS_ERANGE for a layer outside 0..n_layers-1. */
int checkpoint_shape(const checkpoint_t *c, enum ckpt_tensor t, int layer, int64_t *rows,
                     int64_t *cols);

/* Dequantize rows [row0, row0 + n_rows) of the tensor into dst, (n_rows, cols) row-major
 * f32 in Hugging Face layout. For vectors use row0 = 0, n_rows = 1. Any range works (Q/K
 * rows of permuted GGUF files are fetched one by one from where they are stored).
 * DERAS_ERANGE if the range or layer is outside the tensor, DERAS_ENOTFOUND if the tensor
 * is absent, DERAS_EINVAL for a NULL dst. O(n_rows * cols); allocates nothing. */
int checkpoint_read_rows(const checkpoint_t *c, enum ckpt_tensor t, int layer, int64_t row0,
                         int64_t n_rows, float *dst);

/* Dequantize columns [col0, col0 + n_cols) of rows [row0, row0 + n_rows) into dst,
 * (n_rows, n_cols) row-major f32: the column slice a row-parallel tensor-parallel rank
 * holds. When the range starts and ends on the dtype's block boundaries (32 or 256
 * elements for quantized types, any column for F32/F16/BF16) only those blocks are
 * dequantized; otherwise each row is dequantized whole into `scratch` (cols floats, the
 * caller's) and the range copied out. scratch may be NULL when the range is aligned.
 * DERAS_ERANGE for a range outside the tensor, DERAS_EINVAL for NULL dst (or scratch when
 * needed). O(n_rows * n_cols), or O(n_rows * cols) unaligned; allocates nothing. */
int checkpoint_read_cols(const checkpoint_t *c, enum ckpt_tensor t, int layer, int64_t row0,
                         int64_t n_rows, int64_t col0, int64_t n_cols, float *dst,
                         float *scratch);

/* Bytes of the mapped tensor data the model uses (what reading every role of every layer
 * would touch); unused tensors (a tied config's lm_head, rope_freqs) are not counted. */
uint64_t checkpoint_file_bytes(const checkpoint_t *c);

#endif
