/* SPDX-License-Identifier: Apache-2.0 */
/* tp_layout.c - each rank's share of the model (see tp_layout.h). */
#include "tp_layout.h"

#include <stdio.h>

#include "common/base/status.h"

/* [lo, hi) of n items split `size` ways, the remainder going to the last ranks. */
static void split(int n, int rank, int size, int *lo, int *hi)
{
    *lo = (int)((long long)n * rank / size);
    *hi = (int)((long long)n * (rank + 1) / size);
}

int tp_shard_of(const model_config *c, int rank, int size, tp_shard *out)
{
    if (!c || !out || size < 1 || rank < 0 || rank >= size)
        return deras_fail(DERAS_EINVAL, "tensor-parallel rank %d of %d", rank, size);
    if (size > c->n_heads || size > c->d_ff || size > c->vocab_size)
        return deras_fail(DERAS_EUNSUPPORTED,
                          "tensor parallelism over %d ranks is impossible for this model: every "
                          "rank needs at least one of its %d query heads (and of %d MLP columns, "
                          "%d vocabulary rows); use --tp-size %d or less",
                          size, c->n_heads, c->d_ff, c->vocab_size,
                          c->n_heads < c->d_ff ? c->n_heads : c->d_ff);
    tp_shard *s = out;
    s->rank = rank;
    s->size = size;
    split(c->n_heads, rank, size, &s->h0, &s->h1);
    const int g = c->n_heads / c->n_kv_heads;
    s->kv0 = s->h0 / g;
    s->kv1 = (s->h1 - 1) / g + 1;
    split(c->d_ff, rank, size, &s->f0, &s->f1);
    split(c->vocab_size, rank, size, &s->v0, &s->v1);
    s->v_max = 0;
    for (int r = 0; r < size; r++) {
        int lo, hi;
        split(c->vocab_size, r, size, &lo, &hi);
        s->v_max = hi - lo > s->v_max ? hi - lo : s->v_max;
    }
    return DERAS_OK;
}

void tp_shard_describe(const tp_shard *s, const model_config *c, char *buf, size_t cap)
{
    const int g = c->n_heads / c->n_kv_heads;
    const bool shared_lo = s->h0 % g != 0, shared_hi = s->h1 % g != 0 && s->h1 < c->n_heads;
    snprintf(buf, cap, "rank %d/%d: query heads %d-%d, KV heads %d-%d%s, ffn %d-%d, vocab %d-%d",
             s->rank, s->size, s->h0, s->h1 - 1, s->kv0, s->kv1 - 1,
             shared_lo || shared_hi ? " (replicated: a KV group straddles ranks)" : "", s->f0,
             s->f1 - 1, s->v0, s->v1 - 1);
}
