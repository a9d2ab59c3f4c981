/* SPDX-License-Identifier: Apache-2.0 */
/* bench_spec.c - speculative decoding: tokens/s and acceptance per proposer.
 *
 *   bench_spec [--model PATH] [--proposers none,ngram,self:12] [--batches 1,16]
 *              [--tasks quote,free] [--output 64] [--k 4] [--repeat 1] [--threads N]
 *
 * For every task, batch size B and proposer, B greedy requests (B different prompts of
 * the task, chat-formatted) run together through one engine until all finish; the wall
 * time covers everything from submission (prefill, drafting, verification), and tokens/s
 * = generated tokens / wall time. Greedy output does not depend on the proposer, so every
 * proposer generates the same tokens and the comparison is like for like. Tasks:
 *   quote  an input-grounded task: repeat a given passage (the kind n-gram lookup serves)
 *   free   free generation: a short story on a topic
 * Each run is repeated --repeat times and the fastest counts (wall times of every repeat
 * are printed too): on a shared machine, interference only ever adds time.
 * The batch cut-off (spec_opts.max_batch) is off here: the point is to find where it
 * should be. Reported (JSON lines on stdout): per run tokens/s, drafts proposed and
 * accepted, acceptance rate, mean accepted drafts per verification, steps, and the
 * speed-up over "none" of the same task and batch. Progress goes to stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/tokenizer/tokenizer.h"
#include "common/cli/cli_util.h"
#include "engine/loader.h"
#include "engine/spec_draft.h"

#define MAX_PROMPT 512
#define MAX_LIST 16

static const char *const passages[] = {
    "The lighthouse stood on a narrow spit of rock, its white paint peeling in long strips. "
    "Every evening the keeper climbed the one hundred and twelve steps, trimmed the wick, and "
    "wrote the weather in a leather book that had belonged to his father.",
    "Photosynthesis takes place in the chloroplasts of plant cells. Light energy splits water "
    "molecules, releasing oxygen, while the energy captured is used to turn carbon dioxide into "
    "glucose, which the plant stores or burns for growth.",
    "To install the package, download the archive, unpack it into a new folder, and run the "
    "setup script from a terminal. The script checks your system, asks where to place the "
    "files, and prints a summary when it is done.",
    "The committee met on Tuesday to review the budget. After a long discussion, members agreed "
    "to fund the new library wing, postpone the road repairs until spring, and hire two more "
    "teachers for the primary school.",
};
static const char *const topics[] = {
    "a dragon who is afraid of the dark", "a robot learning to paint", "a lost city under the sea",
    "two friends crossing a desert", "a cat who runs a bakery", "the last train of the night",
    "a garden that grows at midnight", "an astronaut who hears music in space",
};

typedef struct tally {
    uint64_t generated;
    int done;
} tally;

static void on_token(void *ctx, uint64_t id, int index, const sample_result *r)
{
    (void)id, (void)index, (void)r;
    ((tally *)ctx)->generated++;
}

static void on_finish(void *ctx, uint64_t id, int index, const engine_sample_end *end)
{
    (void)id, (void)index, (void)end;
    ((tally *)ctx)->done++;
}

typedef struct prompt {
    int32_t ids[MAX_PROMPT];
    int n;
} prompt;

static int make_prompt(const tokenizer_t *tok, const char *task, int i, prompt *p)
{
    char text[2048];
    if (!strcmp(task, "quote"))
        snprintf(text, sizeof text, "<|im_start|>user\nRepeat the following text exactly, word "
                 "for word:\n\n%s<|im_end|>\n<|im_start|>assistant\n",
                 passages[i % (int)(sizeof passages / sizeof passages[0])]);
    else
        snprintf(text, sizeof text, "<|im_start|>user\nWrite a short story about %s.<|im_end|>\n"
                 "<|im_start|>assistant\n", topics[i % (int)(sizeof topics / sizeof topics[0])]);
    size_t n = 0;
    int rc = tokenizer_encode(tok, text, strlen(text), false, true, p->ids, MAX_PROMPT, &n);
    p->n = (int)n;
    return rc;
}

typedef struct result {
    double wall, tok_s;
    uint64_t generated, steps;
    spec_counters sp;
} result;

/* One engine over the loader's model with proposer so (and the draft model it needs). */
static int run_one(loader_t *l, const spec_opts *so, const prompt *ps, int batch, int max_out,
                   result *res)
{
    tally t = {0};
    model_t *m = loader_model(l), *drafter = NULL;
    engine_t *e = NULL;
    engine_opts eo;
    int rc = loader_engine_opts(l, &eo);
    if (rc)
        return rc;
    eo.max_seqs = batch;
    eo.max_live_seqs = batch;
    eo.cb = (engine_callbacks){on_token, on_finish, &t};
    eo.spec = *so;
    if ((so->kind == SPEC_SELF || so->kind == SPEC_DRAFT) &&
        (rc = spec_drafter_load(so, m, loader_backend(l), &drafter)))
        return rc;
    eo.drafter = drafter;
    if ((rc = engine_new(m, &eo, &e)))
        goto out;
    double t0 = cli_now();
    for (int i = 0; i < batch; i++) {
        engine_request q = {.id = (uint64_t)i, .prompt = ps[i].ids, .n_prompt = ps[i].n,
                            .params.max_tokens = max_out, .params.n = 1};
        sampling_params_default(&q.params.sp);
        if ((rc = engine_add(e, &q)))
            goto out;
    }
    while (engine_has_work(e))
        if ((rc = engine_step(e, NULL)))
            goto out;
    res->wall = cli_now() - t0;
    engine_stats st;
    engine_get_stats(e, &st);
    res->generated = t.generated;
    res->tok_s = (double)t.generated / res->wall;
    res->steps = st.steps;
    res->sp = st.spec;
out:
    engine_destroy(&e);
    model_destroy(&drafter);
    return rc;
}

