/* SPDX-License-Identifier: Apache-2.0 */
/* main.c - the engine embedded in a program that has nothing else of deras: load a model
 * through the loader, run 6 greedy requests together and each one alone, and require the
 * same tokens (the CPU backend computes in f32; a request's reduction order does not
 * depend on its batch). Exit 0 when they agree, 1 otherwise, with the reason on stderr.
 *
 *   engine_alone MODEL        (tests/data/engine-llama in the suite)
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/base/status.h"
#include "engine/loader.h"

#define N_REQ 6
#define MAX_OUT 12

typedef struct outputs {
    int32_t tok[N_REQ][MAX_OUT];
    int n[N_REQ], finished[N_REQ];
} outputs;

static void on_token(void *ctx, uint64_t id, int index, const sample_result *r)
{
    outputs *o = ctx;
    if (o->n[id] < MAX_OUT)
        o->tok[id][o->n[id]++] = r->token;
}

static void on_finish(void *ctx, uint64_t id, int index, const engine_sample_end *end)
{
    outputs *o = ctx;
    o->finished[id]++;
}

/* Requests [first, first + count) on a fresh engine over the loader's model. */
static int run(loader_t *l, int first, int count, const int32_t prompts[N_REQ][32], outputs *o)
{
    engine_opts eo;
    engine_t *e = NULL;
    int rc = loader_engine_opts(l, &eo);
    eo.cb = (engine_callbacks){on_token, on_finish, o};
    if (rc || (rc = engine_new(loader_model(l), &eo, &e)))
        return rc;
    for (int i = first; i < first + count && !rc; i++) {
        engine_request r = {.id = (uint64_t)i, .prompt = prompts[i], .n_prompt = 8 + 4 * i};
        req_params_init(&r.params);
        r.params.max_tokens = MAX_OUT;
        r.params.ignore_eos = true;
        sampling_params_default(&r.params.sp);
        rc = engine_add(e, &r);
    }
    while (!rc && engine_has_work(e))
        rc = engine_step(e, NULL);
    engine_destroy(&e);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: engine_alone MODEL\n");
        return 2;
    }
    /* model_only: this test model has no tokenizer, and the requests ignore EOS anyway */
    loader_opts lo = {.model = argv[1], .max_seqs = N_REQ, .max_batch_tokens = 256,
                      .model_only = true};
    loader_t *l = NULL;
    int rc = loader_load(&lo, "16MiB", NULL, &l);
    if (rc) {
        fprintf(stderr, "engine_alone: %s (%s)\n", deras_errmsg(), deras_status_name(rc));
        return 1;
    }
    const int vocab = loader_config(l)->vocab_size;
    int32_t prompts[N_REQ][32];
    uint64_t s = 0x5EED;
    for (int i = 0; i < N_REQ; i++)
        for (int k = 0; k < 32; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            prompts[i][k] = (int32_t)((s >> 33) % (uint64_t)vocab);
        }
    static outputs together, alone;
    rc = run(l, 0, N_REQ, prompts, &together);
    for (int i = 0; i < N_REQ && !rc; i++)
        rc = run(l, i, 1, prompts, &alone);
    loader_destroy(&l);
    if (rc) {
        fprintf(stderr, "engine_alone: %s (%s)\n", deras_errmsg(), deras_status_name(rc));
        return 1;
    }
    for (int i = 0; i < N_REQ; i++)
        if (together.n[i] != MAX_OUT || alone.n[i] != MAX_OUT || together.finished[i] != 1 ||
            alone.finished[i] != 1 ||
            memcmp(together.tok[i], alone.tok[i], sizeof together.tok[i])) {
            fprintf(stderr, "engine_alone: request %d: %d tokens together, %d alone (finished "
                            "%d and %d times), or different tokens\n",
                    i, together.n[i], alone.n[i], together.finished[i], alone.finished[i]);
            return 1;
        }
    printf("engine_alone: %d requests of %d greedy tokens, the same together and alone, from "
           "an engine built with only its own folders\n", N_REQ, MAX_OUT);
    return 0;
}
