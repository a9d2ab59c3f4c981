/* SPDX-License-Identifier: Apache-2.0 */
/* bench_grammar.c - structured output's costs: compiling a JSON Schema, and the token mask
 * per generated token (common/grammar, docs/structured_output.md).
 *
 *   bench_grammar [--model PATH] [--synthetic N] [--runs R] [--grammar schema|json|both]
 *
 * Vocabularies: the test model's (its tokenizer, --model; default the test model) and a
 * synthetic byte-level vocabulary of N tokens (default 128256, Llama 3's size; 0: none).
 * Grammars: a realistic order schema (nested objects, an array of objects, enums, strings
 * with a pattern and a format, bounded integers, numbers) and JSON mode (recursive: the
 * path with uncertain tokens). The token streams are four realistic documents of the
 * schema, compact and indented, tokenized by the model's tokenizer (greedy longest match
 * for the synthetic vocabulary); JSON mode walks the same documents.
 *
 * Reported (JSON lines on stdout):
 *   compile   schema -> GBNF, GBNF -> grammar, binding to the vocabulary (static contexts),
 *             precompute (every position's split: what a first request would otherwise pay
 *             spread over its tokens), and the memory the cache and memo hold;
 *   mask      gmatcher_fill_mask per token, cold (first pass over a fresh token_grammar:
 *             splits computed on first use) and warm (after it), p50 / p99 / max in us,
 *             over every token of every document, the fastest of --runs for each token;
 *   accept    gmatcher_accept per token, warm, p50 / p99;
 *   apply     gmask_apply on a logits row (what the sampler adds), p50.
 * Timings are wall clock: on a loaded machine take the lowest of several runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/status.h"
#include "common/checkpoint/gguf.h"
#include "common/grammar/matcher.h"
#include "common/schema/json_schema.h"
#include "common/tokenizer/tokenizer.h"
#include "grammar_gen.h"
#include "grammar_tok.h"

static const char SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"order_id\":{\"type\":\"integer\",\"minimum\":1},"
    "\"customer\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":64},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},\"tier\":{\"enum\":[\"free\",\"pro\",\"enterprise\"]}},"
    "\"required\":[\"name\",\"email\",\"tier\"],\"additionalProperties\":false},"
    "\"items\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":20,\"items\":{\"type\":\"object\",\"properties\":{"
    "\"sku\":{\"type\":\"string\",\"pattern\":\"[A-Z]{3}-[0-9]{4}\"},\"qty\":{\"type\":\"integer\",\"minimum\":1,"
    "\"maximum\":999},\"price\":{\"type\":\"number\",\"minimum\":0},\"tags\":{\"type\":\"array\",\"items\":"
    "{\"type\":\"string\"},\"maxItems\":5}},\"required\":[\"sku\",\"qty\",\"price\"],\"additionalProperties\":false}},"
    "\"status\":{\"enum\":[\"pending\",\"paid\",\"shipped\",\"cancelled\"]},"
    "\"notes\":{\"type\":[\"string\",\"null\"]},"
    "\"created\":{\"type\":\"string\",\"format\":\"date-time\"}},"
    "\"required\":[\"order_id\",\"customer\",\"items\",\"status\",\"created\"],\"additionalProperties\":false}";

static const char *const DOCS[] = {
    "{\"order_id\": 1042, \"customer\": {\"name\": \"Ada Lovelace\", \"email\": \"ada@example.com\", "
    "\"tier\": \"pro\"}, \"items\": [{\"sku\": \"BOK-0042\", \"qty\": 2, \"price\": 19.99, \"tags\": "
    "[\"book\", \"history\"]}, {\"sku\": \"PEN-1000\", \"qty\": 10, \"price\": 1.5}], \"status\": "
    "\"paid\", \"notes\": null, \"created\": \"2024-03-14T09:26:53Z\"}",
    "{\n  \"order_id\": 7,\n  \"customer\": {\n    \"name\": \"Grace Hopper\",\n    \"email\": "
    "\"grace.hopper@navy.mil\",\n    \"tier\": \"enterprise\"\n  },\n  \"items\": [\n    {\n      "
    "\"sku\": \"CPU-8086\",\n      \"qty\": 1,\n      \"price\": 299.0,\n      \"tags\": [\"hardware\", "
    "\"vintage\", \"rare\"]\n    }\n  ],\n  \"status\": \"shipped\",\n  \"notes\": \"Leave the parcel "
    "at the front desk, please.\",\n  \"created\": \"2023-12-01T17:05:00+01:00\"\n}",
    "{\"order_id\":55501,\"customer\":{\"name\":\"Jos\xc3\xa9 Mar\xc3\xad" "a O'Neil\",\"email\":"
    "\"jm@correo.es\",\"tier\":\"free\"},\"items\":[{\"sku\":\"TEA-0001\",\"qty\":3,\"price\":4.25,"
    "\"tags\":[\"green\",\"organic\"]},{\"sku\":\"MUG-0200\",\"qty\":1,\"price\":12},{\"sku\":"
    "\"SPN-0007\",\"qty\":4,\"price\":0.99,\"tags\":[]}],\"status\":\"pending\",\"notes\":\"Gift "
    "wrap \\u2014 it is a \\\"surprise\\\"!\",\"created\":\"2025-07-04T12:00:00.250Z\"}",
    "{\"order_id\": 999, \"customer\": {\"name\": \"\xe5\xb1\xb1\xe7\x94\xb0 \xe5\xa4\xaa\xe9\x83\x8e\", "
    "\"email\": \"taro@example.jp\", \"tier\": \"pro\"}, \"items\": [{\"sku\": \"CAM-2024\", \"qty\": 1, "
    "\"price\": 849.5, \"tags\": [\"camera\", \"mirrorless\", \"24mm\", \"kit\", \"new\"]}], "
    "\"status\": \"cancelled\", \"notes\": \"Customer changed their mind.\", \"created\": "
    "\"2024-11-30T23:59:59-05:00\"}",
};
#define N_DOCS (sizeof DOCS / sizeof *DOCS)
#define MAX_TOK 1024

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

typedef struct stream {
    int32_t ids[N_DOCS][MAX_TOK];
    long n[N_DOCS];
    long total;
} stream;

static int fail(const char *what)
{
    fprintf(stderr, "bench_grammar: %s: %s\n", what, deras_errmsg());
    return 1;
}

/* One pass over every document: per-token mask and accept times into mask_t / acc_t
 * (keeping the lowest seen for each token). */
