/* SPDX-License-Identifier: Apache-2.0 */
/* model.c - a Llama-family model's weights on a backend, and its forward pass.
 *
 * The forward pass reads straight down the layer loop, llama2.c style:
 *
 *   x = embed(tokens)
 *   for each layer:
 *     h = rmsnorm(x)                      (first layer)  or  x += attn_out; h = rmsnorm(x)
 *     qkv = h Wqkv^T (+ bias)             one fused product
 *     rope(q), rope(k); cache <- k, v     through the slot of each token
 *     a = attention(q, cache)             paged, causal
 *     o = a Wo^T
 *     x += o; h = rmsnorm(x)
 *     gu = h Wgu^T; f = silu(g) * u; d = f Wdown^T
 *   (the last layer's residual add is folded into the final norm)
 *   logits = rmsnorm(x[logits_rows]) Wout^T
 *
 * Residual adds are fused into the next norm (backend_add_rmsnorm), so the residual
 * stream x is touched once per sub-block. Each matrix is a weight descriptor
 * (backend_weight), kept in its stored format and, where it can be, in place in the file
 * mapping (engine/model_weights.h); scratch buffers are sized at load from the options.
 *
 * Tensor parallelism (Megatron): a rank holds its query heads' rows of Wq and its KV
 * heads' rows of Wk/Wv (column-parallel), the matching columns of Wo (row-parallel), its
 * rows of Wgate/Wup and columns of Wdown, and its vocabulary rows of the embedding and LM
 * head. The residual stream x and the norms are replicated. Per layer the partial o of
 * the attention output and of the MLP down projection are all-reduced; the embedding
 * lookup gives zero for other ranks' tokens (the table has one extra zero row that
 * those tokens are mapped to) and is all-reduced too; the logits are all-gathered, each
 * rank's block padded to the widest share, and rank 0 puts the columns in place.
 */
#include "model.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "engine/model_weights.h"
#include "kernels/backend.h"

typedef struct layer_weights {
    void *attn_norm;     /* (d_model) */
    backend_weight wqkv; /* (q_dim + 2 kv_dim, d_model) */
    void *bqkv;          /* (q_dim + 2 kv_dim) or NULL */
    backend_weight wo;   /* (d_model, q_dim) */
    void *ffn_norm;      /* (d_model) */
    backend_weight wgu;  /* (2 d_ff, d_model): gate rows then up rows */
    backend_weight wdown; /* (d_model, d_ff) */
    void *k_cache;   /* (n_kv_blocks, n_kv_heads, block_size, head_dim) */
    void *v_cache;
} layer_weights;

struct model {
    model_config cfg;
    model_opts opts;
    backend_t *be;
    tp_shard sh;       /* this rank's share; the whole model when not tensor-parallel */
    bool tp;           /* tp_size > 1: shard + collectives */
    int n_heads, n_kv_heads, d_ff, vocab; /* this rank's counts */
    int q_dim, kv_dim, qkv_dim;            /* this rank's widths */
    backend_weight tok_embd; /* (vocab, d_model), plus a zero row when tensor-parallel */
    void *out_norm;    /* (d_model) */
    backend_weight lm_head;  /* (vocab, d_model); data == tok_embd's when tied */
    float *inv_freq;   /* (head_dim / 2), backend f32 */
    layer_weights *layers;
    weight_store ws;   /* where the weights live; a partial view's is empty */
    int out_block, down_block; /* elements per block of Wo's and Wdown's formats (tp layout) */
    uint64_t kv_bytes;
    bool borrowed;     /* a partial view: weights and inv_freq belong to another model */

    /* per-step scratch on the backend, sized for max_batch_tokens rows */
    void *x;           /* (T, d_model) residual stream */
    void *h;           /* (T, d_model) normed input of a sub-block */
    void *qkv;         /* (T, qkv_dim) */
    void *att;         /* (T, q_dim) */
    void *o;           /* (T, d_model) sub-block output */
    void *gu;          /* (T, 2 d_ff) */
    void *ff;          /* (T, d_ff) */
    void *lg_x;        /* (max_logits, d_model) */
    void *lg;          /* (max_logits, vocab) or, tensor-parallel, (max_logits, v_max) */
    void *lg_all;      /* tensor-parallel: (tp_size, max_logits * v_max) gathered logits */
    float *cos_sin;    /* (T, head_dim) f32 */
    int32_t *d_tokens, *d_positions, *d_slots, *d_q_start, *d_ctx_len, *d_tables, *d_lrows;
    int32_t *d_copies;     /* (max_copies, 2), NULL when max_copies is 0 */

