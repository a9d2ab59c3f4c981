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

static int gcd(int a, int b)
{
    while (b) {
        int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int tp_shard_of_blocks(const model_config *c, int rank, int size, int out_block, int down_block,
                       tp_shard *out)
{
    if (!c || !out || size < 1 || rank < 0 || rank >= size || out_block < 1 || down_block < 1)
        return deras_fail(DERAS_EINVAL, "tensor-parallel rank %d of %d (blocks %d, %d)", rank,
                          size, out_block, down_block);
    /* heads per unit: the fewest whole heads that are whole blocks of the output projection */
    const int gh = out_block / gcd(out_block, c->head_dim);
    if (c->n_heads % gh || c->d_ff % down_block)
        return deras_fail(DERAS_EUNSUPPORTED, "tensor parallelism: %d query heads of %d and %d MLP "
                          "columns are not whole blocks of %d and %d elements", c->n_heads,
                          c->head_dim, c->d_ff, out_block, down_block);
    const int units_h = c->n_heads / gh, units_f = c->d_ff / down_block;
    if (size > units_h || size > units_f || size > c->vocab_size) {
        int most = units_h < units_f ? units_h : units_f;
        most = most < c->vocab_size ? most : c->vocab_size;
        if (gh == 1 && down_block == 1)
            return deras_fail(DERAS_EUNSUPPORTED,
                              "tensor parallelism over %d ranks is impossible for this model: every "
                              "rank needs at least one of its %d query heads (and of %d MLP "
                              "columns, %d vocabulary rows); use --tp-size %d or less",
                              size, c->n_heads, c->d_ff, c->vocab_size, most);
        return deras_fail(DERAS_EUNSUPPORTED,
                          "tensor parallelism over %d ranks is impossible for this model's "
                          "quantized weights: a rank's slices must be whole blocks, so its %d "
                          "query heads split in %d units of %d (the attention output's blocks "
                          "of %d columns) and its %d MLP columns in %d units of %d (the down "
                          "projection's blocks); use --tp-size %d or less, or a format that "
                          "splits anywhere (--weight-format f32, f16 or bf16)",
                          size, c->n_heads, units_h, gh, out_block, c->d_ff, units_f,
                          down_block, most);
    }
    tp_shard *s = out;
    s->rank = rank;
    s->size = size;
    split(units_h, rank, size, &s->h0, &s->h1);
    s->h0 *= gh;
    s->h1 *= gh;
    const int g = c->n_heads / c->n_kv_heads;
    s->kv0 = s->h0 / g;
    s->kv1 = (s->h1 - 1) / g + 1;
    split(units_f, rank, size, &s->f0, &s->f1);
    s->f0 *= down_block;
    s->f1 *= down_block;
    split(c->vocab_size, rank, size, &s->v0, &s->v1);
    s->v_max = 0;
    for (int r = 0; r < size; r++) {
        int lo, hi;
        split(c->vocab_size, r, size, &lo, &hi);
        s->v_max = hi - lo > s->v_max ? hi - lo : s->v_max;
    }
    return DERAS_OK;
}

int tp_shard_of(const model_config *c, int rank, int size, tp_shard *out)
{
    return tp_shard_of_blocks(c, rank, size, 1, 1, out);
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
