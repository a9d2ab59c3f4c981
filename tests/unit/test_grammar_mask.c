/* SPDX-License-Identifier: Apache-2.0 */
/* test_grammar_mask.c - token masks and matchers (common/grammar/matcher.h,
 * token_grammar.h), as properties:
 *   - a mask equals brute force (every token tried with accept + rollback) along random
 *     walks that pick allowed tokens: so a walk through the mask never leaves the grammar
 *     and no allowed token is missing; over the grammar corpus and a synthetic vocabulary,
 *     a 128k vocabulary (sampled), and with `model` the test model's tokenizer;
 *   - every sentence of the grammar stays reachable token by token (each token of its
 *     tokenization is in the mask, end of generation at the end);
 *   - UTF-8: tokens that split characters, or join the end of one to the start of another;
 *   - rollback and fork give the masks the original had (also through compaction);
 *   - end of generation exactly where the grammar accepts; adversarial grammars end with
 *     DERAS_ERANGE instead of hanging; the cache works past its budget; threads.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/base/status.h"
#include "common/grammar/matcher.h"
#include "grammar_gen.h"
#include "grammar_tok.h"
#include "test_util.h"

static const char *CORPUS[] = {"json.gbnf", "arithmetic.gbnf", "list.gbnf", "c_like.gbnf",
                               "unicode.gbnf"};

static char *read_data(const char *name)
{
    char *text = gg_read_data(name);
    if (!text)
        fail_msg("cannot read tests/data/grammar/%s", name);
    return text;
}

static token_grammar_t *bind(const char *gbnf, const gvocab_t *v, const token_grammar_opts *o)
{
    grammar_t *g = NULL;
    int rc = grammar_from_gbnf(gbnf, strlen(gbnf), NULL, &g);
    if (rc)
        fail_msg("compile: %s", deras_errmsg());
    token_grammar_t *tg = NULL;
    assert_int_equal(token_grammar_new(&g, v, o, &tg), 0);
    assert_null(g);
    return tg;
}

static gmatcher_t *matcher(token_grammar_t *tg, const gmatcher_opts *o)
{
    gmatcher_t *m = NULL;
    int rc = gmatcher_new(tg, o, &m);
    if (rc)
        fail_msg("gmatcher_new: %s", deras_errmsg());
    return m;
}

/* Is t allowed now, by brute force? */
static bool brute(gmatcher_t *m, int32_t t)
{
    int rc = gmatcher_accept(m, t);
    if (rc == 0) {
        assert_int_equal(gmatcher_rollback(m, 1), 0);
        return true;
    }
    assert_int_equal(rc, DERAS_EINVAL);
    return false;
}

/* The mask against brute force over every token (sample > 0: that many random ones plus
 * up to `sample` of the allowed). Returns the allowed count. */
static int check_mask(gmatcher_t *m, const uint32_t *mask, int V, int sample, uint64_t *rng,
                      const char *what)
{
    int allowed = gmask_count(mask, V);
    if (sample <= 0) {
        for (int32_t t = 0; t < V; t++)
            if (brute(m, t) != gmask_get(mask, t))
                fail_msg("%s: token %d: mask %d, brute force %d", what, t, gmask_get(mask, t), !gmask_get(mask, t));
        return allowed;
    }
    for (int k = 0; k < sample; k++) {
        int32_t t = (int32_t)(gg_rand(rng) % (uint64_t)V);
        if (brute(m, t) != gmask_get(mask, t))
            fail_msg("%s: token %d: mask %d, brute force %d", what, t, gmask_get(mask, t), !gmask_get(mask, t));
    }
    int seen = 0; /* the allowed ones, from a random start */
    for (int32_t i = 0, t0 = (int32_t)(gg_rand(rng) % (uint64_t)V); i < V && seen < sample; i++) {
        int32_t t = (t0 + i) % V;
        if (gmask_get(mask, t)) {
            seen++;
            if (!brute(m, t))
                fail_msg("%s: allowed token %d is refused", what, t);
        }
    }
    return allowed;
}