    /* host scratch for the per-step index arrays */
    int32_t *h_positions, *h_slots;
    int32_t *h_ids;    /* tensor-parallel: token ids mapped into this rank's table */
};

const model_config *model_get_config(const model_t *m)
{
    return &m->cfg;
}

const model_opts *model_get_opts(const model_t *m)
{
    return &m->opts;
}

const tp_shard *model_get_shard(const model_t *m)
{
    return &m->sh;
}

uint64_t model_weight_bytes(const model_t *m)
{
    return m->ws.owned_bytes + m->ws.mapped_bytes;
}

uint64_t model_mapped_bytes(const model_t *m)
{
    return m->ws.mapped_bytes;
}

uint64_t model_kv_bytes(const model_t *m)
{
    return m->kv_bytes;
}

static int balloc(model_t *m, void **out, size_t n_elems, size_t elem)
{
    return backend_alloc(m->be, n_elems * elem, out);
}

/* Bytes of one KV cache block of one layer (K or V): block_size tokens of this rank's KV
 * heads in opts.kv_dtype. */
static size_t kv_block_bytes(const model_t *m)
{
    return (size_t)m->opts.block_size * (size_t)m->kv_dim * dtype_block_bytes(m->opts.kv_dtype);
}

/* Bytes of one layer's K (or V) cache. */
static size_t kv_cache_bytes(const model_t *m)
{
    return (size_t)m->opts.n_kv_blocks * kv_block_bytes(m);
}

static int alloc_scratch(model_t *m)
{
    const model_config *c = &m->cfg;
    const size_t T = (size_t)m->opts.max_batch_tokens, L = (size_t)m->opts.max_logits;
    const size_t S = (size_t)m->opts.max_seqs, es = backend_elem_size(m->be);
    int rc;
    const size_t lg_cols = m->tp ? (size_t)m->sh.v_max : (size_t)c->vocab_size;
    if ((rc = balloc(m, &m->x, T * c->d_model, es)) || (rc = balloc(m, &m->h, T * c->d_model, es)) ||
        (rc = balloc(m, &m->qkv, T * m->qkv_dim, es)) || (rc = balloc(m, &m->att, T * m->q_dim, es)) ||
        (rc = balloc(m, &m->o, T * c->d_model, es)) || (rc = balloc(m, &m->gu, T * 2 * m->d_ff, es)) ||
        (rc = balloc(m, &m->ff, T * m->d_ff, es)) || (rc = balloc(m, &m->lg_x, L * c->d_model, es)) ||
        (rc = balloc(m, &m->lg, L * lg_cols, es)) ||
        (m->tp && (rc = balloc(m, &m->lg_all, (size_t)m->sh.size * L * lg_cols, es))) ||
        (rc = balloc(m, (void **)&m->cos_sin, T * c->head_dim, sizeof(float))) ||
        (rc = balloc(m, (void **)&m->d_tokens, T, sizeof(int32_t))) ||
        (rc = balloc(m, (void **)&m->d_positions, T, sizeof(int32_t))) ||
        (rc = balloc(m, (void **)&m->d_slots, T, sizeof(int32_t))) ||
        (rc = balloc(m, (void **)&m->d_q_start, S + 1, sizeof(int32_t))) ||
        (rc = balloc(m, (void **)&m->d_ctx_len, S, sizeof(int32_t))) ||
        (rc = balloc(m, (void **)&m->d_tables, S * m->opts.max_blocks_per_seq, sizeof(int32_t))) ||
        (rc = balloc(m, (void **)&m->d_lrows, L, sizeof(int32_t))) ||
        (m->opts.max_copies > 0 &&
         (rc = balloc(m, (void **)&m->d_copies, 2 * (size_t)m->opts.max_copies, sizeof(int32_t)))))
        return rc;
    m->h_positions = malloc(T * sizeof(int32_t));
    m->h_slots = malloc(T * sizeof(int32_t));
    m->h_ids = malloc(T * sizeof(int32_t));
    if (!m->h_positions || !m->h_slots || !m->h_ids)
        return deras_fail(DERAS_ENOMEM, "model: out of memory for step scratch");
    return DERAS_OK;
}

