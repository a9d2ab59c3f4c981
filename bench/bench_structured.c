/* SPDX-License-Identifier: Apache-2.0 */
/* bench_structured.c - decode throughput with structured output on vs off, in the engine.
 *
 *   bench_structured [--model PATH] [--batches 1,16] [--output 128] [--repeat 5]
 *                    [--threads N] [--schema FILE] [--arms free,schema,schema_inline]
 *   bench_structured --print-schema       the default schema (bench/structured_bench.py)
 *
 * For each batch size B, B chat requests asking for a list of orders run together through
 * one engine, greedy, at most --output tokens each:
 *   schema         the JSON Schema (default: {"orders": [order, ...]}, each order an object
 *                  with an id pattern, a customer with an email, a date, 1..8 lines of sku /
 *                  quantity / price, a total and a status enum), its masks on the engine's
 *                  helper thread, overlapped with the forward pass
 *   schema_inline  the same with the masks computed before the pass on the stepping thread
 *   free           no constraint, each request running exactly as many tokens as it did
 *                  under the schema (ignore_eos, max_tokens = that length; the lengths come
 *                  from the warm-up, and greedy runs repeat them), so the batches shrink
 *                  alike and the arms decode the same number of tokens
 * Decode throughput = tokens generated after every sample's first token / the time from
 * the moment all first tokens were out to the end (prefill left out). The arms are
 * interleaved within each repeat, in a rotating order, so load on a shared machine falls on
 * all of them alike; the best and the median of --repeat runs are reported, with each arm's
 * ratio to free. The grammar is compiled once (the worker's cache does the same), and a
 * warm-up run of each arm fills its token-mask cache before timing, as a server's repeated
 * schema would be.
 *
 * Output: one JSON object on stdout (date, CPU, command, per batch and arm: tok/s best,
 * median, all runs, mask-cache statistics); progress on stderr.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "common/schema/json_schema.h"
#include "common/tokenizer/tokenizer.h"
#include "engine/grammar_cache.h"
#include "engine/loader.h"

#define MAX_PROMPT 256
#define MAX_LIST 8
#define MAX_REPEAT 50
#define MAX_BATCH 64

static const char default_schema[] =
    "{\"type\": \"object\", \"required\": [\"orders\"], \"properties\": {\"orders\": {"
    "\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {"
    "\"order_id\": {\"type\": \"string\", \"pattern\": \"^ORD-[0-9]{6}$\"},"
    "\"customer\": {\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", "
    "\"maxLength\": 40}, \"email\": {\"type\": \"string\", \"format\": \"email\"}}, "
    "\"required\": [\"name\", \"email\"]},"
    "\"date\": {\"type\": \"string\", \"format\": \"date\"},"
    "\"lines\": {\"type\": \"array\", \"minItems\": 1, \"maxItems\": 8, \"items\": {\"type\": "
    "\"object\", \"properties\": {\"sku\": {\"type\": \"string\", \"maxLength\": 12}, "
    "\"qty\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 99}, \"price\": {\"type\": "
    "\"number\", \"minimum\": 0}}, \"required\": [\"sku\", \"qty\", \"price\"]}},"
    "\"total\": {\"type\": \"number\", \"minimum\": 0},"
    "\"status\": {\"enum\": [\"pending\", \"paid\", \"shipped\", \"cancelled\"]}},"
    "\"required\": [\"order_id\", \"customer\", \"date\", \"lines\", \"total\", \"status\"]}}}}";

static const char *const arm_names[] = {"free", "schema", "schema_inline"};
enum { ARM_FREE, ARM_SCHEMA, ARM_INLINE, N_ARMS };

typedef struct clock_tally {
    int batch, n_first;
    int lens[MAX_BATCH];       /* each request's tokens, from on_finish */
    uint64_t generated, after_first;
    double t_first;
    unsigned char seen[MAX_BATCH];
} clock_tally;

static void on_token(void *ctx, uint64_t id, int index, const sample_result *r)
{
    (void)index, (void)r;
    clock_tally *t = ctx;
    t->generated++;
    if (t->n_first == t->batch)
        t->after_first++;
    else if (!t->seen[id]) {
        t->seen[id] = 1;
        if (++t->n_first == t->batch)
            t->t_first = cli_now();
    }
}

static void on_finish(void *ctx, uint64_t id, int index, const engine_sample_end *end)
{
    (void)index;
    clock_tally *t = ctx;
    t->lens[id] = end->n_generated;
    if (end->error != PE_NONE)
        fprintf(stderr, "bench_structured: a sample failed (%s)\n", proto_error_name(end->error));
}

static const char *const subjects[] = {
    "a bookshop", "a bakery", "a hardware store", "a flower shop", "an electronics store",
    "a toy store", "a coffee roaster", "a bicycle shop",
};

/* The decode tokens/s of one run: batch requests of `arm`, request i at most out[i] tokens;
 * got (may be NULL) receives how many each made. */
