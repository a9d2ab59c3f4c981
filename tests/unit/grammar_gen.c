/* SPDX-License-Identifier: Apache-2.0 */
/* grammar_gen.c - random sentences and test vocabularies (grammar_gen.h). */
#include "grammar_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/grammar_internal.h"
#include "common/grammar/gvocab_internal.h"
#include "test_util.h"

char *gg_read_data(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "grammar/%s", name);
    char *path = test_data_path(rel), *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (f && (buf = malloc(1 << 16))) {
        size_t n = fread(buf, 1, (1 << 16) - 1, f);
        buf[n] = 0;
    }
    if (f)
        fclose(f);
    free(path);
    return buf;
}

uint64_t gg_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static bool set_empty(const uint64_t *set)
{
    return !(set[0] | set[1] | set[2] | set[3]);
}

/* The cost of alternative a of rule r (INF: it has a byte set that matches nothing). */
static int64_t alt_cost(const grammar_t *g, const int64_t *cost, int r, int a)
{
    const int64_t INF = INT64_MAX / 4;
    int64_t c = 1;
    for (int p = g->alt[g->ralt[2 * r] + a]; GE_KIND(g->el[p]) != GE_END && c < INF; p++) {
        int32_t e = g->el[p];
        if (GE_KIND(e) == GE_BYTES)
            c = set_empty(g->set + 4 * GE_ARG(e)) ? INF : c + 1;
        else
            c += cost[GE_ARG(e)];
    }
    return c < INF ? c : INF;
}

/* Size of each rule's smallest derivation (expansions + bytes). */
static int64_t *min_costs(const grammar_t *g)
{
    int64_t *cost = malloc((size_t)g->n_rules * sizeof *cost);
    if (!cost)
        return NULL;
    const int64_t INF = INT64_MAX / 4;
    for (int r = 0; r < g->n_rules; r++)
        cost[r] = INF;
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < g->n_rules; r++) {
            for (int a = 0; a < g->ralt[2 * r + 1]; a++) {
                int64_t c = alt_cost(g, cost, r, a);
                if (c < cost[r]) {
                    cost[r] = c;
                    changed = true;
                }
            }
        }
    }
    return cost;
}

static int alt_cost_min(const grammar_t *g, const int64_t *cost, int r)
{
    int best = 0;
    int64_t bc = INT64_MAX;
    for (int a = 0; a < g->ralt[2 * r + 1]; a++) {
        int64_t c = alt_cost(g, cost, r, a);
        if (c < bc) {
            bc = c;
            best = a;
        }
    }
    return best;
}

static int random_byte(const uint64_t *set, uint64_t *rng)
{
    int n = 0;
    for (int k = 0; k < 4; k++)
        n += __builtin_popcountll(set[k]);
    int pick = (int)(gg_rand(rng) % (uint64_t)n);
    for (int b = 0; b < 256; b++)
        if (gset_has(set, (unsigned)b) && pick-- == 0)
            return b;
    return -1;
}

long gg_sentence(const grammar_t *g, uint64_t *rng, int max_depth, char *out, size_t cap)
{
    int64_t *cost = min_costs(g);
    int32_t *stack = malloc(sizeof(int32_t) << 16);
    long len = 0, expansions = 0;
    int sp = 0;
    if (!cost || !stack)
        goto overflow;
    int r = g->root, a = (int)(gg_rand(rng) % (uint64_t)g->ralt[2 * r + 1]);
    if (alt_cost(g, cost, r, a) >= INT64_MAX / 4)
        a = alt_cost_min(g, cost, r);
    stack[sp++] = g->alt[g->ralt[2 * r] + a];
    while (sp > 0) {
        int32_t pos = stack[sp - 1], e = g->el[pos];
        if (GE_KIND(e) == GE_END) {
            sp--;
            continue;
        }
        stack[sp - 1] = pos + 1;
        if (GE_KIND(e) == GE_BYTES) {
            if ((size_t)len + 1 >= cap)
                goto overflow;
            out[len++] = (char)random_byte(g->set + 4 * GE_ARG(e), rng);
            continue;
        }
        r = GE_ARG(e);
        bool wild = sp < max_depth && (size_t)len < cap / 4 && expansions < 20000;
        a = wild ? (int)(gg_rand(rng) % (uint64_t)g->ralt[2 * r + 1]) : alt_cost_min(g, cost, r);
        if (alt_cost(g, cost, r, a) >= INT64_MAX / 4) /* a dead alternative: the cheapest */
            a = alt_cost_min(g, cost, r);
        expansions++;
        if (sp >= (1 << 16))
            goto overflow;
        stack[sp++] = g->alt[g->ralt[2 * r] + a];
    }
    out[len] = 0;
    free(cost);
    free(stack);
    return len;
overflow:
    free(cost);
    free(stack);
    return -1;
}

