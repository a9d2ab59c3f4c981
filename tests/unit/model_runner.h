/* SPDX-License-Identifier: Apache-2.0 */
/* model_runner.h - one sequence at a time through engine/model.h on a 2-thread CPU backend,
 * for the reference tests (test_model_reference): load a checkpoint (as stored, converted
 * at load, or with another KV dtype), run steps, greedy continuations. Failures end the
 * cmocka test (fail_msg). Each runner owns its checkpoint, model and a block table laid
 * out in reverse order, so a table mix-up cannot pass by accident.
 */
#ifndef DERAS_TEST_MODEL_RUNNER_H
#define DERAS_TEST_MODEL_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/checkpoint/checkpoint.h"
#include "engine/model.h"
#include "kernels/backend.h"

/* The CPU backend every runner uses, made by runner_setup (a cmocka group setup) and
 * destroyed by runner_teardown. */
extern backend_t *runner_backend;
int runner_setup(void **state);
int runner_teardown(void **state);

typedef struct runner {
    checkpoint_t *ck;
    model_t *m;
    int32_t *table;
    int cap, vocab;
} runner;

#define AS_STORED (-1)

/* n floats from a raw little-endian f32 file (fails the test when it is short). */
float *load_f32(const char *path, size_t n);
/* convert: AS_STORED, or the enum deras_dtype every matrix is converted to at load;
 * kv_dtype: the KV cache's element type; cap tokens of context in blocks of block_size. */
void runner_open_with(runner *r, const char *path, int cap, int block_size, int convert,
                      int kv_dtype);
void runner_open_as(runner *r, const char *path, int cap, int block_size, int convert);
void runner_open(runner *r, const char *path, int cap, int block_size);
void runner_close(runner *r);
/* Forward tokens[start, start+n) of one sequence; logits for all n rows (or only the last
 * when last_only) into out. */
void runner_step(runner *r, const int32_t *tokens, int start, int n, bool last_only, float *out);
int32_t argmax(const float *x, int n);
/* Greedy continuation of n_gen tokens after prefilling ids[0..n_prompt); ids must have
 * room for n_prompt + n_gen. The first token comes from the prefill's last row. */
void runner_greedy(runner *r, int32_t *ids, int n_prompt, int n_gen, float *logits);

#endif
