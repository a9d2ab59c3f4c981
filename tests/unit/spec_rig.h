/* SPDX-License-Identifier: Apache-2.0 */
/* spec_rig.h - the engine rig of test_speculative: a small model on the test backend, an
 * engine with a given proposer whose callbacks record every sample's tokens (with the
 * top-2 logprob margin) and finish, greedy runs over a set of prompts, and their
 * comparison with a run without speculation, where a divergence after a near tie
 * (test_util.h's test_near_tie) is counted and anything else fails.
 *
 * Costs: opening loads the model (milliseconds for tests/data/engine-llama, seconds for
 * the test model); a greedy run is the engine's steps; outputs is about 2 MB, so callers
 * allocate it. Failures are cmocka failures naming the call and deras_errmsg().
 */
#ifndef DERAS_TEST_SPEC_RIG_H
#define DERAS_TEST_SPEC_RIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/checkpoint/checkpoint.h"
#include "engine/engine.h"
#include "engine/spec_draft.h"

#define MAX_REQS 64 /* requests per run */
#define MAX_GEN 64  /* tokens recorded per sample */

typedef struct out_seq {
    int32_t tokens[MAX_GEN];
    float margin[MAX_GEN];
    int n, finished;
    finish_reason why;
    spec_counters spec;   /* as on_finish reported it */
} out_seq;

typedef struct outputs {
    out_seq s[MAX_REQS][4];
} outputs;

typedef struct rig {
    checkpoint_t *ck;
    backend_t *be;
    model_t *m;
    const char *path;
    int vocab, max_seqs, max_tokens, k;
} rig;

typedef struct prompts {
    int n;
    int32_t tok[MAX_REQS][160];
    int len[MAX_REQS];
} prompts;

/* Load the model at path with room for max_seqs sequences of drafts up to k. */
void rig_open(rig *g, const char *path, int n_kv_blocks, int max_seqs, int max_tokens,
              int k);
void rig_close(rig *g);
/* An engine with proposer `so` (NULL: none) recording into o; *drafter gets the draft
 * model it needs (free it after the engine). */
engine_t *engine_for(rig *g, outputs *o, const spec_opts *so, bool prefix,
                     model_t **drafter);
/* Step until idle, checking the KV accounting after every step. */
void run_to_end(engine_t *e);
/* Proposer options that always speculate (these tests are about exactness). */
spec_opts proposer(spec_kind kind, int layers, const char *path, int k);
/* Greedy requests for every prompt, run through the engine with `so`; outputs and stats. */
void run_greedy(rig *g, const prompts *pr, const spec_opts *so, int max_out, outputs *o,
                engine_stats *st);
/* Compare with the reference; returns near-tie divergences, fails on any other. */
int compare(const prompts *pr, const outputs *ref, const outputs *got, const char *what);
/* One line of figures for a run identical to the reference. */
void report(const char *what, const engine_stats *st, int n_prompts, int near);
/* tests/data/engine-llama (a skip when DERAS_TEST_DATA is unset). */
const char *engine_model(void);

#endif
