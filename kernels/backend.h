/* SPDX-License-Identifier: Apache-2.0 */
/* backend.h - the compute backend: device memory and the ops one forward pass needs.
 *
 * The model is written once against this interface; a backend (CPU reference, CUDA)
 * supplies memory and kernels. Every pointer named a "buffer" below is backend memory from
 * backend_alloc(): host memory on the CPU backend, device memory on CUDA. Activations and
 * norm weights are stored in the backend's dtype (f32 on CPU; bf16/fp16 on CUDA) and are
 * moved with backend_upload_f32 / backend_download_f32, which convert. Matrices and
 * embedding tables are weight descriptors (backend_weight): in the backend's dtype, or, on
 * the CPU backend, in a GGUF block format as stored in the file (backend_weight_dtype says
 * which a backend keeps), moved with backend_upload as bytes. Integer index arrays
 * (token ids, positions, block tables, slot mappings) are int32 buffers uploaded with
 * backend_upload.
 *
 * Shapes are given in comments as (rows, cols), row-major. Ops run in stream order and may
 * be asynchronous; backend_sync() waits. Every op validates its arguments cheaply and
 * returns DERAS_EINVAL on nonsense (non-positive sizes, NULL buffers); device failures are
 * DERAS_EBACKEND with a message naming the op. Ops allocate nothing.
 *
 * Paged KV cache layout, per layer: k_cache and v_cache are (n_blocks, n_kv_heads,
 * block_size, head_dim). Token t of a sequence lives in block block_table[t / block_size]
 * at offset t % block_size; its "slot" is block * block_size + offset. The cache's element
 * type (enum deras_dtype) is the caller's choice among those the backend keeps
 * (backend_keeps_kv): the CPU backend keeps F32, F16 and BF16 (K/V rounded to nearest
 * even on write, widened exactly on read, the arithmetic f32 either way); CUDA keeps its
 * activation dtype only. Every op that touches a cache is told its dtype.
 */
#ifndef DERAS_BACKEND_H
#define DERAS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct backend backend_t;

/* Create a backend from a device spec: "cpu", or "cuda:N" (bf16), "cuda:N:bf16",
 * "cuda:N:fp16". n_threads applies to the CPU backend (0: all cores). DERAS_EUNSUPPORTED
 * for a backend this build lacks or a machine without that device; DERAS_EINVAL for a
 * malformed spec. */
int backend_new(const char *device, int n_threads, backend_t **out);
void backend_destroy(backend_t **b);

const char *backend_name(const backend_t *b);  /* "cpu", "cuda:0" */

/* The KV cache dtype (enum deras_dtype) a backend made from `device` keeps for `requested`:
 * BACKEND_KV_DEFAULT gives the device's default - F32 on "cpu" (the activations' own type:
 * exact against the f32 reference, docs/engine.md), BF16 on "cuda:N" and "cuda:N:bf16",
 * F16 on "cuda:N:fp16" - and any other value is checked. A pure function of its
 * arguments (no backend is made), so the workers and `deras kvcalc` size the cache by the
 * same rule. DERAS_EINVAL for a malformed device spec or a NULL out; DERAS_EUNSUPPORTED,
 * naming the device and what it keeps, for a dtype it does not keep. O(1). */
#define BACKEND_KV_DEFAULT (-1)
int backend_kv_dtype(const char *device, int requested, int *out);

/* True when this backend keeps a KV cache of `dtype` (backend_kv_dtype's rule). O(1). */
bool backend_keeps_kv(const backend_t *b, int dtype);

/* One line on the CUDA backend for --version: "plugin loaded, 2 devices", or why there is
 * none here (the plugin or a CUDA library missing, no device). Loads the plugin. */
void backend_describe_cuda(char *buf, size_t cap);
size_t backend_elem_size(const backend_t *b);  /* bytes per activation/weight element */