/* Split "a,b,c" into at most MAX_LIST entries (pointers into a copy kept in buf). */
static int split(char *buf, const char *s, const char **out)
{
    snprintf(buf, 1024, "%s", s);
    int n = 0;
    for (char *tok = strtok(buf, ","); tok && n < MAX_LIST; tok = strtok(NULL, ","))
        out[n++] = tok;
    return n;
}

int main(int argc, char **argv)
{
    char model_path[4096], pbuf[1024], bbuf[1024], tbuf[1024];
    cli_default_model(model_path, sizeof model_path);
    const char *proposers[MAX_LIST], *batch_s[MAX_LIST], *tasks[MAX_LIST];
    int n_prop = split(pbuf, "none,ngram,self:12", proposers);
    int n_batch = split(bbuf, "1,16", batch_s);
    int n_task = split(tbuf, "quote,free", tasks);
    int max_out = 64, k = 4, threads = 0, repeat = 1;
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long l;
        if (!v) {
            fprintf(stderr, "bench_spec: option %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--model"))
            snprintf(model_path, sizeof model_path, "%s", v);
        else if (!strcmp(a, "--proposers"))
            n_prop = split(pbuf, v, proposers);
        else if (!strcmp(a, "--batches"))
            n_batch = split(bbuf, v, batch_s);
        else if (!strcmp(a, "--tasks"))
            n_task = split(tbuf, v, tasks);
        else if (!strcmp(a, "--output") && !cli_int(a, v, 1, 4096, &l))
            max_out = (int)l;
        else if (!strcmp(a, "--k") && !cli_int(a, v, 1, SPEC_MAX_K, &l))
            k = (int)l;
        else if (!strcmp(a, "--threads") && !cli_int(a, v, 0, 1024, &l))
            threads = (int)l;
        else if (!strcmp(a, "--repeat") && !cli_int(a, v, 1, 100, &l))
            repeat = (int)l;
        else {
            fprintf(stderr, "bench_spec: bad option %s %s\n", a, v);
            return 2;
        }
    }
    int batches[MAX_LIST], max_batch = 1;
    spec_opts sos[MAX_LIST];
    for (int i = 0; i < n_batch; i++) {
        long l;
        if (cli_int("--batches", batch_s[i], 1, 256, &l))
            return 2;
        batches[i] = (int)l;
        max_batch = batches[i] > max_batch ? batches[i] : max_batch;
    }
    for (int i = 0; i < n_prop; i++) {
        spec_opts_default(&sos[i]);
        sos[i].k = k;
        sos[i].max_batch = 0;
        if (spec_opts_parse_proposer(proposers[i], &sos[i]) || spec_opts_check(&sos[i])) {
            fprintf(stderr, "bench_spec: %s\n", deras_errmsg());
            return 2;
        }
    }
    for (int i = 0; i < n_task; i++)
        if (strcmp(tasks[i], "quote") && strcmp(tasks[i], "free")) {
            fprintf(stderr, "bench_spec: --tasks: expected quote and/or free, got %s\n", tasks[i]);
            return 2;
        }

    loader_t *l = NULL;
    const tokenizer_t *tok = NULL;
    prompt *ps = calloc((size_t)max_batch, sizeof *ps);
    int rc;
    if (!ps) {
        rc = deras_fail(DERAS_ENOMEM, "out of memory");
        goto fail;
    }
    /* rows for k drafts per sequence; room for the longest prompt, the output and a
     * block's slack for drafts past the end */
    int progress_last = -100;
    spec_opts rows_spec = {.kind = SPEC_NGRAM, .k = k};
    loader_opts lo = {.model = model_path, .threads = threads, .max_seqs = max_batch,
                      .max_batch_tokens = 512, .max_live_seqs = max_batch,
                      .prefix_caching = true, .spec = rows_spec, .progress = cli_progress,
                      .progress_ctx = &progress_last};
    if ((rc = loader_open(&lo, &l)) || (rc = loader_tokenizer(l, &tok)) ||
        (rc = loader_size_seqs(l, max_batch, (MAX_PROMPT + max_out + SPEC_MAX_K) / 16 * 16 + 16)) ||
        (rc = loader_build_model(l)))
        goto fail;
    printf("{\"bench\":\"spec_setup\",\"model\":\"%s\",\"output\":%d,\"k\":%d,\"threads\":%d,"
           "\"repeat\":%d}\n", model_path, max_out, k, threads, repeat);
    fflush(stdout);
    for (int ti = 0; ti < n_task; ti++)
        for (int bi = 0; bi < n_batch; bi++) {
            int B = batches[bi];
            for (int i = 0; i < B; i++)
                if ((rc = make_prompt(tok, tasks[ti], i, &ps[i])))
                    goto fail;
            double base = 0;
            for (int pi = 0; pi < n_prop; pi++) {
                fprintf(stderr, "task %s, batch %d, proposer %s...\n", tasks[ti], B, proposers[pi]);
                result r, best = {0};
                char walls[256] = "";
                for (int rep = 0; rep < repeat; rep++) {
                    if ((rc = run_one(l, &sos[pi], ps, B, max_out, &r)))
                        goto fail;
                    size_t o = strlen(walls);
                    snprintf(walls + o, sizeof walls - o, "%s%.2f", rep ? "," : "", r.wall);
                    if (rep == 0 || r.wall < best.wall)
                        best = r;
                }
                r = best;
                if (sos[pi].kind == SPEC_NONE)
                    base = r.tok_s;
                printf("{\"bench\":\"spec\",\"task\":\"%s\",\"batch\":%d,\"proposer\":\"%s\","
                       "\"k\":%d,\"wall_s\":%.2f,\"generated\":%llu,\"tokens_per_s\":%.2f,"
                       "\"speedup\":%.3f,\"proposed\":%llu,\"accepted\":%llu,"
                       "\"acceptance\":%.3f,\"mean_accepted\":%.2f,\"steps\":%llu,"
                       "\"wall_s_runs\":[%s]}\n",
                       tasks[ti], B, proposers[pi], k, r.wall, (unsigned long long)r.generated,
                       r.tok_s, base > 0 ? r.tok_s / base : 0.0,
                       (unsigned long long)r.sp.proposed, (unsigned long long)r.sp.accepted,
                       r.sp.proposed ? (double)r.sp.accepted / (double)r.sp.proposed : 0.0,
                       r.sp.verifications ? (double)r.sp.accepted / (double)r.sp.verifications
                                          : 0.0,
                       (unsigned long long)r.steps, walls);
                fflush(stdout);
            }
        }
    rc = 0;
fail:
    if (rc)
        fprintf(stderr, "bench_spec: %s\n", deras_errmsg());
    free(ps);
    loader_destroy(&l);
    return rc ? 1 : 0;
}
