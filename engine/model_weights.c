/* SPDX-License-Identifier: Apache-2.0 */
/* model_weights.c - where a model's weights live (see model_weights.h).
 *
 * A matrix is planned slice by slice first (mapped, copied or converted, and in which
 * format), then built: when every slice is converted to one format (or copied, on a
 * backend without parts: CUDA keeps a BF16 file's bytes), one allocation holds them all
 * and the matrix is an ordinary descriptor; otherwise each slice is a part, whether mapped
 * or copied, so a tensor copied because of its address is computed exactly as the same
 * tensor mapped (OpenBLAS's results depend on the product's width, so fusing copies would
 * not be). Copies and conversions go through a host staging buffer a bounded number of
 * rows at a time, so loading an 8B model's 2 GB embedding does not need 2 GB of staging.
 */
#include "model_weights.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/quantize.h"
#include "common/base/status.h"

#define STAGE_MIN_ELEMS ((size_t)4 << 20) /* 16 MiB of f32 rows per staging round at least */

enum how { MAP, COPY, CONVERT };

typedef struct plan {
    ws_slice s;            /* resolved: no -1 left */
    int stored, kept;      /* enum deras_dtype */
    enum how how;
    const uint8_t *src;    /* MAP: the slice's first stored row */
    int perm;              /* MAP: qk_perm_hd of the stored rows */
    size_t out_row_bytes;  /* one row of the slice in `kept` */
} plan;

int ws_init(weight_store *ws, backend_t *b, bool convert, int dtype, size_t stage_elems,
            size_t row_elems)
{
    memset(ws, 0, sizeof *ws);
    ws->be = b;
    ws->convert = convert;
    ws->dtype = dtype;
    if (stage_elems < STAGE_MIN_ELEMS)
        stage_elems = STAGE_MIN_ELEMS;
    if (stage_elems < row_elems)
        stage_elems = row_elems;
    /* f32 rows, then room for as many converted rows (never more bytes than f32) */
    ws->stage = malloc(2 * stage_elems * sizeof(float));
    ws->row_scratch = malloc((row_elems ? row_elems : 1) * sizeof(float));
    ws->stage_elems = stage_elems;
    if (!ws->stage || !ws->row_scratch) {
        ws_done_loading(ws);
        return deras_fail(DERAS_ENOMEM, "model: out of memory for weight staging");
    }
    return DERAS_OK;
}

void ws_done_loading(weight_store *ws)
{
    free(ws->stage);
    free(ws->row_scratch);
    ws->stage = ws->row_scratch = NULL;
}

void ws_release(weight_store *ws)
{
    if (!ws)
        return;
    for (int i = 0; i < ws->n_bufs; i++)
        backend_free(ws->be, ws->bufs[i]);
    free(ws->bufs);
    ws->bufs = NULL;
    ws->n_bufs = ws->cap_bufs = 0;
    free(ws->maps);
    ws->maps = NULL;
    ws->n_maps = ws->cap_maps = 0;
    checkpoint_destroy(&ws->ck);
    ws_done_loading(ws);
    ws->owned_bytes = ws->mapped_bytes = 0;
}

int ws_check_format(const backend_t *b, int dtype)
{
    if (!dtype_can_quantize(dtype))
        return dtype_from_f32(dtype, NULL, NULL, 0); /* its message says why and what can */
    if (backend_weight_dtype(b, dtype) != dtype)
        return deras_fail(DERAS_EUNSUPPORTED, "the %s backend keeps its weights in %s only: "
                          "weights in %s need the cpu device", backend_name(b),
                          dtype_name(backend_weight_dtype(b, DT_F32)), dtype_name(dtype));
    return DERAS_OK;
}

int ws_kept_dtype(const weight_store *ws, int stored)
{
    return ws->convert ? ws->dtype : backend_weight_dtype(ws->be, stored);
}

int ws_alloc(weight_store *ws, size_t bytes, void **out)
{
    if (ws->n_bufs == ws->cap_bufs) {
        int cap = ws->cap_bufs ? 2 * ws->cap_bufs : 64;
        void **b = realloc(ws->bufs, (size_t)cap * sizeof *b);
        if (!b)
            return deras_fail(DERAS_ENOMEM, "model: out of memory");
        ws->bufs = b;
        ws->cap_bufs = cap;
    }
    int rc = backend_alloc(ws->be, bytes, out);
    if (rc)
        return rc;
    ws->bufs[ws->n_bufs++] = *out;
    ws->owned_bytes += bytes;
    return DERAS_OK;
}