static int run(loader_t *l, token_grammar_t *tg, int arm, const int32_t (*prompts)[MAX_PROMPT],
               const int *lens, int batch, const int *out, int *got, double *tok_s)
{
    clock_tally t = {.batch = batch};
    engine_opts eo;
    int rc = loader_engine_opts(l, &eo);
    if (rc)
        return rc;
    eo.max_seqs = batch;
    eo.max_live_seqs = batch;
    eo.inline_masks = arm == ARM_INLINE;
    eo.cb = (engine_callbacks){on_token, on_finish, &t};
    engine_t *e = NULL;
    if ((rc = engine_new(loader_model(l), &eo, &e)))
        return rc;
    for (int i = 0; i < batch && !rc; i++) {
        engine_request q = {.id = (uint64_t)i, .prompt = prompts[i], .n_prompt = lens[i],
                            .grammar = arm == ARM_FREE ? NULL : tg};
        req_params_init(&q.params);
        sampling_params_default(&q.params.sp);
        q.params.max_tokens = out[i];
        q.params.ignore_eos = true;
        rc = engine_add(e, &q);
    }
    while (!rc && engine_has_work(e))
        rc = engine_step(e, NULL);
    double t1 = cli_now();
    engine_destroy(&e);
    if (!rc && t.n_first < batch)
        rc = deras_fail(DERAS_EINTERNAL, "bench_structured: not every sample started");
    if (got)
        memcpy(got, t.lens, (size_t)batch * sizeof *got);
    *tok_s = rc ? 0 : (double)t.after_first / (t1 - t.t_first);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(out, cap, "%s", strchr(line, ':') + 2);
            out[strcspn(out, "\n")] = '\0';
            break;
        }
    if (f)
        fclose(f);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = '\0';
    fclose(f);
    return s;
}

