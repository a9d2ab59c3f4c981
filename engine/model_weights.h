/* SPDX-License-Identifier: Apache-2.0 */
/* model_weights.h - where a model's weights live, and how each gets there (internal to
 * engine/: model.c's loader).
 *
 * Three ways, chosen per tensor slice:
 *   mapped     the file's bytes used in place: the slice is whole rows in the format the
 *              backend keeps for it (as stored, or the requested format when they agree)
 *              and the backend computes on host memory at that address (backend_can_map:
 *              the CPU backend). The store holds a checkpoint_retain reference so the
 *              mapping outlives the loader's, and pages the bytes in at load
 *              (checkpoint_prefetch), so a ready model has them resident.
 *   copied     the stored bytes of whole blocks copied into backend memory: a column
 *              slice (a tensor-parallel rank's share of the attention output or of the
 *              down projection, block-aligned by tp_shard_of_blocks) or an address the
 *              backend cannot read in place (F32 at an odd offset).
 *   converted  dequantized to f32 and written in the kept format: a format conversion at
 *              load (ws_opts.convert: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
 *              common/base/quantize.h), or any weight on a backend that keeps only its own
 *              dtype (CUDA: bf16/fp16 through backend_upload_f32).
 * A fused matrix (Q/K/V, gate/up) is a backend_weight of parts, one per tensor slice, so
 * each part keeps its own way and format (a Q4_K_M file mixes Q4_K and Q6_K in one
 * Q/K/V); parts that end up adjacent in memory with the same format and row order are
 * merged (a file's gate and up stored back to back), and a matrix of one plain part is an
 * ordinary descriptor. Slices all converted to one format share one allocation instead.
 * GGUF llama Q/K stay in their stored row order (qk_perm_hd), which the backend undoes in
 * its outputs.
 *
 * Memory: the mapped bytes are the file's (page cache, shared by every process that maps
 * the file); the rest is backend memory the store owns. Costs: reading every weight once
 * (paging mapped ones in, converting the others); nothing after load.
 */
#ifndef DERAS_MODEL_WEIGHTS_H
#define DERAS_MODEL_WEIGHTS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/checkpoint/checkpoint.h"
#include "kernels/backend.h"

/* A slice of one checkpoint tensor: rows [row0, row0 + n_rows), columns [col0, col0 +
 * n_cols) in Hugging Face order; n_rows / n_cols of -1 mean all of them. A vector is one
 * row. */
typedef struct ws_slice {
    enum ckpt_tensor t;
    int64_t row0, n_rows, col0, n_cols;
} ws_slice;

typedef struct weight_store {
    backend_t *be;
    bool convert;        /* every matrix in `dtype`; false: as stored where the backend keeps it */
    int dtype;
    checkpoint_t *ck;    /* a reference while any weight is mapped, else NULL */
    void **bufs;         /* backend memory the store owns */
    int n_bufs, cap_bufs;
    uint64_t owned_bytes, mapped_bytes;
    struct ws_map { const void *p; size_t n; } *maps; /* the file ranges weights map */
    int n_maps, cap_maps;
    float *stage;        /* host staging: stage_elems f32 rows, then as many bytes for the
                            converted rows */
    size_t stage_elems;
    float *row_scratch;  /* one row of the widest tensor, for unaligned f32 column slices */
} weight_store;

/* An empty store for backend b. convert/dtype: the conversion asked for (checked by
 * ws_check_format). stage_elems / row_elems size the host staging: rows are staged
 * stage_elems elements at a time (at least 4 Mi, at least one row of row_elems, the widest
 * tensor). DERAS_ENOMEM. */
int ws_init(weight_store *ws, backend_t *b, bool convert, int dtype, size_t stage_elems,
            size_t row_elems);

/* Free the staging (after loading; the weights stay). */
void ws_done_loading(weight_store *ws);

/* Free every buffer the store owns and give back the checkpoint reference. NULL-safe,
 * leaves the store empty. */
void ws_release(weight_store *ws);

/* Whether weights can be converted to `dtype` on backend b: a format common/base/
 * quantize.h writes, which the backend keeps. DERAS_EUNSUPPORTED naming both otherwise. */
int ws_check_format(const backend_t *b, int dtype);

/* The format a tensor stored as `stored` is kept in. O(1). */
int ws_kept_dtype(const weight_store *ws, int stored);

/* A matrix made of the given slices one after another (a fused weight), plus extra_rows
 * zero rows at the end (the vocab-parallel embedding's row for other ranks' tokens), each
 * slice mapped, copied or converted as the file header describes. Only the slices are
 * read. DERAS_EFORMAT when a converted slice's columns are not whole blocks of the
 * format; checkpoint and backend errors as they come. */
int ws_matrix(weight_store *ws, backend_weight *w, const ws_slice *slices, int n, int layer,
              const checkpoint_t *ck, int extra_rows);

/* w laid out again for the backend's matmul mode (backend_pack: the CPU's q8 mode), in
 * memory the store owns; the file pages of what w maps are then dropped from the
 * process (madvise: they come back from the page cache if an embedding lookup or an
 * exact-mode product reads them), so weights are not held twice. Nothing when the backend
 * packs nothing. DERAS_ENOMEM, backend errors. O(weight bytes). */
int ws_pack(weight_store *ws, backend_weight *w);

/* Vectors (norms, fused biases) end to end in one buffer in the backend's dtype. */
int ws_vectors(weight_store *ws, void **dst, const ws_slice *slices, int n, int layer,
               const checkpoint_t *ck);

/* Backend memory owned by the store (inv_freq and the like): zero-filled, freed by
 * ws_release. */
int ws_alloc(weight_store *ws, size_t bytes, void **out);

/* Bytes the whole model's weights will take on backend b, kept as described above
 * (mapped or not): for sizing a KV cache before loading. O(tensors). */
uint64_t ws_estimate(const checkpoint_t *ck, const backend_t *b, bool convert, int dtype);

/* w's first rows rows (rows <= w->rows): the tied LM head is the embedding table less
 * its tensor-parallel zero row. */
backend_weight ws_first_rows(const backend_weight *w, int rows);

#endif