/* A random walk of `steps` tokens drawn from the mask, the mask checked at each step. */
static void walk(token_grammar_t *tg, int steps, int sample, uint64_t seed, const char *what)
{
    const gvocab_t *v = token_grammar_vocab(tg);
    int V = gvocab_size(v);
    uint32_t *mask = calloc(gvocab_mask_words(v), sizeof(uint32_t));
    gmatcher_t *m = matcher(tg, NULL);
    uint64_t rng = seed;
    for (int s = 0; s < steps; s++) {
        assert_int_equal(gmatcher_fill_mask(m, mask), 0);
        int n = check_mask(m, mask, V, sample, &rng, what);
        assert_true(n > 0);
        int pick = (int)(gg_rand(&rng) % (uint64_t)n);
        int32_t t = 0;
        for (; t < V; t++)
            if (gmask_get(mask, t) && pick-- == 0)
                break;
        assert_int_equal(gmatcher_accept(m, t), 0);
        if (gmatcher_is_terminated(m) || gmatcher_n_accepted(m) > 60)
            gmatcher_reset(m);
    }
    gmatcher_destroy(&m);
    free(mask);
}

static void test_masks_brute_force(void **state)
{
    (void)state;
    int32_t eog;
    gvocab_t *v = gg_synthetic_vocab(3000, 11, &eog);
    assert_non_null(v);
    for (size_t i = 0; i < sizeof CORPUS / sizeof *CORPUS; i++) {
        char *text = read_data(CORPUS[i]);
        token_grammar_t *tg = bind(text, v, NULL);
        walk(tg, 150, 0, 100 + i, CORPUS[i]);
        token_grammar_stats st;
        token_grammar_get_stats(tg, &st);
        if (i == 0) /* JSON is recursive: the uncertain path (walks on the live stack) ran */
            assert_true(st.n_uncertain > 0);
        token_grammar_destroy(&tg);
        free(text);
    }
    gvocab_destroy(&v);
}

static void test_masks_128k(void **state)
{
    (void)state;
    int32_t eog;
    gvocab_t *v = gg_synthetic_vocab(128256, 12, &eog);
    assert_non_null(v);
    char *text = read_data("json.gbnf");
    token_grammar_t *tg = bind(text, v, NULL);
    walk(tg, 80, 2000, 7, "json.gbnf at 128k");
    token_grammar_destroy(&tg);
    free(text);
    gvocab_destroy(&v);
}

/* Every sentence of the grammar, tokenized, goes through the mask token by token. */
static void reach(token_grammar_t *tg, const char *s, const int32_t *ids, long n, const char *what)
{
    const gvocab_t *v = token_grammar_vocab(tg);
    uint32_t *mask = calloc(gvocab_mask_words(v), sizeof(uint32_t));
    gmatcher_t *m = matcher(tg, NULL);
    for (long i = 0; i < n; i++) {
        assert_int_equal(gmatcher_fill_mask(m, mask), 0);
        if (!gmask_get(mask, ids[i])) {
            size_t len;
            const char *b = gvocab_token_bytes(v, ids[i], &len);
            char hex[64] = "";
            for (size_t k = 0; b && k < len && k < 16; k++)
                snprintf(hex + 3 * k, 4, "%02x ", (unsigned char)b[k]);
            fail_msg("%s: \"%s\": token %ld (id %d, bytes %s) is not in the mask", what, s, i,
                     ids[i], hex);
        }
        assert_int_equal(gmatcher_accept(m, ids[i]), 0);
    }
    assert_true(gmatcher_is_accepting(m));
    assert_int_equal(gmatcher_fill_mask(m, mask), 0);
    for (int i = 0; i < gvocab_size(v); i++)
        if (gvocab_is_eog(v, i))
            assert_true(gmask_get(mask, i));
    gmatcher_destroy(&m);
    free(mask);
}

