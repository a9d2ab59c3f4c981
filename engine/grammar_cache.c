/* SPDX-License-Identifier: Apache-2.0 */
/* grammar_cache.c - the vocabulary trie and an LRU of token grammars (see grammar_cache.h).
 * The entries are a small array scanned linearly (max_entries is tens): a 64-bit hash of
 * the text first, the bytes compared only on a hash match; "recent" is a use counter. */
#include "engine/grammar_cache.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"

typedef struct gentry {
    uint64_t hash, used;
    char *text;
    size_t len;
    token_grammar_t *tg;     /* NULL: empty entry */
} gentry;

struct gcache {
    gvocab_t *v;
    gentry *e;
    int n, cap;
    uint64_t clock, hits, misses;
};

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int gcache_new(const tokenizer_t *tok, int n_tokens, const int32_t *eog, int n_eog,
               int max_entries, gcache_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "gcache_new: NULL out");
    *out = NULL;
    if (!tok || n_tokens < 1 || max_entries < 0)
        return deras_fail(DERAS_EINVAL, "gcache_new: bad arguments");
    gcache_t *c = calloc(1, sizeof *c);
    const char **bytes = calloc((size_t)n_tokens, sizeof *bytes);
    size_t *lens = calloc((size_t)n_tokens, sizeof *lens);
    int rc = DERAS_OK;
    if (!c || !bytes || !lens) {
        rc = deras_fail(DERAS_ENOMEM, "gcache_new: out of memory");
        goto done;
    }
    c->cap = max_entries ? max_entries : GCACHE_DEFAULT_ENTRIES;
    if (!(c->e = calloc((size_t)c->cap, sizeof *c->e))) {
        rc = deras_fail(DERAS_ENOMEM, "gcache_new: out of memory");
        goto done;
    }
    int n_tok = tokenizer_vocab_size(tok);
    for (int i = 0; i < n_tokens && i < n_tok; i++) {
        if (tokenizer_is_special(tok, i))
            continue;
        bytes[i] = tokenizer_token_bytes(tok, i, &lens[i]);
        if (!bytes[i])
            lens[i] = 0;
    }
    rc = gvocab_new(n_tokens, bytes, lens, eog, n_eog, &c->v);
done:
    free(bytes);
    free(lens);
    if (rc)
        gcache_destroy(&c);
    *out = c;
    return rc;
}

void gcache_destroy(gcache_t **cp)
{
    if (!cp || !*cp)
        return;
    gcache_t *c = *cp;
    for (int i = 0; c->e && i < c->cap; i++) {
        token_grammar_destroy(&c->e[i].tg);
        free(c->e[i].text);
    }
    free(c->e);
    gvocab_destroy(&c->v);
    free(c);
    *cp = NULL;
}

int gcache_get(gcache_t *c, const char *gbnf, size_t len, token_grammar_t **out)
{
    *out = NULL;
    uint64_t h = fnv1a(gbnf, len);
    int victim = 0;
    for (int i = 0; i < c->cap; i++) {
        gentry *x = &c->e[i];
        if (x->tg && x->hash == h && x->len == len && !memcmp(x->text, gbnf, len)) {
            x->used = ++c->clock;
            c->hits++;
            *out = x->tg;
            return DERAS_OK;
        }
        if (!x->tg || (c->e[victim].tg && x->used < c->e[victim].used))
            victim = i;
    }
    c->misses++;
    char *text = malloc(len + 1);
    if (!text)
        return deras_fail(DERAS_ENOMEM, "grammar cache: out of memory for %zu bytes", len);
    memcpy(text, gbnf, len);
    text[len] = '\0';
    grammar_t *g = NULL;
    token_grammar_t *tg = NULL;
    bool prefix, complete;
    int rc = grammar_from_gbnf(gbnf, len, NULL, &g);
    if (!rc) /* a matcher must be able to start (the router checked this too) */
        rc = grammar_match_bytes(g, "", 0, &prefix, &complete);
    token_grammar_opts o;
    token_grammar_opts_default(&o);
    o.cache_bytes = GCACHE_MASK_CACHE_BYTES;
    o.memo_bytes = GCACHE_MEMO_BYTES;
    if (!rc)
        rc = token_grammar_new(&g, c->v, &o, &tg);
    grammar_destroy(&g);
    if (rc) {
        free(text);
        return rc;
    }
    gentry *x = &c->e[victim];
    if (x->tg)
        c->n--;
    token_grammar_destroy(&x->tg);
    free(x->text);
    *x = (gentry){.hash = h, .used = ++c->clock, .text = text, .len = len, .tg = tg};
    c->n++;
    *out = tg;
    return DERAS_OK;
}

void gcache_get_stats(const gcache_t *c, gcache_stats *out)
{
    *out = (gcache_stats){.n_entries = c->n, .hits = c->hits, .misses = c->misses};
}
