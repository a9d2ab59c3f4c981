/* SPDX-License-Identifier: Apache-2.0 */
/* gvocab.c - token bytes, sorted, and their trie (gvocab.h; layout in gvocab_internal.h).
 *
 * The trie is built in one pass over the sorted tokens: the longest common prefix with the
 * previous token says which nodes of the current path close and which open. Costs: the
 * sort, O(total bytes * log n); the pass O(total bytes).
 */
#include "common/grammar/gvocab.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/gvocab_internal.h"

static int cmp_tok(const void *pa, const void *pb, void *ctx)
{
    const gvocab_t *v = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la = v->off[a + 1] - v->off[a], lb = v->off[b + 1] - v->off[b];
    int c = memcmp(v->bytes + v->off[a], v->bytes + v->off[b], la < lb ? la : lb);
    if (c)
        return c;
    if (la != lb)
        return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

static int build_trie(gvocab_t *v)
{
    size_t total = v->off[v->n_tokens];
    size_t cap = total + 1;
    v->nbyte = malloc(cap);
    v->ndepth = malloc(cap * sizeof(uint16_t));
    v->nend = malloc(cap * sizeof(int32_t));
    v->sub0 = malloc(cap * sizeof(int32_t));
    v->sub1 = malloc(cap * sizeof(int32_t));
    v->here1 = malloc(cap * sizeof(int32_t));
    int32_t path[GVOCAB_MAX_TOKEN_BYTES + 1];
    if (!v->nbyte || !v->ndepth || !v->nend || !v->sub0 || !v->sub1 || !v->here1)
        return deras_fail(DERAS_ENOMEM, "gvocab: out of memory for the trie");
    int n = 1;
    path[0] = 0;
    v->nbyte[0] = 0;
    v->ndepth[0] = 0;
    v->sub0[0] = v->here1[0] = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int j = 0; j < v->n_sorted; j++) {
        int32_t t = v->sorted[j];
        const char *b = v->bytes + v->off[t];
        uint32_t len = v->off[t + 1] - v->off[t], l = 0;
        while (prev && l < len && l < prev_len && prev[l] == b[l])
            l++;
        for (uint32_t d = prev_len; d > l; d--) {
            v->nend[path[d]] = n;
            v->sub1[path[d]] = j;
        }
        for (uint32_t d = l + 1; d <= len; d++) {
            int id = n++;
            v->nbyte[id] = (uint8_t)b[d - 1];
            v->ndepth[id] = (uint16_t)d;
            v->sub0[id] = v->here1[id] = j;
            path[d] = id;
        }
        v->here1[path[len]] = j + 1;
        prev = b;
        prev_len = len;
    }
    for (uint32_t d = prev_len; d >= 1; d--) {
        v->nend[path[d]] = n;
        v->sub1[path[d]] = v->n_sorted;
    }
    v->nend[0] = n;
    v->sub1[0] = v->n_sorted;
    v->n_nodes = n;
    return DERAS_OK;
}