static void test_reachable(void **state)
{
    (void)state;
    int32_t eog;
    gvocab_t *v = gg_synthetic_vocab(5000, 13, &eog);
    int32_t ids[4096];
    char buf[4096];
    uint64_t rng = 99;
    for (size_t i = 0; i < sizeof CORPUS / sizeof *CORPUS; i++) {
        char *text = read_data(CORPUS[i]);
        token_grammar_t *tg = bind(text, v, NULL);
        for (int k = 0; k < 60; k++) {
            long n = gg_sentence(token_grammar_grammar(tg), &rng, 10, buf, sizeof buf);
            if (n < 0)
                continue;
            long nt = gg_tokenize(v, buf, (size_t)n, ids, 4096);
            assert_true(nt >= 0);
            reach(tg, buf, ids, nt, CORPUS[i]);
        }
        token_grammar_destroy(&tg);
        free(text);
    }
    gvocab_destroy(&v);
}

/* A vocabulary given as strings (the last id is the end of generation). */
static gvocab_t *small_vocab(const char *const *toks, int n)
{
    const char **b = calloc((size_t)n + 1, sizeof *b);
    size_t *l = calloc((size_t)n + 1, sizeof *l);
    for (int i = 0; i < n; i++) {
        b[i] = toks[i];
        l[i] = strlen(toks[i]);
    }
    int32_t eog = n;
    gvocab_t *v = NULL;
    assert_int_equal(gvocab_new(n + 1, b, l, &eog, 1, &v), 0);
    free(b);
    free(l);
    return v;
}

static void expect_allowed(gmatcher_t *m, const gvocab_t *v, const char *const *toks, int n,
                           const char *allowed_csv)
{
    uint32_t mask[8] = {0};
    assert_int_equal(gmatcher_fill_mask(m, mask), 0);
    char got[512] = "";
    for (int i = 0; i <= n; i++)
        if (gmask_get(mask, i)) {
            strcat(got, i == n ? "<eog>" : toks[i]);
            strcat(got, ",");
        }
    (void)v;
    if (strcmp(got, allowed_csv))
        fail_msg("allowed \"%s\", want \"%s\"", got, allowed_csv);
}

static void test_utf8_boundaries(void **state)
{
    (void)state;
    /* é = C3 A9, ü = C3 BC, 中 = E4 B8 AD */
    static const char *const toks[] = {"\xc3", "\xa9", "\xbc", "\xc3\xa9", "a\xc3", "\xa9" "b",
                                       "\xe4", "\xb8", "\xad", "\xe4\xb8", "b", "a", "\"", "\xa9\""};
    const int n = 14;
    gvocab_t *v = small_vocab(toks, n);
    token_grammar_t *tg = bind("root ::= \"a\"? [\\u00e9\\u4e2d]+ \"b\"\n", v, NULL);
    gmatcher_t *m = matcher(tg, NULL);
    expect_allowed(m, v, toks, n, "\xc3,\xc3\xa9,a\xc3,\xe4,\xe4\xb8,a,");
    assert_int_equal(gmatcher_accept(m, 4), 0); /* "a" + half of é */
    expect_allowed(m, v, toks, n, "\xa9,\xa9" "b,");
    assert_int_equal(gmatcher_accept(m, 2), DERAS_EINVAL); /* half of ü */
    assert_int_equal(gmatcher_accept(m, 1), 0);
    expect_allowed(m, v, toks, n, "\xc3,\xc3\xa9,\xe4,\xe4\xb8,b,");
    assert_int_equal(gmatcher_accept(m, 7), DERAS_EINVAL); /* a continuation at a start */
    assert_int_equal(gmatcher_accept(m, 9), 0);            /* E4 B8 */
    expect_allowed(m, v, toks, n, "\xad,");
    assert_int_equal(gmatcher_accept(m, 8), 0);
    assert_int_equal(gmatcher_accept(m, 10), 0); /* b */
    expect_allowed(m, v, toks, n, "<eog>,");
    assert_true(gmatcher_is_complete(m));
    gmatcher_destroy(&m);
    token_grammar_destroy(&tg);
    /* a negated class over split pieces: any character but '"', then '"' */
    tg = bind("root ::= \"\\\"\" [^\"]* \"\\\"\"\n", v, NULL);
    m = matcher(tg, NULL);
    assert_int_equal(gmatcher_accept(m, 12), 0);
    assert_int_equal(gmatcher_accept(m, 0), 0);
    expect_allowed(m, v, toks, n, "\xa9,\xbc,\xa9" "b,\xb8,\xad,\xa9\",");
    assert_int_equal(gmatcher_accept(m, 13), 0); /* end of é and the closing quote */
    expect_allowed(m, v, toks, n, "<eog>,");
    gmatcher_destroy(&m);
    token_grammar_destroy(&tg);
    gvocab_destroy(&v);
}

