/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint.h - one door to a model's weights, whether a GGUF file or a Hugging Face directory.
 *
 * A checkpoint is either a single .gguf file or a directory holding config.json and
 * model.safetensors, or shards listed in model.safetensors.index.json. The model asks for
 * tensors by role and layer (CKPT_ATTN_Q of layer 3), never by file-specific name, and gets
 * them as f32 in Hugging Face layout (or, for a backend that computes on the stored
 * formats, as stored: checkpoint_read_stored copies, checkpoint_stored_rows points into
 * the mapping): a linear weight is (out_features, in_features) and
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
/* Drop the caller's reference; the last one unmaps everything and frees. Sets *c to NULL.
 * NULL-safe. */
void checkpoint_destroy(checkpoint_t **c);

/* Another reference to c, for an object that computes on the mapped tensor data in place
 * (a model's weights, checkpoint_stored_rows): the mapping lives until every reference
 * is given back with checkpoint_destroy. Thread-safe (an atomic count), O(1). */
checkpoint_t *checkpoint_retain(const checkpoint_t *c);

const model_config *checkpoint_config(const checkpoint_t *c);

/* "attention q", "ffn down", ... for messages; "?" outside the enum. */
const char *checkpoint_role_name(enum ckpt_tensor t);
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

/* The dtype the tensor is stored in (enum deras_dtype), DT_UNSUPPORTED when absent. O(1). */
int checkpoint_dtype(const checkpoint_t *c, enum ckpt_tensor t, int layer);

/* The stored bytes (checkpoint_dtype's blocks, not dequantized) of columns [col0, col0 +
 * n_cols) of rows [row0, row0 + n_rows), rows in Hugging Face order (GGUF's permuted Q/K
 * rows are gathered from where they are stored) one after another in dst. The column
 * range must start and end on block boundaries. DERAS_ERANGE for a range outside the
 * tensor, DERAS_EFORMAT for an unaligned one, DERAS_EINVAL for a NULL dst.
 * O(bytes copied); allocates nothing. */
int checkpoint_read_stored(const checkpoint_t *c, enum ckpt_tensor t, int layer, int64_t row0,
                           int64_t n_rows, int64_t col0, int64_t n_cols, void *dst);

/* Where a tensor's rows lie in the file mapping, for a caller that computes on them in
 * place (and holds a checkpoint_retain reference while it does): stored row s of the
 * tensor is row_bytes bytes at data + s * row_bytes, in checkpoint_dtype's format, with no
 * alignment promised. Stored order is Hugging Face order except for the Q and K of GGUF
 * llama files: there *qk_perm_hd is head_dim and HF row h*hd + j*hd/2 + i (j = 0, 1) is
 * stored at h*hd + 2i + j; otherwise *qk_perm_hd is 0. A range of whole heads is the same
 * range of rows in both orders. Any out-pointer may be NULL. DERAS_ENOTFOUND, DERAS_ERANGE
 * and DERAS_EINVAL as checkpoint_shape. O(1). */
int checkpoint_stored_rows(const checkpoint_t *c, enum ckpt_tensor t, int layer,
                           const void **data, size_t *row_bytes, int *qk_perm_hd);

/* Ask for bytes [p, p + n) of the mapping now (the kernel reads ahead), then touch one
 * byte of each page, so that a model using its weights in place has them resident when it
 * is ready, not at its first request. Harmless on any other readable memory. O(n / page). */
void checkpoint_prefetch(const void *p, size_t n);

/* The opposite: the whole pages inside [p, p + n) of a tensor in a mapped file leave the
 * process's resident memory (they are read again from the page cache if touched). Only
 * for file mappings that are never written. Advice: a failure changes nothing. */
void checkpoint_release(const void *p, size_t n);

/* Bytes of the mapped tensor data the model uses (what reading every role of every layer
 * would touch); unused tensors (a tied config's lm_head, rope_freqs) are not counted. */
uint64_t checkpoint_file_bytes(const checkpoint_t *c);

#endif