int main(int argc, char **argv)
{
    char model_path[4096], cmd[2048] = "";
    cli_default_model(model_path, sizeof model_path);
    int batches[MAX_LIST] = {1, 16}, n_batch = 2, output = 128, repeat = 5, threads = 0;
    bool arms_on[N_ARMS] = {true, true, true};
    const char *schema_path = NULL;
    for (int i = 0; i < argc; i++)
        snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), "%s%s", i ? " " : "", argv[i]);
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        if (!strcmp(a, "--print-schema")) { /* for structured_bench.py's llama.cpp arm */
            puts(default_schema);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bench_structured: option %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--model"))
            snprintf(model_path, sizeof model_path, "%s", v);
        else if (!strcmp(a, "--schema"))
            schema_path = v;
        else if (!strcmp(a, "--output") && !cli_int(a, v, 8, 4096, &x))
            output = (int)x;
        else if (!strcmp(a, "--repeat") && !cli_int(a, v, 1, MAX_REPEAT, &x))
            repeat = (int)x;
        else if (!strcmp(a, "--threads") && !cli_int(a, v, 0, 1024, &x))
            threads = (int)x;
        else if (!strcmp(a, "--batches") || !strcmp(a, "--arms")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            if (!strcmp(a, "--arms"))
                memset(arms_on, 0, sizeof arms_on);
            else
                n_batch = 0;
            for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) {
                int k = -1;
                for (int j = 0; j < N_ARMS; j++)
                    if (!strcmp(s, arm_names[j]))
                        k = j;
                if (!strcmp(a, "--arms") && k < 0) {
                    fprintf(stderr, "bench_structured: no arm %s\n", s);
                    return 2;
                }
                if (!strcmp(a, "--arms"))
                    arms_on[k] = true;
                else if (n_batch < MAX_LIST && !cli_int(a, s, 1, MAX_BATCH, &x))
                    batches[n_batch++] = (int)x;
                else
                    return 2;
            }
        } else {
            fprintf(stderr, "bench_structured: bad option %s %s\n", a, v);
            return 2;
        }
    }
    int max_batch = 1;
    for (int i = 0; i < n_batch; i++)
        max_batch = batches[i] > max_batch ? batches[i] : max_batch;

    int progress_last = -100;
    loader_opts lo = {.model = model_path, .threads = threads, .max_seqs = max_batch,
                      .max_batch_tokens = 2048 > max_batch ? 2048 : max_batch,
                      .max_live_seqs = max_batch, .progress = cli_progress,
                      .progress_ctx = &progress_last};
    loader_t *l = NULL;
    const tokenizer_t *tok;
    gcache_t *cache = NULL;
    token_grammar_t *tg = NULL;
    char *schema = schema_path ? read_file(schema_path) : NULL, *gbnf = NULL;
    size_t gbnf_len;
    engine_opts eo;
    int rc;
    if (schema_path && !schema) {
        fprintf(stderr, "bench_structured: cannot read %s\n", schema_path);
        return 1;
    }
    if ((rc = loader_open(&lo, &l)) || (rc = loader_size_seqs(l, max_batch, 1024)) ||
        (rc = loader_build_model(l)) || (rc = loader_tokenizer(l, &tok)) ||
        (rc = loader_engine_opts(l, &eo)) ||
        (rc = gcache_new(tok, model_get_config(loader_model(l))->vocab_size, eo.eog_ids,
                         eo.n_eog, 0, &cache)) ||
        (rc = jschema_to_gbnf(schema ? schema : default_schema,
                              strlen(schema ? schema : default_schema), NULL, &gbnf, &gbnf_len)) ||
        (rc = gcache_get(cache, gbnf, gbnf_len, &tg))) {
        fprintf(stderr, "bench_structured: %s\n", deras_errmsg());
        return 1;
    }
    static int32_t prompts[MAX_BATCH][MAX_PROMPT];
    int lens[MAX_BATCH];
    for (int i = 0; i < max_batch; i++) {
        char text[512];
        snprintf(text, sizeof text, "<|im_start|>user\nList the orders of %s this week as "
                 "JSON.<|im_end|>\n<|im_start|>assistant\n", subjects[i % 8]);
        size_t n;
        if (tokenizer_encode(tok, text, strlen(text), false, true, prompts[i], MAX_PROMPT, &n)) {
            fprintf(stderr, "bench_structured: %s\n", deras_errmsg());
            return 1;
        }
        lens[i] = (int)n;
    }
    double runs[MAX_LIST][N_ARMS][MAX_REPEAT];
    int cap[MAX_BATCH], made[MAX_BATCH], total[MAX_LIST] = {0};
    for (int i = 0; i < MAX_BATCH; i++)
        cap[i] = output;
    for (int b = 0; b < n_batch; b++) {
        /* warm-up (fills the mask cache, pages the weights) and the schema's lengths, which
         * every arm then runs */
        double x;
        if ((rc = run(l, tg, ARM_SCHEMA, prompts, lens, batches[b], cap, made, &x)))
            goto fail;
        for (int i = 0; i < batches[b]; i++)
            total[b] += made[i];
        for (int a = 0; a < N_ARMS; a++)
            if (arms_on[a] && (rc = run(l, tg, a, prompts, lens, batches[b], made, NULL, &x)))
                goto fail;
        for (int r = 0; r < repeat; r++)
            for (int k = 0; k < N_ARMS; k++) {
                int a = (k + r) % N_ARMS;
                if (!arms_on[a])
                    continue;
                if ((rc = run(l, tg, a, prompts, lens, batches[b], made, NULL, &runs[b][a][r])))
                    goto fail;
                fprintf(stderr, "batch %d, repeat %d, %s: %.1f tok/s\n", batches[b], r + 1,
                        arm_names[a], runs[b][a][r]);
            }
    }
    char cpu[256], date[64];
    cpu_model(cpu, sizeof cpu);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    token_grammar_stats ts;
    token_grammar_get_stats(tg, &ts);
    printf("{\"bench\":\"bench_structured\",\"date\":\"%s\",\"cpu\":\"%s\",\"command\":\"%s\","
           "\"output_tokens\":%d,\"repeat\":%d,\"grammar_positions\":%d,\"positions_cached\":%d,"
           "\"uncertain_tokens\":%llu,\"results\":[", date, cpu, cmd, output, repeat,
           ts.n_positions, ts.n_cached, (unsigned long long)ts.n_uncertain);
    bool first = true;
    for (int b = 0; b < n_batch; b++) {
        double best[N_ARMS] = {0}, med[N_ARMS] = {0};
        for (int a = 0; a < N_ARMS; a++) {
            if (!arms_on[a])
                continue;
            double s[MAX_REPEAT];
            memcpy(s, runs[b][a], (size_t)repeat * sizeof *s);
            qsort(s, (size_t)repeat, sizeof *s, cmp_double);
            best[a] = s[repeat - 1];
            med[a] = repeat % 2 ? s[repeat / 2] : (s[repeat / 2 - 1] + s[repeat / 2]) / 2;
        }
        for (int a = 0; a < N_ARMS; a++) {
            if (!arms_on[a])
                continue;
            printf("%s{\"batch\":%d,\"arm\":\"%s\",\"tokens\":%d,\"best_tok_s\":%.2f,"
                   "\"median_tok_s\":%.2f", first ? "" : ",", batches[b], arm_names[a], total[b],
                   best[a], med[a]);
            first = false;
            if (a != ARM_FREE && arms_on[ARM_FREE])
                printf(",\"best_vs_free\":%.3f,\"median_vs_free\":%.3f", best[a] / best[ARM_FREE],
                       med[a] / med[ARM_FREE]);
            printf(",\"runs\":[");
            for (int r = 0; r < repeat; r++)
                printf(r ? ",%.2f" : "%.2f", runs[b][a][r]);
            printf("]}");
        }
    }
    printf("]}\n");
fail:
    if (rc)
        fprintf(stderr, "bench_structured: %s\n", deras_errmsg());
    free(gbnf);
    free(schema);
    gcache_destroy(&cache);
    loader_destroy(&l);
    return rc ? 1 : 0;
}
