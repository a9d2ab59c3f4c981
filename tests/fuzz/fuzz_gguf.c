/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_gguf.c - libFuzzer target: arbitrary bytes through gguf_open_memory and every accessor.
 *
 * Whatever the input, open must either fail with a message or give an object whose every
 * accessor (and model_config_from_gguf on its metadata) stays inside the input (ASan checks the reads; tensor data is read fully by
 * summing its bytes and, for computable types, dequantized block by block).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/checkpoint/gguf.h"
#include "common/checkpoint/model_config.h"
#include "common/base/status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *keys[] = {
    "general.architecture", "general.alignment", "general.name", "llama.block_count",
    "llama.attention.head_count", "llama.rope.scaling.type",
    "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores", "a", "",
};

static void walk_key(const gguf_t *g, const char *key)
{
    int64_t i;
    double d;
    bool b;
    const char *s;
    size_t len;
    int et;
    uint64_t n;
    (void)gguf_has_key(g, key);
    (void)gguf_get_int(g, key, &i);
    (void)gguf_get_float(g, key, &d);
    (void)gguf_get_bool(g, key, &b);
    if (gguf_get_str(g, key, &s, &len) == DERAS_OK && s[len] != '\0')
        abort();
    if (gguf_get_arr_info(g, key, &et, &n) != DERAS_OK || n > (1u << 20))
        return;
    for (uint64_t k = 0; k < n; k++)
        if (gguf_get_arr_str(g, key, k, &s, &len) == DERAS_OK && s[len] != '\0')
            abort();
    (void)gguf_get_arr_str(g, key, n, &s, &len);
    int32_t *i32 = malloc((size_t)n * sizeof *i32 + 1);
    float *f32 = malloc((size_t)n * sizeof *f32 + 1);
    if (i32 && f32) {
        (void)gguf_get_arr_i32(g, key, i32, n);
        (void)gguf_get_arr_f32(g, key, f32, n);
    }
    free(i32);
    free(f32);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gguf_t *g = NULL;
    if (gguf_open_memory(data, size, "fuzz.gguf", &g) != DERAS_OK) {
        if (g || !deras_errmsg()[0])
            abort();
        return 0;
    }
    (void)gguf_name(g);
    (void)gguf_version(g);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        walk_key(g, keys[k]);
    int64_t nt = gguf_n_tensors(g);
    for (int64_t i = 0; i < nt; i++) {
        tensor_view v, w;
        if (gguf_tensor_at(g, i, &v) != DERAS_OK)
            abort();
        if (gguf_find_tensor(g, v.name, &w) != DERAS_OK || w.data != v.data)
            abort();
        walk_key(g, v.name);
        const uint8_t *p = v.data;
        unsigned sum = 0;
        for (size_t k = 0; k < v.n_bytes; k++)
            sum += p[k];
        (void)sum;
        int64_t numel = tensor_view_numel(&v);
        if (v.dtype != DT_UNSUPPORTED && numel > 0 && numel <= (1 << 16)) {
            float *out = malloc((size_t)numel * sizeof *out);
            if (out && dtype_to_f32(v.dtype, v.data, out, numel) != DERAS_OK)
                abort();
            free(out);
        }
    }
    model_config cfg;
    if (model_config_from_gguf(g, &cfg) == DERAS_OK) {
        if (model_config_validate(&cfg) != DERAS_OK)
            abort();
        float inv[MODEL_MAX_HEAD_DIM / 2];
        char desc[256];
        model_config_rope_inv_freq(&cfg, inv);
        model_config_describe(&cfg, desc, sizeof desc);
    }
    tensor_view v;
    (void)gguf_tensor_at(g, nt, &v);
    (void)gguf_find_tensor(g, "token_embd.weight", &v);
    gguf_destroy(&g);
    return 0;
}