/* Resolve a slice's -1s, and decide how it is kept. */
static int plan_slice(weight_store *ws, const ws_slice *in, int layer, const checkpoint_t *ck,
                      plan *p)
{
    int64_t rows, cols;
    int rc = checkpoint_shape(ck, in->t, layer, &rows, &cols);
    if (rc)
        return rc;
    p->s = *in;
    p->s.n_rows = in->n_rows < 0 ? rows : in->n_rows;
    p->s.n_cols = in->n_cols < 0 ? cols : in->n_cols;
    p->stored = checkpoint_dtype(ck, in->t, layer);
    p->kept = ws_kept_dtype(ws, p->stored);
    p->out_row_bytes = backend_weight_bytes(p->kept, 1, p->s.n_cols);
    if (!p->out_row_bytes)
        return deras_fail(DERAS_EFORMAT, "layer %d %s: %lld columns are not whole blocks of %s "
                          "(%d elements)", layer, checkpoint_role_name(in->t),
                          (long long)p->s.n_cols, dtype_name(p->kept),
                          dtype_block_elems(p->kept));
    p->how = p->kept == p->stored ? COPY : CONVERT;
    const void *data;
    size_t row_bytes;
    if (p->how == COPY && p->s.col0 == 0 && p->s.n_cols == cols &&
        !(rc = checkpoint_stored_rows(ck, in->t, layer, &data, &row_bytes, &p->perm)) &&
        (!p->perm || (p->s.row0 % p->perm == 0 && p->s.n_rows % p->perm == 0))) {
        p->src = (const uint8_t *)data + (size_t)p->s.row0 * row_bytes;
        if (backend_can_map(ws->be, p->stored, p->src))
            p->how = MAP;
    }
    if (rc)
        return rc;
    const int blk = dtype_block_elems(p->stored);
    if (p->how == COPY && (p->s.col0 % blk || p->s.n_cols % blk))
        return deras_fail(DERAS_EINTERNAL, "layer %d %s: columns %lld+%lld are not whole %s "
                          "blocks (the tensor-parallel layout should have rounded them)", layer,
                          checkpoint_role_name(in->t), (long long)p->s.col0,
                          (long long)p->s.n_cols, dtype_name(p->stored));
    if (p->how != MAP)
        p->perm = 0; /* copies and conversions come out in Hugging Face order */
    return DERAS_OK;
}

/* Write a copied or converted slice into dst (backend memory), a staging round at a time. */
static int fill(weight_store *ws, const plan *p, int layer, const checkpoint_t *ck, char *dst)
{
    const int64_t n_cols = p->s.n_cols;
    const int64_t fit = (int64_t)ws->stage_elems / n_cols, chunk = fit > 0 ? fit : 1;
    void *qstage = ws->stage + ws->stage_elems;
    const int native = backend_weight_dtype(ws->be, DT_F32);
    for (int64_t r = 0; r < p->s.n_rows; r += chunk) {
        const int64_t k = p->s.n_rows - r < chunk ? p->s.n_rows - r : chunk;
        char *out = dst + (size_t)r * p->out_row_bytes;
        const size_t bytes = (size_t)k * p->out_row_bytes;
        int rc;
        if (p->how == COPY)
            rc = checkpoint_read_stored(ck, p->s.t, layer, p->s.row0 + r, k, p->s.col0, n_cols,
                                        ws->stage);
        else
            rc = checkpoint_read_cols(ck, p->s.t, layer, p->s.row0 + r, k, p->s.col0, n_cols,
                                      ws->stage, ws->row_scratch);
        if (rc)
            return rc;
        if (p->how == COPY)
            rc = backend_upload(ws->be, out, ws->stage, bytes);
        else if (p->kept == native)
            rc = backend_upload_f32(ws->be, out, ws->stage, (size_t)(k * n_cols));
        else if (!(rc = dtype_from_f32(p->kept, ws->stage, qstage, k * n_cols)))
            rc = backend_upload(ws->be, out, qstage, bytes);
        if (rc)
            return rc;
    }
    return DERAS_OK;
}

/* Note a mapped range; one that continues the last (a file's gate and up tensors, which
 * merge_parts makes one descriptor) extends it. */
static int note_map(weight_store *ws, const void *p, size_t n)
{
    struct ws_map *last = ws->n_maps ? &ws->maps[ws->n_maps - 1] : NULL;
    if (last && (const char *)last->p + last->n == (const char *)p) {
        last->n += n;
        return DERAS_OK;
    }
    if (ws->n_maps == ws->cap_maps) {
        const int cap = ws->cap_maps ? 2 * ws->cap_maps : 64;
        struct ws_map *m = realloc(ws->maps, (size_t)cap * sizeof *m);
        if (!m)
            return deras_fail(DERAS_ENOMEM, "model: out of memory");
        ws->maps = m;
        ws->cap_maps = cap;
    }
    ws->maps[ws->n_maps++] = (struct ws_map){p, n};
    return DERAS_OK;
}