/* The backend's matmul scratch for this model's widest product and biggest step. */
static int reserve_matmul(model_t *m)
{
    const model_config *c = &m->cfg;
    int cols = c->d_model > m->d_ff ? c->d_model : m->d_ff;
    cols = cols > m->q_dim ? cols : m->q_dim;
    const int rows = m->opts.max_batch_tokens > m->opts.max_logits ? m->opts.max_batch_tokens
                                                                     : m->opts.max_logits;
    return backend_reserve_matmul(m->be, rows, cols);
}

static int check_opts(const model_opts *o, const backend_t *b)
{
    if (o->max_batch_tokens <= 0 || o->max_seqs <= 0 || o->max_logits <= 0 || o->block_size <= 0 ||
        o->n_kv_blocks <= 0 || o->max_blocks_per_seq <= 0 || o->max_copies < 0)
        return deras_fail(DERAS_EINVAL,
                          "model options: every size must be positive (tokens %d, seqs %d, "
                          "logits %d, block %d, blocks %d, blocks/seq %d)",
                          o->max_batch_tokens, o->max_seqs, o->max_logits, o->block_size,
                          o->n_kv_blocks, o->max_blocks_per_seq);
    if (!backend_keeps_kv(b, o->kv_dtype))
        return deras_fail(DERAS_EUNSUPPORTED, "model options: backend %s keeps no KV cache of "
                          "dtype %s", backend_name(b), dtype_name(o->kv_dtype));
    if (o->tp_size > 1 && !o->comm)
        return deras_fail(DERAS_EINVAL, "model options: tp_size %d without a communicator",
                          o->tp_size);
    if (o->tp_size > 1 && (comm_size(o->comm) != o->tp_size || comm_rank(o->comm) != o->tp_rank))
        return deras_fail(DERAS_EINVAL, "model options: rank %d of %d, the communicator is rank "
                          "%d of %d", o->tp_rank, o->tp_size, comm_rank(o->comm),
                          comm_size(o->comm));
    return DERAS_OK;
}