/* A matrix (rows, cols) = (n_out, n_in) or an embedding table (vocab, d) in backend
 * memory: `dtype` (enum deras_dtype) is the backend's own (backend_weight_dtype(b,
 * DT_F32)) or a format the backend computes on, rows of whole blocks one after another.
 *
 * Or, with n_parts > 0, the matrix is its parts' rows one after another, each part
 * stored where it is (a tensor in a mapped checkpoint file, backend_can_map) and in its
 * own dtype: a fused Q/K/V or gate/up matrix made of the file's tensors without copying
 * them. A part with qk_perm_hd > 0 holds its rows in the order GGUF's llama files store
 * Q and K (convert_hf_to_gguf.py's permutation for interleaved RoPE): within each group
 * of qk_perm_hd rows, matrix row j * hd/2 + i is stored at 2 i + j (j = 0, 1); the
 * backend computes the matrix's own rows, in its order. Then `data` is NULL and `dtype`
 * is parts[0]'s. Only backends whose matmul_q takes parts (the CPU) accept them.
 * A value the caller embeds; it owns nothing. */
#define BACKEND_WEIGHT_MAX_PARTS 4
#define BACKEND_WEIGHT_MAX_PERM_HD 1024

typedef struct backend_weight_part {
    int dtype;          /* enum deras_dtype */
    int rows;
    const void *data;   /* (rows, cols) in dtype, any alignment backend_can_map accepts */
    int qk_perm_hd;     /* 0, or the head size of the GGUF Q/K row order (even, divides rows) */
    const void *packed; /* NULL, or the same rows as backend_pack laid them out */
} backend_weight_part;

typedef struct backend_weight {
    int dtype;
    int rows, cols;
    const void *data;
    const void *packed; /* NULL, or data as backend_pack laid it out (n_parts 0) */
    int n_parts;        /* 0: data holds the matrix; 1..BACKEND_WEIGHT_MAX_PARTS: parts */
    backend_weight_part parts[BACKEND_WEIGHT_MAX_PARTS];
} backend_weight;

/* The dtype in which this backend keeps a weight stored as `stored` (enum deras_dtype):
 * the CPU backend keeps every format kernels/cpu/qmatmul.h computes on as it is (F32,
 * F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K); CUDA keeps its activation
 * dtype (DT_BF16 or DT_F16) whatever the file holds. O(1). */
int backend_weight_dtype(const backend_t *b, int stored);

/* True when the backend can compute on a weight of `dtype` lying at host address p as it
 * is, without copying it into memory of its own: p is in a file mapping, say. The CPU
 * backend can for every dtype it keeps, F32 at a 4-byte aligned address (OpenBLAS reads
 * floats), the others at any address (qmatmul.h reads blocks unaligned). CUDA never. O(1). */
bool backend_can_map(const backend_t *b, int dtype, const void *p);

/* True when the backend takes weights made of parts (the CPU). O(1). */
bool backend_takes_parts(const backend_t *b);

/* Bytes of a weight of that dtype and shape; 0 for a dtype or shape that is not one
 * (cols not a whole number of blocks). */
size_t backend_weight_bytes(int dtype, int64_t rows, int64_t cols);

/* Memory. backend_alloc returns zero-filled memory aligned to 64 bytes. */
int backend_alloc(backend_t *b, size_t bytes, void **out);
void backend_free(backend_t *b, void *buf);
int backend_upload(backend_t *b, void *dst, const void *src, size_t bytes);
int backend_upload_f32(backend_t *b, void *dst, const float *src, size_t n_elems);
int backend_download_f32(backend_t *b, float *dst, const void *src, size_t n_elems);
int backend_sync(backend_t *b);

/* out (n, table.cols) = table rows ids[i] (dequantized); ids (n) int32 buffer, checked
 * against table.rows; a table of parts reads each row from its part. DERAS_EUNSUPPORTED
 * for a table dtype the backend does not keep. */
int backend_embed(backend_t *b, void *out, const backend_weight *table, const int32_t *ids,
                  int n);

/* out (n, d) = x / sqrt(mean(x^2) + eps) * w, per row; w (d). out may equal x. */
int backend_rmsnorm(backend_t *b, void *out, const void *x, const void *w, int n, int d,
                    float eps);

/* Fused residual step: residual (n, d) += x; out = rmsnorm(residual) * w. */
int backend_add_rmsnorm(backend_t *b, void *out, void *residual, const void *x, const void *w,
                        int n, int d, float eps);