/* Drop the pages of [p, p + n) from the process when the range is one a weight maps
 * (never memory the store owns: those bytes would be lost). */
static void drop_if_mapped(weight_store *ws, const void *p, size_t n)
{
    for (int i = 0; i < ws->n_maps; i++) {
        const char *m = ws->maps[i].p;
        if ((const char *)p >= m && (const char *)p + n <= m + ws->maps[i].n) {
            checkpoint_release(p, n);
            ws->mapped_bytes -= n < ws->mapped_bytes ? n : ws->mapped_bytes;
            return;
        }
    }
}

int ws_pack(weight_store *ws, backend_weight *w)
{
    const size_t bytes = backend_pack_bytes(ws->be, w);
    if (!bytes)
        return DERAS_OK;
    void *buf;
    int rc = ws_alloc(ws, bytes, &buf);
    if (rc || (rc = backend_pack(ws->be, w, buf)))
        return rc;
    if (!w->n_parts && w->packed)
        drop_if_mapped(ws, w->data, backend_weight_bytes(w->dtype, w->rows, w->cols));
    for (int i = 0; i < w->n_parts; i++)
        if (w->parts[i].packed)
            drop_if_mapped(ws, w->parts[i].data,
                           backend_weight_bytes(w->parts[i].dtype, w->parts[i].rows, w->cols));
    return DERAS_OK;
}

/* Merge parts that continue one another in memory (same format and row order), e.g. a
 * file's gate and up tensors stored back to back. */
static void merge_parts(backend_weight *w)
{
    int n = 0;
    for (int i = 0; i < w->n_parts; i++) {
        backend_weight_part *prev = n ? &w->parts[n - 1] : NULL;
        const backend_weight_part *p = &w->parts[i];
        if (prev && prev->dtype == p->dtype && prev->qk_perm_hd == p->qk_perm_hd &&
            (const char *)prev->data + backend_weight_bytes(prev->dtype, prev->rows, w->cols) ==
                (const char *)p->data) {
            prev->rows += p->rows;
            continue;
        }
        w->parts[n++] = *p;
    }
    w->n_parts = n;
    if (n == 1 && !w->parts[0].qk_perm_hd) { /* one plain part: an ordinary descriptor */
        w->dtype = w->parts[0].dtype;
        w->data = w->parts[0].data;
        w->n_parts = 0;
    }
}

int ws_matrix(weight_store *ws, backend_weight *w, const ws_slice *slices, int n, int layer,
              const checkpoint_t *ck, int extra_rows)
{
    plan p[BACKEND_WEIGHT_MAX_PARTS];
    if (n < 1 || n + (extra_rows > 0) > BACKEND_WEIGHT_MAX_PARTS)
        return deras_fail(DERAS_EINTERNAL, "model: a matrix of %d slices", n);
    int64_t rows = extra_rows;
    bool one_buffer = true;
    for (int i = 0; i < n; i++) {
        int rc = plan_slice(ws, &slices[i], layer, ck, &p[i]);
        if (rc)
            return rc;
        if (p[i].s.n_cols != p[0].s.n_cols)
            return deras_fail(DERAS_EINTERNAL, "fusing layer %d tensors of %lld and %lld columns",
                              layer, (long long)p[0].s.n_cols, (long long)p[i].s.n_cols);
        one_buffer = one_buffer && p[i].how != MAP && p[i].kept == p[0].kept &&
                     (p[i].how == CONVERT || !backend_takes_parts(ws->be));
        rows += p[i].s.n_rows;
    }
    const int cols = (int)p[0].s.n_cols;
    *w = (backend_weight){.dtype = p[0].kept, .rows = (int)rows, .cols = cols};
    void *buf;
    int rc;
    if (one_buffer) { /* one format, nothing mapped: one allocation, no parts */
        if ((rc = ws_alloc(ws, (size_t)rows * p[0].out_row_bytes, &buf)))
            return rc;
        w->data = buf;
        for (int i = 0; i < n; i++) {
            if ((rc = fill(ws, &p[i], layer, ck, buf)))
                return rc;
            buf = (char *)buf + (size_t)p[i].s.n_rows * p[i].out_row_bytes;
        }
        return DERAS_OK;
    }
    for (int i = 0; i < n; i++) {
        backend_weight_part *part = &w->parts[w->n_parts++];
        *part = (backend_weight_part){p[i].kept, (int)p[i].s.n_rows, p[i].src, p[i].perm, NULL};
        const size_t bytes = (size_t)p[i].s.n_rows * p[i].out_row_bytes;
        if (p[i].how == MAP) {
            if (!ws->ck)
                ws->ck = checkpoint_retain(ck);
            checkpoint_prefetch(p[i].src, bytes);
            ws->mapped_bytes += bytes;
            if ((rc = note_map(ws, p[i].src, bytes)))
                return rc;
        } else if ((rc = ws_alloc(ws, bytes, &buf)) || (rc = fill(ws, &p[i], layer, ck, buf))) {
            return rc;
        } else {
            part->data = buf;
        }
    }
    if (extra_rows) { /* zero bytes are zeros in every format */
        const size_t bytes = backend_weight_bytes(p[0].kept, extra_rows, cols);
        if ((rc = ws_alloc(ws, bytes, &buf)))
            return rc;
        w->parts[w->n_parts++] = (backend_weight_part){p[0].kept, extra_rows, buf, 0, NULL};
    }
    merge_parts(w);
    return DERAS_OK;
}

