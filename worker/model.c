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
 * stream x is touched once per sub-block. Weights live in a single allocation per tensor
 * kind; scratch buffers are sized at load from the options.
 */
#include "model.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/status.h"

typedef struct layer_weights {
    void *attn_norm; /* (d_model) */
    void *wqkv;      /* (q_dim + 2 kv_dim, d_model) */
    void *bqkv;      /* (q_dim + 2 kv_dim) or NULL */
    void *wo;        /* (d_model, q_dim) */
    void *ffn_norm;  /* (d_model) */
    void *wgu;       /* (2 d_ff, d_model): gate rows then up rows */
    void *wdown;     /* (d_model, d_ff) */
    void *k_cache;   /* (n_kv_blocks, n_kv_heads, block_size, head_dim) */
    void *v_cache;
} layer_weights;

struct model {
    model_config cfg;
    model_opts opts;
    backend_t *be;
    int q_dim, kv_dim, qkv_dim;
    void *tok_embd;    /* (vocab, d_model) */
    void *out_norm;    /* (d_model) */
    void *lm_head;     /* (vocab, d_model); == tok_embd when tied */
    float *inv_freq;   /* (head_dim / 2), backend f32 */
    layer_weights *layers;
    uint64_t weight_bytes, kv_bytes;
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
    void *lg;          /* (max_logits, vocab) */
    float *cos_sin;    /* (T, head_dim) f32 */
    int32_t *d_tokens, *d_positions, *d_slots, *d_q_start, *d_ctx_len, *d_tables, *d_lrows;
    int32_t *d_copies;     /* (max_copies, 2), NULL when max_copies is 0 */

    /* host scratch for the per-step index arrays */
    int32_t *h_positions, *h_slots;
};

const model_config *model_get_config(const model_t *m)
{
    return &m->cfg;
}

const model_opts *model_get_opts(const model_t *m)
{
    return &m->opts;
}

uint64_t model_weight_bytes(const model_t *m)
{
    return m->weight_bytes;
}

uint64_t model_kv_bytes(const model_t *m)
{
    return m->kv_bytes;
}

static int balloc(model_t *m, void **out, size_t n_elems, size_t elem)
{
    return backend_alloc(m->be, n_elems * elem, out);
}

/* Read rows [row0, row0 + n_rows) of a checkpoint tensor into a host staging buffer, then
 * upload them at element offset `dst_off` of `dst`. */
static int load_rows(model_t *m, void *dst, size_t dst_off, enum ckpt_tensor t, int layer,
                     const checkpoint_t *ck, float *stage, int64_t row0, int64_t n_rows,
                     int64_t cols)
{
    int rc = checkpoint_read_rows(ck, t, layer, row0, n_rows, stage);
    if (rc)
        return rc;
    char *d = (char *)dst + dst_off * backend_elem_size(m->be);
    return backend_upload_f32(m->be, d, stage, (size_t)(n_rows * cols));
}

/* Allocate and fill a whole tensor. */
static int load_tensor(model_t *m, void **dst, enum ckpt_tensor t, int layer,
                       const checkpoint_t *ck, float *stage)
{
    int64_t rows, cols;
    int rc = checkpoint_shape(ck, t, layer, &rows, &cols);
    if (rc)
        return rc;
    rc = balloc(m, dst, (size_t)(rows * cols), backend_elem_size(m->be));
    if (rc)
        return rc;
    m->weight_bytes += (uint64_t)rows * cols * backend_elem_size(m->be);
    return load_rows(m, *dst, 0, t, layer, ck, stage, 0, rows, cols);
}

/* Allocate one buffer holding the given tensors one after another: the rows of matrices
 * with equal column counts (a fused weight), or vectors end to end (a fused bias). */
