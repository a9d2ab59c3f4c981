/* SPDX-License-Identifier: Apache-2.0 */
/* engine_workload.c - the random engine workload of engine_workload.h. */
#include "engine_workload.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common/base/status.h"
#include "test_util.h"

int ew_rnd(uint64_t *rng, int lo, int hi)
{
    return lo + (int)(test_rng_next(rng) % (uint64_t)(hi - lo + 1));
}

void ew_make_request(void *shape, int i, uint64_t *rng, int32_t *prompt, engine_request *q)
{
    const ew_shape *s = shape;
    q->n_prompt = ew_rnd(rng, 1, s->max_prompt);
    for (int t = 0; t < q->n_prompt; t++)
        prompt[t] = t < 32 && ew_rnd(rng, 0, 1) ? 3 + t : ew_rnd(rng, 3, s->alphabet_hi);
    q->params.max_tokens = ew_rnd(rng, 1, 60);
    q->params.n = ew_rnd(rng, 1, 4);
    q->params.seed = s->seed_per_request ? (uint64_t)i : s->seed;
    q->params.spec_tokens = s->random_spec_k ? ew_rnd(rng, 0, 5) - 1 : 0;
    sampling_params_default(&q->params.sp);
    q->params.sp.temperature = ew_rnd(rng, 0, 1) ? 0.8f : 0.0f;
}

void ew_run(engine_t *e, int n, uint64_t rng_seed, ew_make_fn make, void *ctx,
            const char *what, ew_result *out)
{
    uint64_t rng = rng_seed;
    int32_t prompt[EW_MAX_PROMPT];
    int *live = malloc((size_t)(n > 0 ? n : 1) * sizeof *live);
    if (!live)
        fail_msg("%s: out of memory", what);
    int n_live = 0;
    *out = (ew_result){0};
    while (out->added < n || engine_has_work(e)) {
        int action = ew_rnd(&rng, 0, 9);
        if (action < 4 && out->added < n) {
            engine_request q = {0};
            make(ctx, out->added, &rng, prompt, &q);
            q.id = (uint64_t)out->added;
            q.prompt = prompt; /* the engine copies it */
            int rc = engine_add(e, &q);
            if (rc != DERAS_OK && rc != DERAS_EBUSY)
                fail_msg("%s: engine_add: %s", what, deras_errmsg());
            if (rc == DERAS_OK)
                live[n_live++] = out->added++;
        } else if (action == 4 && n_live > 0) {
            int k = ew_rnd(&rng, 0, n_live - 1);
            if (engine_abort(e, (uint64_t)live[k]) == DERAS_OK)
                out->aborts++;
            live[k] = live[--n_live];
        } else if (engine_has_work(e)) {
            if (engine_step(e, NULL))
                fail_msg("%s: engine_step: %s", what, deras_errmsg());
            out->steps++;
        }
        if (engine_check(e))
            fail_msg("%s, after %d steps: %s", what, out->steps, deras_errmsg());
    }
    free(live);
}