int model_new(const checkpoint_t *ck, backend_t *b, const model_opts *opts, model_t **out)
{
    if (!ck || !b || !opts || !out)
        return deras_fail(DERAS_EINVAL, "model_new: NULL argument");
    *out = NULL;
    int rc = check_opts(opts, b);
    if (rc)
        return rc;
    model_t *m = calloc(1, sizeof *m);
    if (!m)
        return deras_fail(DERAS_ENOMEM, "model_new: out of memory");
    m->cfg = *checkpoint_config(ck);
    m->opts = *opts;
    m->be = b;
    const model_config *c = &m->cfg;
    const int hd = c->head_dim;
    m->tp = opts->tp_size > 1;
    /* host staging: rows of the widest tensor at least */
    size_t widest = (size_t)(c->d_model > c->d_ff ? c->d_model : c->d_ff);
    widest = widest > (size_t)c->n_heads * hd ? widest : (size_t)c->n_heads * hd;
    if ((opts->convert_weights && (rc = ws_check_format(b, opts->weight_dtype))) ||
        (rc = ws_init(&m->ws, b, opts->convert_weights, opts->weight_dtype, 0, widest)))
        goto fail;
    /* the row-parallel weights split at their blocks: the largest block any layer keeps */
    m->out_block = m->down_block = 1;
    for (int l = 0; l < c->n_layers; l++) {
        int bo = dtype_block_elems(ws_kept_dtype(&m->ws, checkpoint_dtype(ck, CKPT_ATTN_OUT, l)));
        int bd = dtype_block_elems(ws_kept_dtype(&m->ws, checkpoint_dtype(ck, CKPT_FFN_DOWN, l)));
        m->out_block = bo > m->out_block ? bo : m->out_block;
        m->down_block = bd > m->down_block ? bd : m->down_block;
    }
    if ((rc = tp_shard_of_blocks(c, m->tp ? opts->tp_rank : 0, m->tp ? opts->tp_size : 1,
                                 m->tp ? m->out_block : 1, m->tp ? m->down_block : 1, &m->sh)))
        goto fail;
    if (m->tp && !strcmp(comm_kind(opts->comm), "shm") && strcmp(backend_name(b), "cpu")) {
        rc = deras_fail(DERAS_EUNSUPPORTED, "the shared-memory communicator needs the cpu backend, "
                        "not %s", backend_name(b));
        goto fail;
    }
    const tp_shard *sh = &m->sh;
    m->n_heads = sh->h1 - sh->h0;
    m->n_kv_heads = sh->kv1 - sh->kv0;
    m->d_ff = sh->f1 - sh->f0;
    m->vocab = sh->v1 - sh->v0;
    m->q_dim = m->n_heads * hd;
    m->kv_dim = m->n_kv_heads * hd;
    m->qkv_dim = m->q_dim + 2 * m->kv_dim;
    if (m->tp) {
        char desc[192];
        tp_shard_describe(sh, c, desc, sizeof desc);
        log_info("tensor parallel %s", desc);
    }

    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) {
        rc = deras_fail(DERAS_ENOMEM, "model_new: out of memory");
        goto fail;
    }
    weight_store *ws = &m->ws;
    const int total = c->n_layers + 2;
    /* vocab-parallel: this rank's rows, then one zero row for every other rank's token */
    const ws_slice embd = {CKPT_TOK_EMBD, sh->v0, m->vocab, 0, -1};
    const ws_slice out_norm = {CKPT_OUTPUT_NORM, 0, -1, 0, -1};
    if ((rc = ws_matrix(ws, &m->tok_embd, &embd, 1, 0, ck, m->tp ? 1 : 0)) ||
        (rc = ws_vectors(ws, &m->out_norm, &out_norm, 1, 0, ck)))
        goto fail;
    if (opts->progress)
        opts->progress(opts->progress_ctx, 1, total);
    const ws_slice head = {CKPT_OUTPUT, sh->v0, m->vocab, 0, -1};
    if (c->tied_embeddings)
        m->lm_head = ws_first_rows(&m->tok_embd, m->vocab);
    else if ((rc = ws_matrix(ws, &m->lm_head, &head, 1, 0, ck, 0)))
        goto fail;
    if ((rc = ws_pack(ws, &m->lm_head))) /* the embedding lookups keep the stored rows */
        goto fail;
    if (opts->progress)
        opts->progress(opts->progress_ctx, 2, total);

    const int64_t q0 = (int64_t)sh->h0 * hd, nq = m->q_dim;
    const int64_t k0 = (int64_t)sh->kv0 * hd, nk = m->kv_dim;
    const ws_slice qkv[] = {{CKPT_ATTN_Q, q0, nq, 0, -1}, {CKPT_ATTN_K, k0, nk, 0, -1},
                            {CKPT_ATTN_V, k0, nk, 0, -1}};
    const ws_slice qkv_bias[] = {{CKPT_ATTN_Q_BIAS, 0, 1, q0, nq},
                                 {CKPT_ATTN_K_BIAS, 0, 1, k0, nk},
                                 {CKPT_ATTN_V_BIAS, 0, 1, k0, nk}};
    const ws_slice wo = {CKPT_ATTN_OUT, 0, -1, q0, nq};
    const ws_slice gu[] = {{CKPT_FFN_GATE, sh->f0, m->d_ff, 0, -1},
                           {CKPT_FFN_UP, sh->f0, m->d_ff, 0, -1}};
    const ws_slice down = {CKPT_FFN_DOWN, 0, -1, sh->f0, m->d_ff};
    const ws_slice attn_norm = {CKPT_ATTN_NORM, 0, -1, 0, -1};
    const ws_slice ffn_norm = {CKPT_FFN_NORM, 0, -1, 0, -1};
    const size_t cache_bytes = kv_cache_bytes(m);
    for (int l = 0; l < c->n_layers; l++) {
        layer_weights *L = &m->layers[l];
        if ((rc = ws_vectors(ws, &L->attn_norm, &attn_norm, 1, l, ck)) ||
            (rc = ws_matrix(ws, &L->wqkv, qkv, 3, l, ck, 0)) ||
            (c->qkv_bias && (rc = ws_vectors(ws, &L->bqkv, qkv_bias, 3, l, ck))) ||
            (rc = ws_matrix(ws, &L->wo, &wo, 1, l, ck, 0)) ||
            (rc = ws_vectors(ws, &L->ffn_norm, &ffn_norm, 1, l, ck)) ||
            (rc = ws_matrix(ws, &L->wgu, gu, 2, l, ck, 0)) ||
            (rc = ws_matrix(ws, &L->wdown, &down, 1, l, ck, 0)) ||
            (rc = ws_pack(ws, &L->wqkv)) || (rc = ws_pack(ws, &L->wo)) ||
            (rc = ws_pack(ws, &L->wgu)) || (rc = ws_pack(ws, &L->wdown)))
            goto fail;
        if ((rc = balloc(m, &L->k_cache, cache_bytes, 1)) ||
            (rc = balloc(m, &L->v_cache, cache_bytes, 1)))
            goto fail;
        m->kv_bytes += 2 * cache_bytes;
        if (opts->progress)
            opts->progress(opts->progress_ctx, l + 3, total);
    }

    float inv_freq[MODEL_MAX_HEAD_DIM / 2];
    const size_t half = (size_t)c->head_dim / 2;
    model_config_rope_inv_freq(c, inv_freq);
    if ((rc = balloc(m, (void **)&m->inv_freq, half, sizeof(float))) ||
        (rc = backend_upload(b, m->inv_freq, inv_freq, half * sizeof(float))) ||
        (rc = alloc_scratch(m)) || (rc = reserve_matmul(m)))
        goto fail;
    ws_done_loading(ws);
    *out = m;
    return DERAS_OK;