static void test_rollback_fork(void **state)
{
    (void)state;
    int32_t eog;
    gvocab_t *v = gg_synthetic_vocab(2000, 14, &eog);
    char *text = read_data("arithmetic.gbnf"); /* never has to end */
    token_grammar_t *tg = bind(text, v, NULL);
    size_t W = gvocab_mask_words(v);
    enum { N = 120 };
    uint32_t *masks = calloc((size_t)(N + 1) * W, sizeof(uint32_t)), *mk = calloc(W, sizeof(uint32_t));
    int32_t toks[N];
    /* a small arena compacts often; its masks must equal the large one's */
    gmatcher_opts small;
    gmatcher_opts_default(&small);
    small.max_nodes = 256;
    gmatcher_t *m = matcher(tg, NULL), *s = matcher(tg, &small);
    uint64_t rng = 3;
    int n = 0;
    for (; n < N; n++) {
        assert_int_equal(gmatcher_fill_mask(m, masks + (size_t)n * W), 0);
        assert_int_equal(gmatcher_fill_mask(s, mk), 0);
        assert_memory_equal(mk, masks + (size_t)n * W, W * 4);
        const uint32_t *cur = masks + (size_t)n * W;
        int c = gmask_count(cur, gvocab_size(v)) - gmask_get(cur, eog);
        if (c == 0)
            break; /* only the end is left */
        int pick = (int)(gg_rand(&rng) % (uint64_t)c);
        int32_t t = 0;
        for (; t < gvocab_size(v); t++)
            if (t != eog && gmask_get(cur, t) && pick-- == 0)
                break;
        toks[n] = t;
        assert_int_equal(gmatcher_accept(m, t), 0);
        assert_int_equal(gmatcher_accept(s, t), 0);
    }
    assert_true(n > 30);
    /* roll back by 1..16 and walk forward again: the same masks */
    for (int k = 0; k < 40; k++) {
        int back = 1 + (int)(gg_rand(&rng) % 16);
        assert_int_equal(gmatcher_rollback_depth(m), 16);
        assert_int_equal(gmatcher_rollback(m, back), 0);
        for (int i = n - back; i < n; i++) {
            assert_int_equal(gmatcher_fill_mask(m, mk), 0);
            assert_memory_equal(mk, masks + (size_t)i * W, W * 4);
            assert_int_equal(gmatcher_accept(m, toks[i]), 0);
        }
    }
    assert_int_equal(gmatcher_rollback(m, 17), DERAS_ERANGE);
    /* a fork at every tenth step continues like the original */
    gmatcher_t *a = matcher(tg, NULL);
    for (int i = 0; i < n; i++) {
        if (i % 10 == 0) {
            gmatcher_t *f = NULL;
            assert_int_equal(gmatcher_fork(a, &f), 0);
            for (int j = i; j < n && j < i + 12; j++) {
                assert_int_equal(gmatcher_fill_mask(f, mk), 0);
                assert_memory_equal(mk, masks + (size_t)j * W, W * 4);
                assert_int_equal(gmatcher_accept(f, toks[j]), 0);
            }
            assert_int_equal(gmatcher_copy(f, a), 0); /* and copy back over it */
            assert_int_equal(gmatcher_fill_mask(f, mk), 0);
            assert_memory_equal(mk, masks + (size_t)i * W, W * 4);
            gmatcher_destroy(&f);
        }
        assert_int_equal(gmatcher_accept(a, toks[i]), 0);
    }
    assert_int_equal(gmatcher_copy(a, s), DERAS_EINVAL); /* different options */
    gmatcher_destroy(&a);
    gmatcher_destroy(&m);
    gmatcher_destroy(&s);
    token_grammar_destroy(&tg);
    free(masks);
    free(mk);
    free(text);
    gvocab_destroy(&v);
}

