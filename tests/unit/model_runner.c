/* SPDX-License-Identifier: Apache-2.0 */
/* model_runner.c - model_runner.h's runner. */
#include "model_runner.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/base/status.h"
#include "test_util.h"

backend_t *runner_backend;

int runner_setup(void **state)
{
    (void)state;
    return backend_new("cpu", 2, &runner_backend);
}

int runner_teardown(void **state)
{
    (void)state;
    backend_destroy(&runner_backend);
    return 0;
}

float *load_f32(const char *path, size_t n)
{
    size_t len = 0;
    char *buf = test_read_file(path, &len);
    if (!buf)
        fail_msg("cannot read %s", path);
    if (len != n * sizeof(float))
        fail_msg("%s: %zu bytes, expected %zu", path, len, n * sizeof(float));
    return (float *)buf;
}

void runner_open_with(runner *r, const char *path, int cap, int block_size, int convert,
                      int kv_dtype)
{
    memset(r, 0, sizeof *r);
    if (checkpoint_open(path, &r->ck))
        fail_msg("checkpoint_open(%s): %s", path, deras_errmsg());
    int nb = (cap + block_size - 1) / block_size;
    model_opts mo = {.max_batch_tokens = cap, .max_seqs = 1, .max_logits = cap,
                     .block_size = block_size, .n_kv_blocks = nb, .max_blocks_per_seq = nb,
                     .convert_weights = convert != AS_STORED, .weight_dtype = convert,
                     .kv_dtype = kv_dtype};
    if (model_new(r->ck, runner_backend, &mo, &r->m))
        fail_msg("model_new(%s%s%s): %s", path, convert != AS_STORED ? " as " : "",
                 convert != AS_STORED ? dtype_name(convert) : "", deras_errmsg());
    r->table = malloc((size_t)nb * sizeof(int32_t));
    /* blocks in reverse order, so a table mix-up cannot pass by accident */
    for (int i = 0; i < nb; i++)
        r->table[i] = nb - 1 - i;
    r->cap = cap;
    r->vocab = checkpoint_config(r->ck)->vocab_size;
}

void runner_open_as(runner *r, const char *path, int cap, int block_size, int convert)
{
    runner_open_with(r, path, cap, block_size, convert, DT_F32);
}

void runner_open(runner *r, const char *path, int cap, int block_size)
{
    runner_open_with(r, path, cap, block_size, AS_STORED, DT_F32);
}

void runner_close(runner *r)
{
    model_destroy(&r->m);
    checkpoint_destroy(&r->ck);
    free(r->table);
}

void runner_step(runner *r, const int32_t *tokens, int start, int n, bool last_only, float *out)
{
    int32_t q_start[2] = {0, n}, ctx = start + n;
    int32_t *rows = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++)
        rows[i] = last_only ? n - 1 : i;
    model_batch bt = {n, tokens + start, 1, q_start, &ctx, r->table, last_only ? 1 : n, rows, 0, NULL};
    if (model_forward(r->m, &bt, out))
        fail_msg("model_forward: %s", deras_errmsg());
    free(rows);
}

int32_t argmax(const float *x, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

void runner_greedy(runner *r, int32_t *ids, int n_prompt, int n_gen, float *logits)
{
    runner_step(r, ids, 0, n_prompt, true, logits);
    for (int i = 0; i < n_gen; i++) {
        ids[n_prompt + i] = argmax(logits, r->vocab);
        if (i + 1 < n_gen)
            runner_step(r, ids, n_prompt + i, 1, true, logits);
    }
}