fail:
    model_destroy(&m);
    return deras_fail_ctx(rc, "loading model from %s: ", checkpoint_path(ck));
}

int model_new_partial(const model_t *base, int n_layers, const model_opts *opts, model_t **out)
{
    if (!base || !opts || !out)
        return deras_fail(DERAS_EINVAL, "model_new_partial: NULL argument");
    *out = NULL;
    if (n_layers < 1 || n_layers >= base->cfg.n_layers)
        return deras_fail(DERAS_EINVAL, "self-draft layers must be in [1, %d] (the model has %d "
                          "layers), got %d", base->cfg.n_layers - 1, base->cfg.n_layers, n_layers);
    if (base->tp)
        return deras_fail(DERAS_EUNSUPPORTED, "a self-draft of a tensor-parallel shard is not "
                          "supported (its passes would need the other ranks)");
    int rc = check_opts(opts, base->be);
    if (rc)
        return rc;
    model_t *m = calloc(1, sizeof *m);
    if (!m)
        return deras_fail(DERAS_ENOMEM, "model_new_partial: out of memory");
    *m = (model_t){.cfg = base->cfg, .opts = *opts, .be = base->be, .sh = base->sh,
                   .n_heads = base->n_heads, .n_kv_heads = base->n_kv_heads,
                   .d_ff = base->d_ff, .vocab = base->vocab, .q_dim = base->q_dim,
                   .kv_dim = base->kv_dim, .qkv_dim = base->qkv_dim, .tok_embd = base->tok_embd,
                   .out_norm = base->out_norm, .lm_head = base->lm_head,
                   .inv_freq = base->inv_freq, .borrowed = true};
    m->cfg.n_layers = n_layers;
    m->layers = calloc((size_t)n_layers, sizeof *m->layers);
    if (!m->layers) {
        rc = deras_fail(DERAS_ENOMEM, "model_new_partial: out of memory");
        goto fail;
    }
    const size_t cache_bytes = kv_cache_bytes(m);
    for (int l = 0; l < n_layers; l++) {
        layer_weights *L = &m->layers[l];
        *L = base->layers[l];
        L->k_cache = L->v_cache = NULL;
        if ((rc = balloc(m, &L->k_cache, cache_bytes, 1)) ||
            (rc = balloc(m, &L->v_cache, cache_bytes, 1)))
            goto fail;
        m->kv_bytes += 2 * cache_bytes;
    }
    if ((rc = alloc_scratch(m)) || (rc = reserve_matmul(m)))
        goto fail;
    *out = m;
    return DERAS_OK;
fail:
    model_destroy(&m);
    return rc;
}

void model_destroy(model_t **mp)
{
    if (!mp || !*mp)
        return;
    model_t *m = *mp;
    backend_t *b = m->be;
    if (m->layers) {
        for (int l = 0; l < m->cfg.n_layers; l++) {
            backend_free(b, m->layers[l].k_cache);
            backend_free(b, m->layers[l].v_cache);
        }
        free(m->layers);
    }
    if (!m->borrowed) {
        ws_release(&m->ws); /* the weights, the checkpoint reference */
        backend_free(b, m->inv_freq);
    }
    void *bufs[] = {m->x, m->h, m->qkv, m->att, m->o, m->gu, m->ff, m->lg_x, m->lg, m->cos_sin,
                    m->d_tokens, m->d_positions, m->d_slots, m->d_q_start, m->d_ctx_len,
                    m->d_tables, m->d_lrows, m->d_copies, m->lg_all};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        backend_free(b, bufs[i]);
    free(m->h_positions);
    free(m->h_slots);
    free(m->h_ids);
    free(m);
    *mp = NULL;
}

