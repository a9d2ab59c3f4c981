/* SPDX-License-Identifier: Apache-2.0 */
/* bench_precision.c - how close each matmul mode (kernels/backend.h: exact, q8) stays to
 * the f32 math of the dequantized weights, on the test model's reference prompts.
 *
 *   bench_precision [--model PATH] [--reference DIR] [--modes exact,q8] [--threads N]
 *                   [--tie 0.1]
 *
 * The reference (tests/data/smollm2/reference.json, made by tests/ref/make_model_reference.py)
 * is transformers computing in f32 on the GGUF's weights dequantized: for each prompt the
 * last-position logits, a 32-token greedy continuation and, at each of its positions, the
 * top-2 logit margin. Per mode and prompt:
 *   - last-position logits: relative L2 and max |diff| / max |logit| against transformers,
 *     and relative L2 against the exact mode (when both run);
 *   - free-running greedy: tokens equal to transformers' before the first difference;
 *   - teacher-forced greedy (the reference continuation fed back, one pass): at each of the
 *     32 positions our argmax against transformers' token; a disagreement where the
 *     reference's top-2 margin is below --tie logits is a near-tie (the two tokens are as
 *     good as tied at this precision), any other is a real disagreement.
 * JSON lines on stdout (one per prompt and mode, then one summary per mode); the model is
 * loaded once per mode. Cost: 13 prompts x (prefill + 32 decode steps + one teacher-forced
 * pass) per mode, a few seconds each on 2 cores.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/checkpoint/checkpoint.h"
#include "common/cli/cli_util.h"
#include "engine/model.h"
#include "kernels/backend.h"

#define N_GREEDY 32
#define MAX_MODES 2

typedef struct run {
    checkpoint_t *ck;
    backend_t *be;
    model_t *m;
    int32_t *table, *rows;
    int cap, vocab;
} run;

static int run_open(run *r, const char *path, int threads, int mode, int cap)
{
    memset(r, 0, sizeof *r);
    const int bs = 16, nb = (cap + bs - 1) / bs;
    model_opts mo = {.max_batch_tokens = cap, .max_seqs = 1, .max_logits = cap,
                     .block_size = bs, .n_kv_blocks = nb, .max_blocks_per_seq = nb};
    int rc;
    if ((rc = checkpoint_open(path, &r->ck)) || (rc = backend_new("cpu", threads, &r->be)) ||
        (rc = backend_set_matmul_mode(r->be, mode)) || (rc = model_new(r->ck, r->be, &mo, &r->m)))
        return rc;
    r->table = malloc((size_t)nb * sizeof(int32_t));
    r->rows = malloc((size_t)cap * sizeof(int32_t));
    for (int i = 0; i < nb; i++)
        r->table[i] = i;
    r->cap = cap;
    r->vocab = checkpoint_config(r->ck)->vocab_size;
    return DERAS_OK;
}

static void run_close(run *r)
{
    model_destroy(&r->m);
    backend_destroy(&r->be);
    checkpoint_destroy(&r->ck);
    free(r->table), free(r->rows);
}

/* tokens[start, start + n) of one sequence; logits of the last row, or of all rows. */
static int step(run *r, const int32_t *tokens, int start, int n, int all, float *out)
{
    int32_t q_start[2] = {0, n}, ctx = start + n;
    for (int i = 0; i < n; i++)
        r->rows[i] = all ? i : n - 1;
    model_batch bt = {n, tokens + start, 1, q_start, &ctx, r->table, all ? n : 1, r->rows, 0, NULL};
    return model_forward(r->m, &bt, out);
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        best = x[i] > x[best] ? i : best;
    return best;
}

static double rel_l2(const float *a, const float *b, int n)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++)
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1));
}