static void test_end_of_generation(void **state)
{
    (void)state;
    static const char *const toks[] = {"a", "b", "ab", "abc", "c"};
    gvocab_t *v = small_vocab(toks, 5);
    token_grammar_t *tg = bind("root ::= \"ab\" \"c\"?\n", v, NULL);
    gmatcher_t *m = matcher(tg, NULL);
    expect_allowed(m, v, toks, 5, "a,ab,abc,");
    assert_int_equal(gmatcher_accept(m, 5), DERAS_EINVAL); /* end before the grammar is done */
    assert_int_equal(gmatcher_accept(m, 2), 0);
    assert_true(gmatcher_is_accepting(m));
    assert_false(gmatcher_is_complete(m));
    expect_allowed(m, v, toks, 5, "c,<eog>,");
    assert_int_equal(gmatcher_accept(m, 4), 0);
    assert_true(gmatcher_is_complete(m));
    assert_int_equal(gmatcher_accept(m, 5), 0);
    assert_true(gmatcher_is_terminated(m));
    assert_int_equal(gmatcher_accept(m, 0), DERAS_EINVAL);
    expect_allowed(m, v, toks, 5, "<eog>,");
    assert_int_equal(gmatcher_rollback(m, 1), 0);
    assert_false(gmatcher_is_terminated(m));
    assert_int_equal(gmatcher_n_accepted(m), 2);
    assert_int_equal(gmatcher_accept(m, 99), DERAS_EINVAL);
    gmatcher_destroy(&m);
    token_grammar_destroy(&tg);
    gvocab_destroy(&v);
}