/* Check the batch and derive positions and cache slots (host arrays). O(n_tokens +
 * n_seqs); also returns the longest query span and context for launch shapes. */
static int prepare_batch(model_t *m, const model_batch *bt, int *max_q, int *max_ctx)
{
    const model_opts *o = &m->opts;
    if (bt->n_tokens <= 0 || bt->n_tokens > o->max_batch_tokens || bt->n_seqs <= 0 ||
        bt->n_seqs > o->max_seqs || bt->n_logits < 0 || bt->n_logits > o->max_logits)
        return deras_fail(DERAS_EINVAL,
                          "forward: batch of %d tokens, %d sequences, %d logit rows exceeds "
                          "the model's limits (%d, %d, %d)",
                          bt->n_tokens, bt->n_seqs, bt->n_logits, o->max_batch_tokens, o->max_seqs,
                          o->max_logits);
    if (bt->q_start[0] != 0 || bt->q_start[bt->n_seqs] != bt->n_tokens)
        return deras_fail(DERAS_EINVAL, "forward: q_start must run from 0 to n_tokens");
    *max_q = 0;
    *max_ctx = 0;
    const int bs = o->block_size;
    for (int s = 0; s < bt->n_seqs; s++) {
        int n_q = bt->q_start[s + 1] - bt->q_start[s];
        int ctx = bt->ctx_len[s];
        if (n_q <= 0 || ctx < n_q || ctx > o->max_blocks_per_seq * bs)
            return deras_fail(DERAS_EINVAL,
                              "forward: sequence %d has %d new tokens and context %d (max %d)", s,
                              n_q, ctx, o->max_blocks_per_seq * bs);
        const int32_t *table = bt->block_tables + (size_t)s * o->max_blocks_per_seq;
        for (int blk = 0; blk <= (ctx - 1) / bs; blk++)
            if (table[blk] < 0 || table[blk] >= o->n_kv_blocks)
                return deras_fail(DERAS_ERANGE,
                                  "forward: sequence %d block %d maps to block id %d outside "
                                  "[0, %d)",
                                  s, blk, table[blk], o->n_kv_blocks);
        for (int i = 0; i < n_q; i++) {
            int row = bt->q_start[s] + i, pos = ctx - n_q + i;
            m->h_positions[row] = pos;
            m->h_slots[row] = table[pos / bs] * bs + pos % bs;
        }
        *max_q = n_q > *max_q ? n_q : *max_q;
        *max_ctx = ctx > *max_ctx ? ctx : *max_ctx;
    }
    for (int i = 0; i < bt->n_tokens; i++)
        if (bt->tokens[i] < 0 || bt->tokens[i] >= m->cfg.vocab_size)
            return deras_fail(DERAS_ERANGE, "forward: token id %d at row %d outside [0, %d)",
                              bt->tokens[i], i, m->cfg.vocab_size);
    for (int i = 0; i < bt->n_logits; i++)
        if (bt->logits_rows[i] < 0 || bt->logits_rows[i] >= bt->n_tokens)
            return deras_fail(DERAS_ERANGE, "forward: logits row %d outside the batch",
                              bt->logits_rows[i]);
    if (bt->n_copies < 0 || bt->n_copies > o->max_copies || (bt->n_copies && !bt->copies))
        return deras_fail(DERAS_EINVAL, "forward: %d block copies (max %d)", bt->n_copies,
                          o->max_copies);
    for (int i = 0; i < 2 * bt->n_copies; i++)
        if (bt->copies[i] < 0 || bt->copies[i] >= o->n_kv_blocks)
            return deras_fail(DERAS_ERANGE, "forward: copy block id %d outside [0, %d)",
                              bt->copies[i], o->n_kv_blocks);
    for (int i = 0; i < bt->n_copies; i++)
        for (int j = 0; j < bt->n_copies; j++)
            if (bt->copies[2 * i + 1] == bt->copies[2 * j])
                return deras_fail(DERAS_EINVAL, "forward: copy destination %d is also a source",
                                  bt->copies[2 * i + 1]);
    return DERAS_OK;
}