int gvocab_new(int n_tokens, const char *const *bytes, const size_t *lens, const int32_t *eog,
               int n_eog, gvocab_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "gvocab_new: NULL out");
    *out = NULL;
    if (n_tokens < 1 || !bytes || !lens || n_eog < 0 || (n_eog && !eog))
        return deras_fail(DERAS_EINVAL, "gvocab_new: bad arguments (%d tokens)", n_tokens);
    size_t total = 0;
    for (int i = 0; i < n_tokens; i++) {
        size_t len = bytes[i] ? lens[i] : 0;
        if (len > GVOCAB_MAX_TOKEN_BYTES)
            return deras_fail(DERAS_ERANGE, "gvocab: token %d has %zu bytes, over %d", i, len,
                              GVOCAB_MAX_TOKEN_BYTES);
        total += len;
    }
    if (total >= UINT32_MAX / 2)
        return deras_fail(DERAS_ERANGE, "gvocab: %zu bytes of tokens", total);
    for (int i = 0; i < n_eog; i++)
        if (eog[i] < 0 || eog[i] >= n_tokens)
            return deras_fail(DERAS_EINVAL, "gvocab: end-of-generation id %d out of range",
                              (int)eog[i]);
    gvocab_t *v = calloc(1, sizeof *v);
    if (!v)
        return deras_fail(DERAS_ENOMEM, "gvocab: out of memory");
    v->n_tokens = n_tokens;
    v->words = ((size_t)n_tokens + 31) / 32;
    v->bytes = malloc(total ? total : 1);
    v->off = malloc(((size_t)n_tokens + 1) * sizeof(uint32_t));
    v->eog = malloc((size_t)(n_eog ? n_eog : 1) * sizeof(int32_t));
    v->eog_bits = calloc(v->words, sizeof(uint32_t));
    v->matchable = calloc(v->words, sizeof(uint32_t));
    v->sorted = malloc((size_t)n_tokens * sizeof(int32_t));
    int rc = DERAS_OK;
    if (!v->bytes || !v->off || !v->eog || !v->eog_bits || !v->matchable || !v->sorted) {
        rc = deras_fail(DERAS_ENOMEM, "gvocab: out of memory for %d tokens", n_tokens);
        goto fail;
    }
    size_t at = 0;
    for (int i = 0; i < n_tokens; i++) {
        size_t len = bytes[i] ? lens[i] : 0;
        v->off[i] = (uint32_t)at;
        if (len) {
            memcpy(v->bytes + at, bytes[i], len);
            v->matchable[i >> 5] |= 1u << (i & 31);
            v->sorted[v->n_sorted++] = i;
            if ((int)len > v->max_len)
                v->max_len = (int)len;
        }
        at += len;
    }
    v->off[n_tokens] = (uint32_t)at;
    v->n_eog = n_eog;
    for (int i = 0; i < n_eog; i++) {
        v->eog[i] = eog[i];
        v->eog_bits[eog[i] >> 5] |= 1u << (eog[i] & 31);
        if (v->matchable[eog[i] >> 5] >> (eog[i] & 31) & 1) /* end only, never bytes */
            v->matchable[eog[i] >> 5] &= ~(1u << (eog[i] & 31));
    }
    int m = 0;
    for (int i = 0; i < v->n_sorted; i++)
        if (!(v->eog_bits[v->sorted[i] >> 5] >> (v->sorted[i] & 31) & 1))
            v->sorted[m++] = v->sorted[i];
    v->n_sorted = m;
    qsort_r(v->sorted, (size_t)v->n_sorted, sizeof(int32_t), cmp_tok, v);
    if ((rc = build_trie(v)))
        goto fail;
    *out = v;
    return DERAS_OK;
fail:
    gvocab_destroy(&v);
    return rc;
}

void gvocab_destroy(gvocab_t **vp)
{
    if (!vp || !*vp)
        return;
    gvocab_t *v = *vp;
    free(v->bytes);
    free(v->off);
    free(v->eog);
    free(v->eog_bits);
    free(v->matchable);
    free(v->sorted);
    free(v->nbyte);
    free(v->ndepth);
    free(v->nend);
    free(v->sub0);
    free(v->sub1);
    free(v->here1);
    free(v);
    *vp = NULL;
}

int gvocab_size(const gvocab_t *v)
{
    return v->n_tokens;
}

size_t gvocab_mask_words(const gvocab_t *v)
{
    return v->words;
}

const char *gvocab_token_bytes(const gvocab_t *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n_tokens || !(v->matchable[id >> 5] >> (id & 31) & 1)) {
        *len = 0;
        return NULL;
    }
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

bool gvocab_is_eog(const gvocab_t *v, int32_t id)
{
    return id >= 0 && id < v->n_tokens && (v->eog_bits[id >> 5] >> (id & 31) & 1);
}
