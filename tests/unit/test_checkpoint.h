/* SPDX-License-Identifier: Apache-2.0 */
/* test_checkpoint.h - what the two files of test_checkpoint share: the includes, the
 * fixture lookup (a skip, not a failure, when the fixtures were not made), a field-wise
 * config comparison, and the config tests main() runs from test_checkpoint_config.c.
 * Header only.
 */
#ifndef DERAS_TEST_CHECKPOINT_H
#define DERAS_TEST_CHECKPOINT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "common/checkpoint/checkpoint.h"
#include "common/checkpoint/gguf.h"
#include "common/checkpoint/model_config.h"
#include "common/base/status.h"
#include "test_util.h"

/* $DERAS_TEST_DATA/rel, or a skip when the fixture is missing. */
static inline char *data(const char *rel)
{
    char *p = test_data_path(rel);
    struct stat st;
    if (stat(p, &st) != 0)
        test_skip("%s missing (run the scripts in tests/ref/)", p);
    return p;
}

/* Every field of two configs equal, naming the first that differs. */
static inline void assert_configs_equal(const model_config *a, const model_config *b)
{
#define SAME(f)                                                                              \
    if (a->f != b->f)                                                                      \
        fail_msg("config field " #f ": %g vs %g", (double)a->f, (double)b->f);
    SAME(arch) SAME(n_layers) SAME(d_model) SAME(n_heads) SAME(n_kv_heads) SAME(head_dim)
    SAME(d_ff) SAME(vocab_size) SAME(max_seq_len) SAME(norm_eps) SAME(rope_theta)
    SAME(rope_scaling) SAME(sliding_window) SAME(tied_embeddings) SAME(qkv_bias)
#undef SAME
}

/* test_checkpoint_config.c: model configs from GGUF metadata and config.json */
void tiny_configs_agree_between_gguf_and_hf(void **state);
void hf_configs_read_in_classic_and_v5_form_with_transformers_inv_freq(void **state);
void gguf_rope_freqs_tensor_reproduces_llama3_scaling(void **state);
void hf_config_defaults_follow_transformers(void **state);
void hf_config_refuses_what_deras_does_not_implement(void **state);
void hf_config_type_and_value_errors_name_the_field(void **state);
void gguf_config_defaults_and_errors(void **state);

#endif