static int upload_batch(model_t *m, const model_batch *bt)
{
    backend_t *b = m->be;
    const size_t i4 = sizeof(int32_t);
    int rc;
    const int32_t *ids = bt->tokens;
    if (m->tp) { /* other ranks' tokens read the zero row at index m->vocab */
        for (int i = 0; i < bt->n_tokens; i++) {
            int32_t t = bt->tokens[i];
            m->h_ids[i] = t >= m->sh.v0 && t < m->sh.v1 ? t - m->sh.v0 : m->vocab;
        }
        ids = m->h_ids;
    }
    if ((rc = backend_upload(b, m->d_tokens, ids, (size_t)bt->n_tokens * i4)) ||
        (rc = backend_upload(b, m->d_positions, m->h_positions, (size_t)bt->n_tokens * i4)) ||
        (rc = backend_upload(b, m->d_slots, m->h_slots, (size_t)bt->n_tokens * i4)) ||
        (rc = backend_upload(b, m->d_q_start, bt->q_start, (size_t)(bt->n_seqs + 1) * i4)) ||
        (rc = backend_upload(b, m->d_ctx_len, bt->ctx_len, (size_t)bt->n_seqs * i4)) ||
        (rc = backend_upload(b, m->d_tables, bt->block_tables,
                             (size_t)bt->n_seqs * m->opts.max_blocks_per_seq * i4)) ||
        (bt->n_logits &&
         (rc = backend_upload(b, m->d_lrows, bt->logits_rows, (size_t)bt->n_logits * i4))) ||
        (bt->n_copies &&
         (rc = backend_upload(b, m->d_copies, bt->copies, 2 * (size_t)bt->n_copies * i4))))
        return rc;
    return DERAS_OK;
}

/* Tensor-parallel: buf (n) = the sum of every rank's buf. Nothing when not parallel. */
static int all_reduce(model_t *m, void *buf, size_t n)
{
    if (!m->tp)
        return DERAS_OK;
    int rc = backend_sync(m->be);
    return rc ? rc : comm_all_reduce(m->opts.comm, buf, n);
}

/* Tensor-parallel logits: gather every rank's (NL, its share) block, padded to v_max, and
 * on rank 0 put each block's columns in place in logits (NL, vocab). */
static int gather_logits(model_t *m, int NL, float *logits)
{
    const model_config *c = &m->cfg;
    const size_t block = (size_t)NL * m->sh.v_max, es = backend_elem_size(m->be);
    int rc = backend_sync(m->be);
    if (rc || (rc = comm_all_gather(m->opts.comm, m->lg, block, m->lg_all)) || m->sh.rank != 0)
        return rc;
    for (int r = 0; r < m->sh.size; r++) {
        tp_shard o;
        if ((rc = tp_shard_of_blocks(c, r, m->sh.size, m->out_block, m->down_block, &o)))
            return rc;
        const int w = o.v1 - o.v0;
        const char *src = (const char *)m->lg_all + (size_t)r * block * es;
        for (int i = 0; i < NL; i++)
            if ((rc = backend_download_f32(m->be, logits + (size_t)i * c->vocab_size + o.v0,
                                           src + (size_t)i * w * es, (size_t)w)))
                return rc;
    }
    return DERAS_OK;
}