int ws_vectors(weight_store *ws, void **dst, const ws_slice *slices, int n, int layer,
               const checkpoint_t *ck)
{
    plan p[BACKEND_WEIGHT_MAX_PARTS];
    int64_t total = 0;
    if (n < 1 || n > BACKEND_WEIGHT_MAX_PARTS)
        return deras_fail(DERAS_EINTERNAL, "model: %d vectors", n);
    for (int i = 0; i < n; i++) {
        int64_t rows, cols;
        int rc = checkpoint_shape(ck, slices[i].t, layer, &rows, &cols);
        if (rc)
            return rc;
        p[i].s = slices[i];
        p[i].s.n_rows = slices[i].n_rows < 0 ? rows : slices[i].n_rows;
        p[i].s.n_cols = slices[i].n_cols < 0 ? cols : slices[i].n_cols;
        p[i].kept = backend_weight_dtype(ws->be, DT_F32);
        p[i].how = CONVERT;
        p[i].out_row_bytes = (size_t)p[i].s.n_cols * backend_elem_size(ws->be);
        total += p[i].s.n_rows * p[i].s.n_cols;
    }
    void *buf;
    int rc = ws_alloc(ws, (size_t)total * backend_elem_size(ws->be), &buf);
    if (rc)
        return rc;
    *dst = buf;
    for (int i = 0; i < n; i++) {
        if ((rc = fill(ws, &p[i], layer, ck, buf)))
            return rc;
        buf = (char *)buf + (size_t)p[i].s.n_rows * p[i].out_row_bytes;
    }
    return DERAS_OK;
}

backend_weight ws_first_rows(const backend_weight *w, int rows)
{
    backend_weight r = *w;
    r.rows = rows;
    if (!w->n_parts)
        return r;
    int k = 0, sum = 0;
    while (k < w->n_parts && sum < rows)
        sum += w->parts[k++].rows;
    r.n_parts = k;
    r.parts[k - 1].rows -= sum - rows;
    merge_parts(&r);
    return r;
}

uint64_t ws_estimate(const checkpoint_t *ck, const backend_t *b, bool convert, int dtype)
{
    const model_config *c = checkpoint_config(ck);
    const size_t es = backend_elem_size(b);
    uint64_t total = 0;
    for (int t = 0; t < CKPT_N_TENSORS; t++) {
        const bool vector = t == CKPT_OUTPUT_NORM || t == CKPT_ATTN_NORM || t == CKPT_FFN_NORM ||
                            t == CKPT_ATTN_Q_BIAS || t == CKPT_ATTN_K_BIAS || t == CKPT_ATTN_V_BIAS;
        const int n = t >= CKPT_ATTN_NORM ? c->n_layers : 1;
        for (int l = 0; l < n; l++) {
            int64_t rows, cols;
            if (!checkpoint_has(ck, (enum ckpt_tensor)t, l) ||
                checkpoint_shape(ck, (enum ckpt_tensor)t, l, &rows, &cols))
                continue;
            const int stored = checkpoint_dtype(ck, (enum ckpt_tensor)t, l);
            const int kept = convert ? dtype : backend_weight_dtype(b, stored);
            const size_t bytes = vector ? 0 : backend_weight_bytes(kept, rows, cols);
            total += bytes ? bytes : (uint64_t)rows * (uint64_t)cols * es;
        }
    }
    return total;
}
