/* SPDX-License-Identifier: Apache-2.0 */
/* engine_workload.h - a random workload for engine tests: requests added, aborted and
 * stepped in a random order, with the engine's accounting checked after every action.
 *
 * The test decides what each request is (ew_make_fn); the driver decides when things
 * happen. Used by test_engine (plain engine under a small cache) and test_speculative
 * (the same with drafts rolled back every step).
 */
#ifndef DERAS_TEST_ENGINE_WORKLOAD_H
#define DERAS_TEST_ENGINE_WORKLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

#define EW_MAX_PROMPT 300

/* An integer in [lo, hi] from the workload's stream. */
int ew_rnd(uint64_t *rng, int lo, int hi);

/* Fill request i: its prompt into prompt[0..EW_MAX_PROMPT) and q's fields other than id
 * and prompt (n_prompt included), drawing from *rng. */
typedef void (*ew_make_fn)(void *ctx, int i, uint64_t *rng, int32_t *prompt,
                           engine_request *q);

/* The request shape both engine tests use: a prompt of 1..max_prompt tokens whose first 32
 * positions are often 3 + position (so prefixes repeat) and the rest from 3..alphabet_hi,
 * 1..60 tokens, n 1..4, greedy or temperature 0.8, seeded with `seed` (or, with
 * seed_per_request, with the request's number), and with random_spec_k a per-request k from
 * "no speculation" (-1) to 4. An ew_make_fn with ctx = const ew_shape *. */
typedef struct ew_shape {
    int max_prompt, alphabet_hi;
    uint64_t seed;
    bool seed_per_request, random_spec_k;
} ew_shape;
void ew_make_request(void *shape, int i, uint64_t *rng, int32_t *prompt, engine_request *q);

typedef struct ew_result {
    int added, aborts, steps;
} ew_result;

/* Drive e until n requests were added and it has no work left. Each round draws: 40% add
 * the next request (DERAS_EBUSY: tried again in a later round), 10% abort a random live
 * one, otherwise one step; engine_check runs after every round. Any failure ends the test
 * through fail_msg, naming `what`. */
void ew_run(engine_t *e, int n, uint64_t rng_seed, ew_make_fn make, void *ctx,
            const char *what, ew_result *out);

#endif