int model_forward(model_t *m, const model_batch *bt, float *logits)
{
    if (!m || !bt || (bt->n_logits > 0 && !logits && m->sh.rank == 0))
        return deras_fail(DERAS_EINVAL, "model_forward: NULL argument");
    const model_config *c = &m->cfg;
    backend_t *b = m->be;
    const int T = bt->n_tokens, D = c->d_model, hd = c->head_dim;
    const size_t es = backend_elem_size(b);
    int max_q = 0, max_ctx = 0, rc;
    if ((rc = prepare_batch(m, bt, &max_q, &max_ctx)) || (rc = upload_batch(m, bt)))
        return rc;

    /* copy-on-write: shared blocks are copied in every layer before anything is written */
    const size_t block_bytes = kv_block_bytes(m);
    for (int l = 0; l < c->n_layers && bt->n_copies; l++)
        if ((rc = backend_copy_blocks(b, m->layers[l].k_cache, m->d_copies, bt->n_copies, block_bytes)) ||
            (rc = backend_copy_blocks(b, m->layers[l].v_cache, m->d_copies, bt->n_copies, block_bytes)))
            return rc;

    /* x (T, D) = embeddings; cos_sin (T, hd) for this step's positions */
    if ((rc = backend_embed(b, m->x, &m->tok_embd, m->d_tokens, T)) ||
        (rc = all_reduce(m, m->x, (size_t)T * D)) ||
        (rc = backend_rope_table(b, m->cos_sin, m->d_positions, m->inv_freq, T, hd)))
        return rc;

    char *qkv = m->qkv;
    attn_args aa = {
        .out = m->att, .q = qkv, .q_stride = m->qkv_dim,
        .q_start = m->d_q_start, .ctx_len = m->d_ctx_len, .block_tables = m->d_tables,
        .n_seqs = bt->n_seqs, .n_tokens = T, .max_blocks = m->opts.max_blocks_per_seq,
        .n_heads = m->n_heads, .n_kv_heads = m->n_kv_heads, .head_dim = hd,
        .block_size = m->opts.block_size, .window = c->sliding_window,
        .scale = 1.0f / sqrtf((float)hd), .max_q_len = max_q, .max_ctx_len = max_ctx,
        .q_head0 = m->tp ? m->sh.h0 : 0, .q_per_kv = m->tp ? c->n_heads / c->n_kv_heads : 0,
        .kv_dtype = m->opts.kv_dtype,
    };
    for (int l = 0; l < c->n_layers; l++) {
        layer_weights *L = &m->layers[l];
        /* h (T, D) = norm(x), adding the previous layer's MLP output into x first */
        rc = l == 0 ? backend_rmsnorm(b, m->h, m->x, L->attn_norm, T, D, c->norm_eps)
                    : backend_add_rmsnorm(b, m->h, m->x, m->o, L->attn_norm, T, D, c->norm_eps);
        if (rc)
            return rc;
        /* qkv (T, q_dim + 2 kv_dim) */
        if ((rc = backend_matmul(b, m->qkv, m->h, &L->wqkv, L->bqkv, T)))
            return rc;
        void *q = qkv, *k = qkv + (size_t)m->q_dim * es, *v = qkv + (size_t)(m->q_dim + m->kv_dim) * es;
        if ((rc = backend_rope(b, q, m->cos_sin, T, m->n_heads, hd, m->qkv_dim)) ||
            (rc = backend_rope(b, k, m->cos_sin, T, m->n_kv_heads, hd, m->qkv_dim)) ||
            (rc = backend_kv_write(b, L->k_cache, L->v_cache, k, v, m->qkv_dim, m->d_slots, T,
                                   m->n_kv_heads, hd, m->opts.block_size, m->opts.kv_dtype)))
            return rc;
        /* att (T, q_dim) */
        aa.k_cache = L->k_cache;
        aa.v_cache = L->v_cache;
        if ((rc = backend_attention(b, &aa)))
            return rc;
        /* o (T, D) = att Wo^T (summed over ranks); x += o; h = norm(x) */
        if ((rc = backend_matmul(b, m->o, m->att, &L->wo, NULL, T)) ||
            (rc = all_reduce(m, m->o, (size_t)T * D)) ||
            (rc = backend_add_rmsnorm(b, m->h, m->x, m->o, L->ffn_norm, T, D, c->norm_eps)))
            return rc;
        /* gu (T, 2 d_ff); ff (T, d_ff); o (T, D) = ff Wdown^T (summed over ranks) */
        if ((rc = backend_matmul(b, m->gu, m->h, &L->wgu, NULL, T)) ||
            (rc = backend_silu_mul(b, m->ff, m->gu, T, m->d_ff)) ||
            (rc = backend_matmul(b, m->o, m->ff, &L->wdown, NULL, T)) ||
            (rc = all_reduce(m, m->o, (size_t)T * D)))
            return rc;
    }
    if (bt->n_logits == 0)
        return backend_sync(b);

    /* logits (n_logits, vocab) from the rows asked for: x += o only on those rows */
    const int NL = bt->n_logits;
    if ((rc = backend_gather_rows(b, m->lg_x, m->x, m->d_lrows, NL, D)) ||
        (rc = backend_gather_rows(b, m->h, m->o, m->d_lrows, NL, D)) ||
        (rc = backend_add_rmsnorm(b, m->lg_x, m->lg_x, m->h, m->out_norm, NL, D, c->norm_eps)) ||
        (rc = backend_matmul(b, m->lg, m->lg_x, &m->lm_head, NULL, NL)))
        return rc;
    rc = m->tp ? gather_logits(m, NL, logits)
               : backend_download_f32(b, logits, m->lg, (size_t)NL * c->vocab_size);
    return rc ? rc : backend_sync(b);
}