static const char *const WORDS[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on",
    "name", "age", "value", "type", "id", "items", "count", "price", "title", "true", "false",
    "null", "user", "data", "result", "status", "error", "list", "text", "date", "email",
    "hello", "world", "number", "string", "object", "array", "key", "color", "red", "green",
    "blue", "small", "large", "medium", "yes", "no", "city", "country", "address", "phone"};
static const char *const PIECES[] = {
    "{\"", "\":", "\",", "\"}", "},", "\":\"", " \"", "\n", "  ", "    ", "[", "]", "[{",
    "}]", "\": \"", "\", \"", ", \"", "\":[", "\": [", "\":{", "\": {", "},{", "}, {", "\\u00",
    "\\n", "\\\"", "{\n", "\n}", ",\n", "\n  ", "\n    ", ".", ",", ":", "-", "+", "e-", "E+",
    "\xc3\xa9", "\xc3", "\xa9", "\xc3\xbc", "\xe4\xb8\xad", "\xe4\xb8", "\xad", "\xe6\x96\x87",
    "\xf0\x9f\x98\x80", "\xf0\x9f", "\x98\x80", "a\xc3", "\xa9t", "\xa9\"", "caf\xc3\xa9",
    "\"\xc3"};

gvocab_t *gg_synthetic_vocab(int n_tokens, uint64_t seed, int32_t *eog)
{
    if (n_tokens < 257)
        return NULL;
    int n_pieces = n_tokens - 1;
    char **bytes = calloc((size_t)n_tokens, sizeof *bytes);
    size_t *lens = calloc((size_t)n_tokens, sizeof *lens);
    gvocab_t *v = NULL;
    if (!bytes || !lens)
        goto done;
    uint64_t rng = seed;
    int i = 0;
    for (; i < 256 && i < n_pieces; i++) {
        bytes[i] = malloc(1);
        if (!bytes[i])
            goto done;
        bytes[i][0] = (char)i;
        lens[i] = 1;
    }
    const int n_words = (int)(sizeof WORDS / sizeof *WORDS), n_fixed = (int)(sizeof PIECES / sizeof *PIECES);
    for (int k = 0; i < n_pieces; k++, i++) {
        char buf[64];
        int n;
        if (k < n_fixed) {
            n = snprintf(buf, sizeof buf, "%s", PIECES[k]);
        } else if (k < n_fixed + 2 * n_words) {
            int w = (k - n_fixed) / 2;
            n = snprintf(buf, sizeof buf, "%s%s", (k - n_fixed) % 2 ? " " : "", WORDS[w]);
        } else if (k < n_fixed + 2 * n_words + 1000) {
            n = snprintf(buf, sizeof buf, "%d", k - n_fixed - 2 * n_words);
        } else {
            uint64_t x = gg_rand(&rng);
            int len = 2 + (int)(x % 9), at = 0;
            if (x >> 8 & 1)
                buf[at++] = ' ';
            if ((x >> 9 & 7) == 0)
                buf[at++] = '"';
            for (int c = 0; c < len; c++)
                buf[at++] = (char)('a' + gg_rand(&rng) % 26);
            if ((x >> 12 & 7) == 0)
                buf[at++] = (x >> 15 & 1) ? '"' : ',';
            n = at;
        }
        bytes[i] = malloc((size_t)n + 1);
        if (!bytes[i])
            goto done;
        memcpy(bytes[i], buf, (size_t)n);
        lens[i] = (size_t)n;
    }
    *eog = n_tokens - 1;
    gvocab_new(n_tokens, (const char *const *)bytes, lens, eog, 1, &v);
done:
    for (int k = 0; bytes && k < n_tokens; k++)
        free(bytes[k]);
    free(bytes);
    free(lens);
    return v;
}

long gg_tokenize(const gvocab_t *v, const char *s, size_t n, int32_t *out, size_t cap)
{
    size_t at = 0, k = 0;
    while (at < n) {
        int32_t node = 0, best = -1;
        size_t best_len = 0;
        for (size_t d = 0; at + d < n; d++) { /* children of node are in [node + 1, nend) */
            int32_t c = node + 1, found = -1;
            while (c < v->nend[node]) {
                if (v->nbyte[c] == (uint8_t)s[at + d]) {
                    found = c;
                    break;
                }
                c = v->nend[c];
            }
            if (found < 0)
                break;
            node = found;
            if (v->here1[node] > v->sub0[node]) {
                best = v->sorted[v->sub0[node]];
                best_len = d + 1;
            }
        }
        if (best < 0 || k >= cap)
            return -1;
        out[k++] = best;
        at += best_len;
    }
    return (long)k;
}