/* y (n, w.rows) = x (n, w.cols) * w^T + bias, bias (w.rows) or NULL. A block-format w
 * is computed in the backend's matmul mode (backend_set_matmul_mode; exact by default:
 * f32 activations against the stored weights, the math of the dequantized weights up to
 * f32 summation order, kernels/cpu/qmatmul.h). Each part of a w
 * of parts is one product into its columns of y; a part's row order is undone in y, so
 * every output is the same dot product as with the rows in place. DERAS_EUNSUPPORTED for
 * a w dtype the backend does not keep, or parts on a backend that takes none; DERAS_EINVAL
 * for parts that do not add up to w.rows or a bad qk_perm_hd. */
int backend_matmul(backend_t *b, void *y, const void *x, const backend_weight *w,
                   const void *bias, int n);

/* How backend_matmul multiplies activations by block-format weights:
 *   BACKEND_MM_EXACT  f32 activations against the stored weights, decoded exactly (the
 *                     default: the math of the dequantized weights up to f32 summation
 *                     order, as close to the reference as f32 gets);
 *   BACKEND_MM_Q8     activations rounded per block to int8 with an f32 scale (bf16 for
 *                     BF16 weights), integer dot products: llama.cpp's arithmetic, faster
 *                     where the products are compute-bound, each activation off by up to
 *                     half a step of max|x_block| / 127 (kernels/cpu/qmatmul.h).
 * Every row of every call uses the same mode, so results stay independent of the batch. */
enum backend_mm_mode { BACKEND_MM_EXACT = 0, BACKEND_MM_Q8 = 1 };

/* Set the mode for the following backend_matmul calls. DERAS_EINVAL for an unknown mode,
 * DERAS_EUNSUPPORTED for q8 on a backend that offers only exact (CUDA: its weights are
 * bf16/fp16). O(1). */
int backend_set_matmul_mode(backend_t *b, int mode);

/* Reserve what backend_matmul needs for products of up to max_rows rows of up to max_cols
 * columns in the current mode (the CPU's q8 scratch), so that no step allocates. Calls
 * beyond it still work (the scratch grows then). DERAS_EINVAL for non-positive sizes,
 * DERAS_ENOMEM. O(max_rows * max_cols) bytes at most 2 per element; nothing on backends
 * that need nothing. */
int backend_reserve_matmul(backend_t *b, int max_rows, int max_cols);

/* Weights laid out again for the current matmul mode, once, at load: on the CPU in q8
 * mode the block formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) get a copy in
 * kernels/cpu/qmatmul.h's packed layout (16 rows in the lanes of a vector; the copy has
 * the stored bytes, Q4_K/Q5_K 3% more), which backend_matmul then reads in q8 mode instead of the stored
 * rows. backend_pack_bytes: the bytes that copy of w (of each of its parts) takes, 0 when
 * nothing is packed (another mode, format or backend). backend_pack: writes it into buf
 * (backend memory of that many bytes, owned by the caller for w's life) and sets w's
 * `packed` pointers; w's data stays valid and is still what embedding lookups and exact
 * mode read (a caller that will not read it again may drop its pages). The CPU backend
 * asks for huge pages under buf before writing it (THP, where the OS grants them).
 * DERAS_EINVAL for NULL arguments. O(weight bytes). */
size_t backend_pack_bytes(const backend_t *b, const backend_weight *w);
int backend_pack(backend_t *b, backend_weight *w, void *buf);

/* "exact", "q8"; backend_mm_mode_parse is the inverse (DERAS_EINVAL naming the choices). */
const char *backend_mm_mode_name(int mode);
int backend_mm_mode_parse(const char *name, int *mode);

/* out (n, d) = rows[i] of x (., d); rows (n) int32 buffer. */
int backend_gather_rows(backend_t *b, void *out, const void *x, const int32_t *rows, int n, int d);

/* RoPE tables for one step: cos_sin (n, head_dim) with cos in [0, head_dim/2) and sin in
 * [head_dim/2, head_dim), angle = positions[i] * inv_freq[j] computed in f32. inv_freq
 * (head_dim/2) f32 buffer; cos_sin is always f32. */
int backend_rope_table(backend_t *b, float *cos_sin, const int32_t *positions,
                       const float *inv_freq, int n, int head_dim);