static void test_adversarial(void **state)
{
    (void)state;
    static const char *const toks[] = {"(", ")", "x", "a", "b", "c", "y", "aaaa"};
    gvocab_t *v = small_vocab(toks, 8);
    /* nesting past max_depth: a failed matcher, never a crash; rollback revives it */
    token_grammar_t *tg = bind("root ::= \"(\" root \")\" | \"x\"\n", v, NULL);
    gmatcher_t *m = matcher(tg, NULL);
    int rc = 0, i = 0;
    for (; i < 1000 && !rc; i++)
        rc = gmatcher_accept(m, 0);
    assert_int_equal(rc, DERAS_ERANGE);
    assert_true(i > 200);
    uint32_t mask[8];
    assert_int_equal(gmatcher_fill_mask(m, mask), DERAS_ERANGE);
    assert_int_equal(gmatcher_accept(m, 2), DERAS_ERANGE);
    assert_int_equal(gmatcher_rollback(m, 1), 0);
    assert_int_equal(gmatcher_fill_mask(m, mask), 0);
    gmatcher_destroy(&m);
    token_grammar_destroy(&tg);
    /* stacks that double with every token */
    tg = bind("root ::= \"a\" root \"b\" | \"a\" root \"c\" | \"y\"\n", v, NULL);
    m = matcher(tg, NULL);
    for (rc = 0, i = 0; i < 100 && !rc; i++)
        rc = gmatcher_accept(m, 3);
    assert_int_equal(rc, DERAS_ERANGE); /* 2^n distinct stacks: max_stacks */
    assert_non_null(strstr(deras_errmsg(), "max_stacks"));
    gmatcher_destroy(&m);
    token_grammar_destroy(&tg);
    /* nullable doubling: closure work explodes, the budget ends it */
    char dbl[4096] = "root ::= r0 \"x\"\n";
    for (int k = 0; k < 40; k++) {
        char line[64];
        snprintf(line, sizeof line, "r%d ::= r%d r%d | \"\"\n", k, k + 1, k + 1);
        strcat(dbl, line);
    }
    strcat(dbl, "r40 ::= \"a\" | \"\"\n");
    grammar_t *g = NULL;
    assert_int_equal(grammar_from_gbnf(dbl, strlen(dbl), NULL, &g), 0);
    assert_int_equal(token_grammar_new(&g, v, NULL, &tg), 0);
    m = NULL;
    assert_int_equal(gmatcher_new(tg, NULL, &m), DERAS_ERANGE);
    assert_null(m);
    token_grammar_destroy(&tg);
    /* catastrophic regexes parse in linear time */
    const char *cat[] = {"(a|aa)*b", "(a*)*b", "(a+a+)+y", "(a|a?)+c"};
    for (size_t k = 0; k < 4; k++) {
        assert_int_equal(grammar_from_regex(cat[k], strlen(cat[k]), NULL, &g), 0);
        assert_int_equal(token_grammar_new(&g, v, NULL, &tg), 0);
        m = matcher(tg, NULL);
        for (i = 0; i < 2000; i++) {
            assert_int_equal(gmatcher_fill_mask(m, mask), 0);
            assert_true(gmask_get(mask, 7));
            assert_int_equal(gmatcher_accept(m, 7), 0);
        }
        gmatcher_destroy(&m);
        token_grammar_destroy(&tg);
    }
    /* a huge alternation: more stacks at the start than max_stacks */
    size_t cap = 1 << 17, n = 0;
    char *alts = malloc(cap);
    n += (size_t)snprintf(alts, cap, "root ::= \"a0\"");
    for (int k = 1; k < 5000; k++)
        n += (size_t)snprintf(alts + n, cap - n, " | \"a%d\"", k);
    snprintf(alts + n, cap - n, "\n");
    tg = bind(alts, v, NULL);
    assert_int_equal(gmatcher_new(tg, NULL, &m), DERAS_ERANGE);
    gmatcher_opts big;
    gmatcher_opts_default(&big);
    big.max_stacks = 8192;
    assert_int_equal(gmatcher_new(tg, &big, &m), 0); /* or a bigger budget */
    gmatcher_destroy(&m);
    token_grammar_destroy(&tg);
    free(alts);
    gvocab_destroy(&v);
}

static void test_cache_budget_and_threads(void **state)
{
    (void)state;
    int32_t eog;
    gvocab_t *v = gg_synthetic_vocab(4000, 15, &eog);
    char *text = read_data("json.gbnf");
    token_grammar_opts o;
    token_grammar_opts_default(&o);
    o.cache_bytes = 0; /* nothing kept: computed per use, under the mutex */
    o.memo_bytes = 1u << 20;
    token_grammar_t *tg = bind(text, v, &o);
    walk(tg, 40, 0, 21, "json.gbnf without a cache");
    token_grammar_stats st;
    token_grammar_get_stats(tg, &st);
    assert_int_equal(st.n_cached, 0);
    assert_true(st.n_uncached > 0);
    token_grammar_destroy(&tg);
    tg = bind(text, v, NULL);
    assert_int_equal(token_grammar_precompute(tg), 0);
    token_grammar_get_stats(tg, &st);
    assert_int_equal(st.n_cached, st.n_positions);
    token_grammar_destroy(&tg);
    free(text);
    gvocab_destroy(&v);
}

typedef struct thr {
    token_grammar_t *tg;
    uint64_t seed;
    uint32_t sum;
} thr;