static int32_t *ids_of(const json_t *arr, int *n)
{
    *n = (int)json_array_size(arr);
    int32_t *ids = malloc(((size_t)*n + N_GREEDY + 1) * sizeof(int32_t));
    for (int i = 0; i < *n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return ids;
}

static float *read_f32(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    float *v = malloc(n * sizeof(float));
    if (!f || fread(v, sizeof(float), n, f) != n) {
        fprintf(stderr, "bench_precision: cannot read %zu floats from %s\n", n, path);
        exit(1);
    }
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    char model[4096], refdir[4096];
    cli_default_model(model, sizeof model);
    snprintf(refdir, sizeof refdir, "%s/tests/data/smollm2", DERAS_SOURCE_DIR);
    int modes[MAX_MODES] = {BACKEND_MM_EXACT, BACKEND_MM_Q8}, n_modes = 2, threads = 0;
    double tie = 0.1;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        if (!v) {
            fprintf(stderr, "usage: bench_precision [--model PATH] [--reference DIR] "
                            "[--modes exact,q8] [--threads N] [--tie LOGITS]\n");
            return 2;
        }
        if (!strcmp(a, "--model"))
            snprintf(model, sizeof model, "%s", v);
        else if (!strcmp(a, "--reference"))
            snprintf(refdir, sizeof refdir, "%s", v);
        else if (!strcmp(a, "--threads") && !cli_int(a, v, 0, 1024, &l))
            threads = (int)l;
        else if (!strcmp(a, "--tie") && (tie = atof(v)) >= 0)
            ;
        else if (!strcmp(a, "--modes")) {
            char *copy = strdup(v), *save = NULL;
            n_modes = 0;
            for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
                if (n_modes == MAX_MODES || backend_mm_mode_parse(t, &modes[n_modes++])) {
                    fprintf(stderr, "bench_precision: --modes: %s\n", deras_errmsg());
                    return 2;
                }
            free(copy);
        } else {
            fprintf(stderr, "bench_precision: bad option %s %s\n", a, v);
            return 2;
        }
    }
    char path[8192];
    snprintf(path, sizeof path, "%s/reference.json", refdir);
    json_error_t jerr;
    json_t *ref = json_load_file(path, 0, &jerr), *prompts = json_object_get(ref, "prompts");
    if (!ref || !json_is_array(prompts)) {
        fprintf(stderr, "bench_precision: %s: %s\n", path, ref ? "no prompts" : jerr.text);
        return 1;
    }
    const int vocab = (int)json_integer_value(json_object_get(ref, "vocab_size"));
    const size_t n_prompts = json_array_size(prompts);
    snprintf(path, sizeof path, "%s/%s", refdir,
             json_string_value(json_object_get(ref, "logits_file")));
    float *want = read_f32(path, n_prompts * (size_t)vocab);
    int cap = 0;
    for (size_t i = 0; i < n_prompts; i++) {
        int n = (int)json_array_size(json_object_get(json_array_get(prompts, i), "ids"));
        cap = n + N_GREEDY > cap ? n + N_GREEDY : cap;
    }
    float *exact_last = calloc(n_prompts * (size_t)vocab, sizeof(float));
    float *logits = malloc((size_t)(N_GREEDY + 1) * vocab * sizeof(float));
    int have_exact = 0;
    for (int mi = 0; mi < n_modes; mi++) {
        run r;
        int rc = run_open(&r, model, threads, modes[mi], cap);
        if (rc) {
            fprintf(stderr, "bench_precision: %s\n", deras_errmsg());
            return 1;
        }
        const char *mname = backend_mm_mode_name(modes[mi]);
        double worst_l2 = 0, worst_vs_exact = 0;
        int tf_agree = 0, tf_ties = 0, tf_real = 0, free_equal = 0, free_full = 0;
        for (size_t p = 0; p < n_prompts; p++) {
            const json_t *pj = json_array_get(prompts, p);
            int n, ng;
            int32_t *ids = ids_of(json_object_get(pj, "ids"), &n);
            int32_t *greedy = ids_of(json_object_get(pj, "greedy"), &ng);
            const json_t *margins = json_object_get(pj, "greedy_margins");
            /* last-position logits, then the free-running greedy continuation */
            if ((rc = step(&r, ids, 0, n, 0, logits)))
                break;
            const float *w = want + p * (size_t)vocab;
            double e = rel_l2(logits, w, vocab), maxd = 0, maxw = 0;
            for (int v = 0; v < vocab; v++)
                maxd = fmax(maxd, fabs(logits[v] - w[v])), maxw = fmax(maxw, fabs(w[v]));
            double vs_exact = -1;
            if (modes[mi] == BACKEND_MM_EXACT)
                memcpy(exact_last + p * (size_t)vocab, logits, (size_t)vocab * sizeof(float));
            else if (have_exact)
                vs_exact = rel_l2(logits, exact_last + p * (size_t)vocab, vocab);
            worst_l2 = fmax(worst_l2, e), worst_vs_exact = fmax(worst_vs_exact, vs_exact);
            int equal = 0;
            for (int g = 0; g < N_GREEDY && !rc; g++) {
                ids[n + g] = argmax(logits, vocab);
                if (ids[n + g] != greedy[g])
                    break;
                equal++;
                if (g + 1 < N_GREEDY)
                    rc = step(&r, ids, n + g, 1, 0, logits);
            }
            /* teacher-forced: the prompt's last row and the reference's tokens, one pass */
            memcpy(ids + n, greedy, (size_t)(N_GREEDY - 1) * sizeof(int32_t));
            if (rc)
                break;
            {
                /* the logits of the prompt's last row and of the 31 forced tokens' rows */
                int32_t q_start[2] = {0, n + N_GREEDY - 1}, ctx = n + N_GREEDY - 1;
                for (int g = 0; g < N_GREEDY; g++)
                    r.rows[g] = n - 1 + g;
                model_batch bt = {n + N_GREEDY - 1, ids, 1, q_start, &ctx, r.table, N_GREEDY,
                                  r.rows, 0, NULL};
                if ((rc = model_forward(r.m, &bt, logits)))
                    break;
            }
            int agree = 0, ties = 0, real = 0;
            double worst_margin = 0;
            for (int g = 0; g < N_GREEDY; g++) {
                const int got = argmax(logits + (size_t)g * vocab, vocab);
                const double mg = json_real_value(json_array_get(margins, (size_t)g));
                if (got == greedy[g])
                    agree++;
                else if (mg < tie)
                    ties++, worst_margin = fmax(worst_margin, mg);
                else
                    real++, worst_margin = fmax(worst_margin, mg);
            }
            tf_agree += agree, tf_ties += ties, tf_real += real;
            free_equal += equal, free_full += equal == N_GREEDY;
            printf("{\"bench\":\"precision\",\"mode\":\"%s\",\"prompt\":\"%s\",\"prompt_tokens\":%d,"
                   "\"rel_l2\":%.3e,\"max_diff_over_max_logit\":%.3e,\"rel_l2_vs_exact\":%.3e,"
                   "\"free_greedy_equal\":%d,\"forced_agree\":%d,\"forced_near_ties\":%d,"
                   "\"forced_real\":%d,\"worst_ref_margin_of_a_miss\":%.4f}\n",
                   mname, json_string_value(json_object_get(pj, "name")), n, e, maxd / maxw,
                   vs_exact, equal, agree, ties, real, worst_margin);
            fflush(stdout);
            free(ids), free(greedy);
        }
        if (rc) {
            fprintf(stderr, "bench_precision: %s\n", deras_errmsg());
            return 1;
        }
        have_exact |= modes[mi] == BACKEND_MM_EXACT;
        printf("{\"bench\":\"precision_summary\",\"mode\":\"%s\",\"prompts\":%zu,"
               "\"worst_rel_l2\":%.3e,\"worst_rel_l2_vs_exact\":%.3e,"
               "\"free_greedy_prompts_all_equal\":%d,\"free_greedy_tokens_equal\":%d,"
               "\"forced_tokens\":%zu,\"forced_agree\":%d,\"forced_near_ties\":%d,"
               "\"forced_real\":%d,\"tie_margin\":%.3f}\n",
               mname, n_prompts, worst_l2, worst_vs_exact, free_full, free_equal,
               n_prompts * N_GREEDY, tf_agree, tf_ties, tf_real, tie);
        fflush(stdout);
        run_close(&r);
    }
    free(want), free(exact_last), free(logits);
    json_decref(ref);
    return 0;
}