static int pass(token_grammar_t *tg, const stream *s, uint32_t *mask, double *mask_t,
                double *acc_t)
{
    gmatcher_t *m = NULL;
    if (gmatcher_new(tg, NULL, &m))
        return fail("gmatcher_new");
    long k = 0;
    for (size_t d = 0; d < N_DOCS; d++) {
        gmatcher_reset(m);
        for (long i = 0; i < s->n[d]; i++, k++) {
            double t0 = now_us();
            if (gmatcher_fill_mask(m, mask))
                return fail("fill_mask");
            double t1 = now_us();
            if (!gmask_get(mask, s->ids[d][i])) {
                fprintf(stderr, "bench_grammar: document %zu token %ld is not allowed\n", d, i);
                return 1;
            }
            if (gmatcher_accept(m, s->ids[d][i]))
                return fail("accept");
            double t2 = now_us();
            if (t1 - t0 < mask_t[k])
                mask_t[k] = t1 - t0;
            if (t2 - t1 < acc_t[k])
                acc_t[k] = t2 - t1;
        }
        if (!gmatcher_is_accepting(m)) {
            fprintf(stderr, "bench_grammar: document %zu is not complete\n", d);
            return 1;
        }
    }
    gmatcher_destroy(&m);
    return 0;
}

static int bench(const char *vocab_name, const gvocab_t *v, const stream *s, const char *gname,
                 int runs)
{
    double t0 = now_us();
    char *gbnf = NULL;
    size_t n = 0;
    int rc = strcmp(gname, "schema") ? jschema_json_object_gbnf(NULL, &gbnf, &n)
                                     : jschema_to_gbnf(SCHEMA, sizeof SCHEMA - 1, NULL, &gbnf, &n);
    if (rc)
        return fail("schema");
    double t1 = now_us();
    grammar_t *g = NULL;
    if (grammar_from_gbnf(gbnf, n, NULL, &g))
        return fail("grammar");
    grammar_info gi;
    grammar_get_info(g, &gi);
    double t2 = now_us();
    token_grammar_t *tg = NULL, *cold = NULL;
    if (token_grammar_new(&g, v, NULL, &tg))
        return fail("token_grammar");
    double t3 = now_us();
    if (token_grammar_precompute(tg))
        return fail("precompute");
    double t4 = now_us();
    token_grammar_stats st;
    token_grammar_get_stats(tg, &st);
    printf("{\"bench\":\"grammar_compile\",\"vocab\":\"%s\",\"n_vocab\":%d,\"grammar\":\"%s\","
           "\"gbnf_bytes\":%zu,\"rules\":%d,\"elements\":%d,\"positions\":%d,\"schema_to_gbnf_us\":%.1f,"
           "\"gbnf_to_grammar_us\":%.1f,\"bind_us\":%.1f,\"precompute_ms\":%.2f,\"cache_mib\":%.2f,"
           "\"memo_mib\":%.2f,\"uncertain_ids\":%llu}\n",
           vocab_name, gvocab_size(v), gname, n, gi.n_rules, gi.n_elements, st.n_positions,
           t1 - t0, t2 - t1, t3 - t2, (t4 - t3) / 1e3, st.cache_bytes / 1048576.0,
           st.memo_bytes / 1048576.0, (unsigned long long)st.n_uncertain);
    uint32_t *mask = calloc(gvocab_mask_words(v), sizeof(uint32_t));
    double *cold_t = malloc((size_t)s->total * sizeof(double)), *mask_t = malloc((size_t)s->total * sizeof(double));
    double *acc_t = malloc((size_t)s->total * sizeof(double)), *scratch = malloc((size_t)s->total * sizeof(double));
    float *logits = malloc((size_t)gvocab_size(v) * sizeof(float));
    for (long i = 0; i < s->total; i++)
        cold_t[i] = mask_t[i] = acc_t[i] = 1e30;
    /* cold: a fresh binding per run, splits computed as the tokens need them */
    for (int r = 0; r < runs; r++) {
        grammar_t *g2 = NULL;
        if (grammar_from_gbnf(gbnf, n, NULL, &g2) || token_grammar_new(&g2, v, NULL, &cold))
            return fail("cold binding");
        if (pass(cold, s, mask, cold_t, scratch))
            return 1;
        token_grammar_destroy(&cold);
    }
    for (int r = 0; r < runs; r++)
        if (pass(tg, s, mask, mask_t, acc_t))
            return 1;
    double ap[64];
    int n_ap = 0;
    for (int r = 0; r < 64; r++) {
        for (int i = 0; i < gvocab_size(v); i++)
            logits[i] = (float)(i & 7);
        double a0 = now_us();
        gmask_apply(mask, logits, gvocab_size(v));
        ap[n_ap++] = now_us() - a0;
    }
    int N = (int)s->total;
    double cold_sum = 0;
    for (int i = 0; i < N; i++)
        cold_sum += cold_t[i];
    double c50 = pct(cold_t, N, 0.5), c99 = pct(cold_t, N, 0.99), cmax = cold_t[N - 1];
    double w50 = pct(mask_t, N, 0.5), w99 = pct(mask_t, N, 0.99), wmax = mask_t[N - 1];
    double a50 = pct(acc_t, N, 0.5), a99 = pct(acc_t, N, 0.99);
    printf("{\"bench\":\"grammar_mask\",\"vocab\":\"%s\",\"n_vocab\":%d,\"grammar\":\"%s\",\"tokens\":%d,"
           "\"runs\":%d,\"warm_mask_us_p50\":%.2f,\"warm_mask_us_p99\":%.2f,\"warm_mask_us_max\":%.2f,"
           "\"cold_mask_us_p50\":%.2f,\"cold_mask_us_p99\":%.2f,\"cold_mask_us_max\":%.1f,"
           "\"cold_total_ms\":%.2f,\"accept_us_p50\":%.2f,\"accept_us_p99\":%.2f,"
           "\"apply_us_p50\":%.2f}\n",
           vocab_name, gvocab_size(v), gname, N, runs, w50, w99, wmax, c50, c99, cmax,
           cold_sum / 1e3, a50, a99, pct(ap, n_ap, 0.5));
    fflush(stdout);
    free(gbnf);
    free(mask);
    free(cold_t);
    free(mask_t);
    free(acc_t);
    free(scratch);
    free(logits);
    token_grammar_destroy(&tg);
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = getenv("DERAS_TEST_MODEL"), *which = "both";
    int synthetic = 128256, runs = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--synthetic") && i + 1 < argc)
            synthetic = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--grammar") && i + 1 < argc)
            which = argv[++i];
        else {
            fprintf(stderr, "usage: bench_grammar [--model PATH] [--synthetic N] [--runs R] "
                            "[--grammar schema|json|both]\n");
            return 2;
        }
    }
    if (!model) {
        const char *home = getenv("HOME");
        static char path[4096];
        snprintf(path, sizeof path, "%s/.cache/deras/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : "");
        model = path;
    }
    if (runs < 1)
        runs = 1;
    const char *grammars[2] = {"schema", "json"};
    static stream s;
    if (model && *model) {
        gguf_t *gg = NULL;
        tokenizer_t *tok = NULL;
        if (gguf_open(model, &gg) || tokenizer_from_gguf(gg, &tok))
            return fail(model);
        gguf_destroy(&gg);
        gvocab_t *v = gg_vocab_from_tokenizer(tok);
        if (!v)
            return fail("vocabulary");
        s.total = 0;
        for (size_t d = 0; d < N_DOCS; d++) {
            size_t nt;
            if (tokenizer_encode(tok, DOCS[d], strlen(DOCS[d]), false, false, s.ids[d], MAX_TOK, &nt))
                return fail("tokenize");
            s.n[d] = (long)nt;
            s.total += (long)nt;
        }
        for (int k = 0; k < 2; k++)
            if ((!strcmp(which, "both") || !strcmp(which, grammars[k])) &&
                bench("model", v, &s, grammars[k], runs))
                return 1;
        gvocab_destroy(&v);
        tokenizer_destroy(&tok);
    }
    if (synthetic > 256) {
        int32_t eog;
        gvocab_t *v = gg_synthetic_vocab(synthetic, 1, &eog);
        if (!v)
            return fail("synthetic vocabulary");
        s.total = 0;
        for (size_t d = 0; d < N_DOCS; d++) {
            s.n[d] = gg_tokenize(v, DOCS[d], strlen(DOCS[d]), s.ids[d], MAX_TOK);
            if (s.n[d] < 0)
                return fail("tokenize");
            s.total += s.n[d];
        }
        for (int k = 0; k < 2; k++)
            if ((!strcmp(which, "both") || !strcmp(which, grammars[k])) &&
                bench("synthetic", v, &s, grammars[k], runs))
                return 1;
        gvocab_destroy(&v);
    }
    return 0;
}