static void *thread_walk(void *arg)
{
    thr *t = arg;
    const gvocab_t *v = token_grammar_vocab(t->tg);
    uint32_t *mask = calloc(gvocab_mask_words(v), 4);
    gmatcher_t *m = NULL;
    if (gmatcher_new(t->tg, NULL, &m))
        return NULL;
    uint64_t rng = t->seed;
    for (int s = 0; s < 200; s++) {
        if (gmatcher_fill_mask(m, mask))
            break;
        int c = gmask_count(mask, gvocab_size(v)), pick = (int)(gg_rand(&rng) % (uint64_t)c);
        int32_t tok = 0;
        for (; tok < gvocab_size(v); tok++)
            if (gmask_get(mask, tok) && pick-- == 0)
                break;
        t->sum = t->sum * 31 + (uint32_t)tok;
        if (gvocab_is_eog(v, tok) || gmatcher_accept(m, tok))
            gmatcher_reset(m);
    }
    gmatcher_destroy(&m);
    free(mask);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    int32_t eog;
    gvocab_t *v = gg_synthetic_vocab(4000, 16, &eog);
    char *text = read_data("json.gbnf");
    token_grammar_t *tg = bind(text, v, NULL), *solo = bind(text, v, NULL);
    thr t[4], ref[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        t[i] = (thr){.tg = tg, .seed = 40 + (uint64_t)i};
        ref[i] = (thr){.tg = solo, .seed = 40 + (uint64_t)i};
        pthread_create(&th[i], NULL, thread_walk, &t[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        thread_walk(&ref[i]);
        assert_int_equal(t[i].sum, ref[i].sum);
    }
    token_grammar_destroy(&tg);
    token_grammar_destroy(&solo);
    free(text);
    gvocab_destroy(&v);
}

static void test_mask_helpers(void **state)
{
    (void)state;
    uint32_t mask[2] = {0x5u, 0x1u};
    float logits[33];
    for (int i = 0; i < 33; i++)
        logits[i] = (float)i;
    gmask_apply(mask, logits, 33);
    assert_true(logits[0] == 0.0f && logits[2] == 2.0f && logits[32] == 32.0f);
    assert_true(logits[1] < -1e30f && logits[31] < -1e30f);
    assert_int_equal(gmask_count(mask, 33), 3);
    assert_int_equal(gmask_count(mask, 32), 2);
}

/* ---- the test model's vocabulary (label model) ---- */

static void test_model_vocab(void **state)
{
    (void)state;
    gguf_t *gg = NULL;
    assert_int_equal(gguf_open(test_model_path(), &gg), 0);
    tokenizer_t *tok = NULL;
    assert_int_equal(tokenizer_from_gguf(gg, &tok), 0);
    gguf_destroy(&gg);
    gvocab_t *v = gg_vocab_from_tokenizer(tok);
    assert_non_null(v);
    int32_t ids[8192];
    char buf[4096];
    uint64_t rng = 5;
    for (size_t i = 0; i < sizeof CORPUS / sizeof *CORPUS; i++) {
        char *text = read_data(CORPUS[i]);
        token_grammar_t *tg = bind(text, v, NULL);
        walk(tg, 40, 3000, 200 + i, CORPUS[i]);
        for (int k = 0; k < 30; k++) { /* sentences as the model's tokenizer cuts them */
            long n = gg_sentence(token_grammar_grammar(tg), &rng, 10, buf, sizeof buf);
            size_t nt;
            if (n < 0 || tokenizer_encode(tok, buf, (size_t)n, false, false, ids, 8192, &nt))
                continue;
            bool plain = true; /* SmolLM2 encodes byte 0x1D as <|endoftext|>: not a text token */
            for (size_t j = 0; j < nt; j++)
                plain &= !tokenizer_is_special(tok, ids[j]);
            if (plain)
                reach(tg, buf, ids, (long)nt, CORPUS[i]);
        }
        token_grammar_destroy(&tg);
        free(text);
    }
    gvocab_destroy(&v);
    tokenizer_destroy(&tok);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "model")) {
        const struct CMUnitTest tests[] = {cmocka_unit_test(test_model_vocab)};
        return cmocka_run_group_tests(tests, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks_brute_force),
        cmocka_unit_test(test_masks_128k),
        cmocka_unit_test(test_reachable),
        cmocka_unit_test(test_utf8_boundaries),
        cmocka_unit_test(test_rollback_fork),
        cmocka_unit_test(test_end_of_generation),
        cmocka_unit_test(test_adversarial),
        cmocka_unit_test(test_cache_budget_and_threads),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_mask_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