static int load_fused(model_t *m, void **dst, const enum ckpt_tensor *parts, int n_parts, int layer,
                      const checkpoint_t *ck, float *stage)
{
    int64_t rows[4], cols[4], total = 0;
    for (int i = 0; i < n_parts; i++) {
        int rc = checkpoint_shape(ck, parts[i], layer, &rows[i], &cols[i]);
        if (rc)
            return rc;
        if (rows[i] > 1 && cols[i] != cols[0])
            return deras_fail(DERAS_EINTERNAL, "fusing layer %d tensors of %lld and %lld columns",
                              layer, (long long)cols[0], (long long)cols[i]);
        total += rows[i] * cols[i];
    }
    int rc = balloc(m, dst, (size_t)total, backend_elem_size(m->be));
    if (rc)
        return rc;
    m->weight_bytes += (uint64_t)total * backend_elem_size(m->be);
    int64_t off = 0;
    for (int i = 0; i < n_parts; i++) {
        rc = load_rows(m, *dst, (size_t)off, parts[i], layer, ck, stage, 0, rows[i], cols[i]);
        if (rc)
            return rc;
        off += rows[i] * cols[i];
    }
    return DERAS_OK;
}

static int alloc_scratch(model_t *m)
{
    const model_config *c = &m->cfg;
    const size_t T = (size_t)m->opts.max_batch_tokens, L = (size_t)m->opts.max_logits;
    const size_t S = (size_t)m->opts.max_seqs, es = backend_elem_size(m->be);
    int rc;
    if ((rc = balloc(m, &m->x, T * c->d_model, es)) || (rc = balloc(m, &m->h, T * c->d_model, es)) ||
        (rc = balloc(m, &m->qkv, T * m->qkv_dim, es)) || (rc = balloc(m, &m->att, T * m->q_dim, es)) ||
        (rc = balloc(m, &m->o, T * c->d_model, es)) || (rc = balloc(m, &m->gu, T * 2 * c->d_ff, es)) ||
        (rc = balloc(m, &m->ff, T * c->d_ff, es)) || (rc = balloc(m, &m->lg_x, L * c->d_model, es)) ||
        (rc = balloc(m, &m->lg, L * c->vocab_size, es)) ||
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
    if (!m->h_positions || !m->h_slots)
        return deras_fail(DERAS_ENOMEM, "model: out of memory for step scratch");
    return DERAS_OK;
}

static int check_opts(const model_opts *o)
{
    if (o->max_batch_tokens <= 0 || o->max_seqs <= 0 || o->max_logits <= 0 || o->block_size <= 0 ||
        o->n_kv_blocks <= 0 || o->max_blocks_per_seq <= 0 || o->max_copies < 0)
        return deras_fail(DERAS_EINVAL,
                          "model options: every size must be positive (tokens %d, seqs %d, "
                          "logits %d, block %d, blocks %d, blocks/seq %d)",
                          o->max_batch_tokens, o->max_seqs, o->max_logits, o->block_size,
                          o->n_kv_blocks, o->max_blocks_per_seq);
    return DERAS_OK;
}

int model_new(const checkpoint_t *ck, backend_t *b, const model_opts *opts, model_t **out)
{
    if (!ck || !b || !opts || !out)
        return deras_fail(DERAS_EINVAL, "model_new: NULL argument");
    *out = NULL;
    int rc = check_opts(opts);
    if (rc)
        return rc;
    model_t *m = calloc(1, sizeof *m);
    float *stage = NULL;
    if (!m)
        return deras_fail(DERAS_ENOMEM, "model_new: out of memory");
    m->cfg = *checkpoint_config(ck);
    m->opts = *opts;
    m->be = b;
    const model_config *c = &m->cfg;
    m->q_dim = c->n_heads * c->head_dim;
    m->kv_dim = c->n_kv_heads * c->head_dim;
    m->qkv_dim = m->q_dim + 2 * m->kv_dim;

    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    /* Staging holds the largest tensor as f32: the embedding or an MLP matrix. */
    size_t stage_elems = (size_t)c->vocab_size * c->d_model;
    size_t mlp = (size_t)c->d_ff * c->d_model, qkv = (size_t)m->qkv_dim * c->d_model;
    stage_elems = stage_elems > mlp ? stage_elems : mlp;
    stage_elems = stage_elems > qkv ? stage_elems : qkv;
    stage = malloc(stage_elems * sizeof(float));
    if (!m->layers || !stage) {
        rc = deras_fail(DERAS_ENOMEM, "model_new: out of memory for staging");
        goto fail;
    }

    const int total = c->n_layers + 2;
    if ((rc = load_tensor(m, &m->tok_embd, CKPT_TOK_EMBD, 0, ck, stage)) ||
        (rc = load_tensor(m, &m->out_norm, CKPT_OUTPUT_NORM, 0, ck, stage)))
        goto fail;
    if (opts->progress)
        opts->progress(opts->progress_ctx, 1, total);
    if (c->tied_embeddings)
        m->lm_head = m->tok_embd;
    else if ((rc = load_tensor(m, &m->lm_head, CKPT_OUTPUT, 0, ck, stage)))
        goto fail;
    if (opts->progress)
        opts->progress(opts->progress_ctx, 2, total);

    static const enum ckpt_tensor qkv_parts[] = {CKPT_ATTN_Q, CKPT_ATTN_K, CKPT_ATTN_V};
    static const enum ckpt_tensor qkv_bias_parts[] = {CKPT_ATTN_Q_BIAS, CKPT_ATTN_K_BIAS,
                                                      CKPT_ATTN_V_BIAS};
    static const enum ckpt_tensor gu_parts[] = {CKPT_FFN_GATE, CKPT_FFN_UP};
    size_t es = backend_elem_size(b);
    for (int l = 0; l < c->n_layers; l++) {
        layer_weights *L = &m->layers[l];
        if ((rc = load_tensor(m, &L->attn_norm, CKPT_ATTN_NORM, l, ck, stage)) ||
            (rc = load_fused(m, &L->wqkv, qkv_parts, 3, l, ck, stage)) ||
            (c->qkv_bias && (rc = load_fused(m, &L->bqkv, qkv_bias_parts, 3, l, ck, stage))) ||
            (rc = load_tensor(m, &L->wo, CKPT_ATTN_OUT, l, ck, stage)) ||
            (rc = load_tensor(m, &L->ffn_norm, CKPT_FFN_NORM, l, ck, stage)) ||
            (rc = load_fused(m, &L->wgu, gu_parts, 2, l, ck, stage)) ||
            (rc = load_tensor(m, &L->wdown, CKPT_FFN_DOWN, l, ck, stage)))
            goto fail;
        size_t cache_elems = (size_t)opts->n_kv_blocks * opts->block_size * m->kv_dim;
        if ((rc = balloc(m, &L->k_cache, cache_elems, es)) ||
            (rc = balloc(m, &L->v_cache, cache_elems, es)))
            goto fail;
        m->kv_bytes += 2 * cache_elems * es;
        if (opts->progress)
            opts->progress(opts->progress_ctx, l + 3, total);
    }

    int half = c->head_dim / 2;
    if ((rc = balloc(m, (void **)&m->inv_freq, (size_t)half, sizeof(float))))
        goto fail;
    model_config_rope_inv_freq(c, stage);
    if ((rc = backend_upload(b, m->inv_freq, stage, (size_t)half * sizeof(float))))
        goto fail;
    if ((rc = alloc_scratch(m)))
        goto fail;
    free(stage);
    *out = m;
    return DERAS_OK;

fail:
    free(stage);
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
    int rc = check_opts(opts);
    if (rc)
        return rc;
    model_t *m = calloc(1, sizeof *m);
    if (!m)
        return deras_fail(DERAS_ENOMEM, "model_new_partial: out of memory");
    *m = (model_t){.cfg = base->cfg, .opts = *opts, .be = base->be, .q_dim = base->q_dim,
                   .kv_dim = base->kv_dim, .qkv_dim = base->qkv_dim, .tok_embd = base->tok_embd,
                   .out_norm = base->out_norm, .lm_head = base->lm_head,
                   .inv_freq = base->inv_freq, .borrowed = true};
    m->cfg.n_layers = n_layers;
    m->layers = calloc((size_t)n_layers, sizeof *m->layers);
    if (!m->layers) {
        rc = deras_fail(DERAS_ENOMEM, "model_new_partial: out of memory");
        goto fail;
    }
    size_t cache_elems = (size_t)opts->n_kv_blocks * opts->block_size * m->kv_dim;
    size_t es = backend_elem_size(m->be);
    for (int l = 0; l < n_layers; l++) {
        layer_weights *L = &m->layers[l];
        *L = base->layers[l];
        L->k_cache = L->v_cache = NULL;
        if ((rc = balloc(m, &L->k_cache, cache_elems, es)) ||
            (rc = balloc(m, &L->v_cache, cache_elems, es)))
            goto fail;
        m->kv_bytes += 2 * cache_elems * es;
    }
    if ((rc = alloc_scratch(m)))
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
            layer_weights *L = &m->layers[l];
            void *bufs[] = {L->attn_norm, L->wqkv, L->bqkv, L->wo, L->ffn_norm,
                            L->wgu, L->wdown, L->k_cache, L->v_cache};
            for (size_t i = m->borrowed ? 7 : 0; i < sizeof bufs / sizeof bufs[0]; i++)
                backend_free(b, bufs[i]); /* a partial view frees only its own caches */
        }
        free(m->layers);
    }
    if (!m->borrowed) {
        if (m->lm_head != m->tok_embd)
            backend_free(b, m->lm_head);
        void *weights[] = {m->tok_embd, m->out_norm, m->inv_freq};
        for (size_t i = 0; i < sizeof weights / sizeof weights[0]; i++)
            backend_free(b, weights[i]);
    }
    void *bufs[] = {m->x, m->h, m->qkv, m->att, m->o, m->gu, m->ff, m->lg_x, m->lg, m->cos_sin,
                    m->d_tokens, m->d_positions, m->d_slots, m->d_q_start, m->d_ctx_len,
                    m->d_tables, m->d_lrows, m->d_copies};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        backend_free(b, bufs[i]);
    free(m->h_positions);
    free(m->h_slots);
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
    if ((rc = backend_upload(b, m->d_tokens, bt->tokens, (size_t)bt->n_tokens * i4)) ||
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

int model_forward(model_t *m, const model_batch *bt, float *logits)
{
    if (!m || !bt || (bt->n_logits > 0 && !logits))
        return deras_fail(DERAS_EINVAL, "model_forward: NULL argument");
    const model_config *c = &m->cfg;
    backend_t *b = m->be;
    const int T = bt->n_tokens, D = c->d_model, hd = c->head_dim;
    const size_t es = backend_elem_size(b);
    int max_q = 0, max_ctx = 0, rc;
    if ((rc = prepare_batch(m, bt, &max_q, &max_ctx)) || (rc = upload_batch(m, bt)))
        return rc;

    /* copy-on-write: shared blocks are copied in every layer before anything is written */
    const size_t block_elems = (size_t)m->opts.block_size * m->kv_dim;
    for (int l = 0; l < c->n_layers && bt->n_copies; l++)
        if ((rc = backend_copy_blocks(b, m->layers[l].k_cache, m->d_copies, bt->n_copies, block_elems)) ||
            (rc = backend_copy_blocks(b, m->layers[l].v_cache, m->d_copies, bt->n_copies, block_elems)))
            return rc;

    /* x (T, D) = embeddings; cos_sin (T, hd) for this step's positions */
    if ((rc = backend_embed(b, m->x, m->tok_embd, m->d_tokens, T, D, c->vocab_size)) ||
        (rc = backend_rope_table(b, m->cos_sin, m->d_positions, m->inv_freq, T, hd)))
        return rc;

    char *qkv = m->qkv;
    attn_args aa = {
        .out = m->att, .q = qkv, .q_stride = m->qkv_dim,
        .q_start = m->d_q_start, .ctx_len = m->d_ctx_len, .block_tables = m->d_tables,
        .n_seqs = bt->n_seqs, .n_tokens = T, .max_blocks = m->opts.max_blocks_per_seq,
        .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = hd,
        .block_size = m->opts.block_size, .window = c->sliding_window,
        .scale = 1.0f / sqrtf((float)hd), .max_q_len = max_q, .max_ctx_len = max_ctx,
    };
    for (int l = 0; l < c->n_layers; l++) {
        layer_weights *L = &m->layers[l];
        /* h (T, D) = norm(x), adding the previous layer's MLP output into x first */
        rc = l == 0 ? backend_rmsnorm(b, m->h, m->x, L->attn_norm, T, D, c->norm_eps)
                    : backend_add_rmsnorm(b, m->h, m->x, m->o, L->attn_norm, T, D, c->norm_eps);
        if (rc)
            return rc;
        /* qkv (T, q_dim + 2 kv_dim) */
        if ((rc = backend_matmul(b, m->qkv, m->h, L->wqkv, L->bqkv, T, m->qkv_dim, D)))
            return rc;
        void *q = qkv, *k = qkv + (size_t)m->q_dim * es, *v = qkv + (size_t)(m->q_dim + m->kv_dim) * es;
        if ((rc = backend_rope(b, q, m->cos_sin, T, c->n_heads, hd, m->qkv_dim)) ||
            (rc = backend_rope(b, k, m->cos_sin, T, c->n_kv_heads, hd, m->qkv_dim)) ||
            (rc = backend_kv_write(b, L->k_cache, L->v_cache, k, v, m->qkv_dim, m->d_slots, T,
                                   c->n_kv_heads, hd, m->opts.block_size)))
            return rc;
        /* att (T, q_dim) */
        aa.k_cache = L->k_cache;
        aa.v_cache = L->v_cache;
        if ((rc = backend_attention(b, &aa)))
            return rc;
        /* o (T, D) = att Wo^T; x += o; h = norm(x) */
        if ((rc = backend_matmul(b, m->o, m->att, L->wo, NULL, T, D, m->q_dim)) ||
            (rc = backend_add_rmsnorm(b, m->h, m->x, m->o, L->ffn_norm, T, D, c->norm_eps)))
            return rc;
        /* gu (T, 2 d_ff); ff (T, d_ff); o (T, D) = ff Wdown^T */
        if ((rc = backend_matmul(b, m->gu, m->h, L->wgu, NULL, T, 2 * c->d_ff, D)) ||
            (rc = backend_silu_mul(b, m->ff, m->gu, T, c->d_ff)) ||
            (rc = backend_matmul(b, m->o, m->ff, L->wdown, NULL, T, D, c->d_ff)))
            return rc;
    }
    if (bt->n_logits == 0)
        return backend_sync(b);

    /* logits (n_logits, vocab) from the rows asked for: x += o only on those rows */
    const int NL = bt->n_logits;
    if ((rc = backend_gather_rows(b, m->lg_x, m->x, m->d_lrows, NL, D)) ||
        (rc = backend_gather_rows(b, m->h, m->o, m->d_lrows, NL, D)) ||
        (rc = backend_add_rmsnorm(b, m->lg_x, m->lg_x, m->h, m->out_norm, NL, D, c->norm_eps)) ||
        (rc = backend_matmul(b, m->lg, m->lg_x, m->lm_head, NULL, NL, c->vocab_size, D)) ||
        (rc = backend_download_f32(b, logits, m->lg, (size_t)NL * c->vocab_size)))
        return rc;
    return backend_sync(b);
}