/* Rotate-half RoPE in place on x: n rows of row_stride elements, n_heads heads of head_dim
 * starting at the row's first element: x1 = x[j], x2 = x[j + hd/2];
 * x[j] = x1 cos - x2 sin; x[j + hd/2] = x2 cos + x1 sin. */
int backend_rope(backend_t *b, void *x, const float *cos_sin, int n, int n_heads, int head_dim,
                 int row_stride);

/* Write each token's K and V heads into its cache slot, converted to the cache's kv_dtype
 * (round to nearest even). k, v: n rows of row_stride activation elements, n_kv_heads *
 * head_dim values each; slots (n) int32 buffer, slot < n_blocks * block_size.
 * DERAS_EUNSUPPORTED for a kv_dtype the backend does not keep. */
int backend_kv_write(backend_t *b, void *k_cache, void *v_cache, const void *k, const void *v,
                     int row_stride, const int32_t *slots, int n, int n_kv_heads, int head_dim,
                     int block_size, int kv_dtype);

/* Causal attention over the paged cache for a batch of sequences. Sequence s owns query
 * rows [q_start[s], q_start[s+1]); they are its last n_q = q_start[s+1] - q_start[s]
 * tokens, at positions ctx_len[s] - n_q .. ctx_len[s] - 1, and their keys/values are
 * already in the cache. Query at position p attends keys max(0, p - window + 1) .. p
 * (window 0: no limit). Query head h uses kv head h / (n_heads / n_kv_heads).
 *
 * A tensor-parallel rank holds a slice of the heads: its query heads are global heads
 * q_head0 .. q_head0 + n_heads - 1 of a model whose groups have q_per_kv query heads per
 * KV head, and its cache holds global KV heads q_head0 / q_per_kv onward. Local query
 * head h then reads local KV head (q_head0 + h) / q_per_kv - q_head0 / q_per_kv; the
 * slice may start or end inside a group. q_per_kv 0 means the whole model (q_head0 0,
 * q_per_kv = n_heads / n_kv_heads). */
typedef struct attn_args {
    void *out;                   /* (n_tokens, n_heads * head_dim) */
    const void *q;               /* n_tokens rows of q_stride elements */
    int q_stride;
    const void *k_cache;         /* (n_blocks, n_kv_heads, block_size, head_dim) */
    const void *v_cache;
    int kv_dtype;                /* the caches' enum deras_dtype (backend_keeps_kv) */
    const int32_t *q_start;      /* (n_seqs + 1) buffer */
    const int32_t *ctx_len;      /* (n_seqs) buffer */
    const int32_t *block_tables; /* (n_seqs, max_blocks) buffer */
    int n_seqs, n_tokens, max_blocks;
    int n_heads, n_kv_heads, head_dim, block_size;
    int window;                  /* sliding window, 0 = none */
    float scale;                 /* softmax scale, usually 1/sqrt(head_dim) */
    int max_q_len, max_ctx_len;  /* upper bounds over the batch, for launch shapes */
    int q_head0, q_per_kv;       /* tensor-parallel slice of the heads; 0, 0: all of them */
} attn_args;

/* DERAS_EINVAL for inconsistent arguments, DERAS_EUNSUPPORTED for a kv_dtype the backend
 * does not keep or a shape its kernels do not take (CPU: head_dim and block_size up to 256).
 * On the CPU a query row's output depends only on its own q row, its sequence's cached
 * keys and values and the kernel path (kernels/cpu/cpu_attention.c), never on the other
 * rows of the batch, the tile it falls in or the thread count. */
int backend_attention(backend_t *b, const attn_args *a);

/* Copy whole cache blocks: for each i, block pairs[2i+1] = block pairs[2i] in `cache`
 * (n_blocks, block_bytes), whatever its element type. pairs (2 n) int32 buffer; a
 * destination never equals any source of the same call. Used for copy-on-write of shared
 * KV blocks. */
int backend_copy_blocks(backend_t *b, void *cache, const int32_t *pairs, int n, size_t block_bytes);

/* SwiGLU: out (n, d_ff) = silu(gu[:, :d_ff]) * gu[:, d_ff:], gu (n, 2 * d_ff). */
int backend_silu_mul(backend_t *b, void *out, const void *gu, int n, int d_ff);

#endif
