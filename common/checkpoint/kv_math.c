/* SPDX-License-Identifier: Apache-2.0 */
/* kv_math.c - memory arithmetic of a model: KV-cache bytes, parameters, weight bytes, KV budgets.
 *
 * Design: small pure functions over a model_config, composed by the caller (deras kvcalc,
 * and later the worker when it sizes its cache), so each step of the arithmetic can be
 * tested alone and printed with its numbers plugged in. All sizes are 64-bit and every
 * multiplication goes through mul_u64/mul_i64, which report overflow as DERAS_ERANGE;
 * the model_config caps keep real models far from it, but sequence lengths, batch sizes
 * and budgets come from users. Tensor-parallel sharding follows vLLM's (Megatron) layout,
 * described in the header; the presets carry published hyperparameters, copied from each
 * model's config.json (the source repository is named next to each).
 */
#include "kv_math.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/base/dtype.h"
#include "common/base/status.h"

/* ---- checked arithmetic ---- */

static int mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (__builtin_mul_overflow(a, b, out))
        return deras_fail(DERAS_ERANGE, "kv math: %llu x %llu overflows 64 bits",
                          (unsigned long long)a, (unsigned long long)b);
    return DERAS_OK;
}

/* a x b and a + b for the parameter counts: set *ovf instead of wrapping */
static int64_t mul_i64(int64_t a, int64_t b, bool *ovf)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        *ovf = true;
    return r;
}

static int64_t add_i64(int64_t a, int64_t b, bool *ovf)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        *ovf = true;
    return r;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* ---- dtypes ---- */

static const struct {
    const char *name;
    int size;
} dtypes[KVMATH_N_DTYPES] = {
    [KVMATH_FP32] = {"fp32", 4},
    [KVMATH_FP16] = {"fp16", 2},
    [KVMATH_BF16] = {"bf16", 2},
    [KVMATH_FP8] = {"fp8", 1},
};

static const struct {
    const char *alias;
    enum kvmath_dtype dt;
} dtype_aliases[] = {
    {"fp32", KVMATH_FP32},  {"float32", KVMATH_FP32}, {"f32", KVMATH_FP32},
    {"fp16", KVMATH_FP16},  {"float16", KVMATH_FP16}, {"f16", KVMATH_FP16},
    {"half", KVMATH_FP16},  {"bf16", KVMATH_BF16},    {"bfloat16", KVMATH_BF16},
    {"fp8", KVMATH_FP8},
};

int kvmath_dtype_parse(const char *name, enum kvmath_dtype *out)
{
    if (!name || !out)
        return deras_fail(DERAS_EINVAL, "kvmath_dtype_parse: NULL argument");
    for (size_t i = 0; i < sizeof dtype_aliases / sizeof dtype_aliases[0]; i++)
        if (!strcasecmp(name, dtype_aliases[i].alias)) {
            *out = dtype_aliases[i].dt;
            return DERAS_OK;
        }
    return deras_fail(DERAS_EINVAL, "unknown dtype '%s' (expected fp32, fp16, bf16 or fp8)",
                      name);
}

static bool dtype_ok(enum kvmath_dtype dt)
{
    return (int)dt >= 0 && dt < KVMATH_N_DTYPES;
}

const char *kvmath_dtype_name(enum kvmath_dtype dt)
{
    return dtype_ok(dt) ? dtypes[dt].name : "invalid";
}

int kvmath_dtype_size(enum kvmath_dtype dt)
{
    return dtype_ok(dt) ? dtypes[dt].size : 0;
}

static const int deras_of[KVMATH_N_DTYPES] = {
    [KVMATH_FP32] = DT_F32, [KVMATH_FP16] = DT_F16, [KVMATH_BF16] = DT_BF16,
    [KVMATH_FP8] = DT_UNSUPPORTED,
};

int kvmath_dtype_to_deras(enum kvmath_dtype dt, int *out)
{
    if (!out || !dtype_ok(dt))
        return deras_fail(DERAS_EINVAL, "kvmath_dtype_to_deras: no dtype %d", (int)dt);
    if (deras_of[dt] == DT_UNSUPPORTED)
        return deras_fail(DERAS_EUNSUPPORTED, "%s: no backend keeps or computes on it",
                          kvmath_dtype_name(dt));
    *out = deras_of[dt];
    return DERAS_OK;
}

int kvmath_dtype_from_deras(int dtype, enum kvmath_dtype *out)
{
    for (int i = 0; out && i < KVMATH_N_DTYPES; i++)
        if (deras_of[i] == dtype && dtype != DT_UNSUPPORTED) {
            *out = (enum kvmath_dtype)i;
            return DERAS_OK;
        }
    return deras_fail(DERAS_EINVAL, "dtype %s is not a KV cache element type (F32, F16, BF16)",
                      dtype_name(dtype));
}

/* ---- KV cache ---- */

int kvmath_shard_heads(const model_config *c, int tp_size, kvmath_shard *out)
{
    if (!c || !out)
        return deras_fail(DERAS_EINVAL, "kvmath_shard_heads: NULL argument");
    if (tp_size < 1)
        return deras_fail(DERAS_EINVAL, "tensor-parallel size must be at least 1 (got %d)",
                          tp_size);
    if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_layers < 1 || c->head_dim < 1)
        return deras_fail(DERAS_EINVAL, "kv math: config has no heads or layers");
    if (c->n_heads % tp_size)
        return deras_fail(DERAS_EUNSUPPORTED,
                          "tensor-parallel size %d does not divide the %d attention heads",
                          tp_size, c->n_heads);
    if (c->n_kv_heads % tp_size && tp_size % c->n_kv_heads)
        return deras_fail(DERAS_EUNSUPPORTED,
                          "tensor-parallel size %d and the %d KV heads: neither divides the "
                          "other, so KV heads can be neither split nor replicated evenly",
                          tp_size, c->n_kv_heads);
    out->tp_size = tp_size;
    out->n_heads = c->n_heads / tp_size;
    if (tp_size <= c->n_kv_heads) {
        out->n_kv_heads = c->n_kv_heads / tp_size;
        out->kv_replicas = 1;
    } else {
        out->n_kv_heads = 1;
        out->kv_replicas = tp_size / c->n_kv_heads;
    }
    return DERAS_OK;
}

int kvmath_token_bytes(const model_config *c, int tp_size, enum kvmath_dtype dt, uint64_t *out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "kvmath_token_bytes: NULL argument");
    if (!dtype_ok(dt))
        return deras_fail(DERAS_EINVAL, "kvmath_token_bytes: invalid dtype %d", (int)dt);
    kvmath_shard s;
    int rc = kvmath_shard_heads(c, tp_size, &s);
    if (rc)
        return rc;
    /* a validated config is far from overflow; an unvalidated one is checked anyway */
    uint64_t b = 2u * (uint64_t)c->n_layers;
    if ((rc = mul_u64(b, (uint64_t)s.n_kv_heads, &b)) ||
        (rc = mul_u64(b, (uint64_t)c->head_dim, &b)) ||
        (rc = mul_u64(b, (uint64_t)kvmath_dtype_size(dt), &b)))
        return rc;
    *out = b;
    return DERAS_OK;
}

int kvmath_block_bytes(uint64_t token_bytes, int block_size, uint64_t *out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "kvmath_block_bytes: NULL argument");
    if (block_size < 1)
        return deras_fail(DERAS_EINVAL, "block size must be at least 1 (got %d)", block_size);
    return mul_u64(token_bytes, (uint64_t)block_size, out);
}

int kvmath_seq_size(uint64_t token_bytes, int block_size, int64_t n_tokens, kvmath_seq *out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "kvmath_seq_size: NULL argument");
    if (block_size < 1)
        return deras_fail(DERAS_EINVAL, "block size must be at least 1 (got %d)", block_size);
    if (n_tokens < 0)
        return deras_fail(DERAS_EINVAL, "sequence length must not be negative (got %lld)",
                          (long long)n_tokens);
    uint64_t block_bytes, bytes;
    int64_t n_blocks = ceil_div(n_tokens, block_size);
    int rc;
    if (n_blocks > INT64_MAX / block_size)
        return deras_fail(DERAS_ERANGE, "sequence of %lld tokens is too long",
                          (long long)n_tokens);
    if ((rc = mul_u64(token_bytes, (uint64_t)block_size, &block_bytes)) ||
        (rc = mul_u64(block_bytes, (uint64_t)n_blocks, &bytes)))
        return rc;
    out->n_tokens = n_tokens;
    out->n_blocks = n_blocks;
    out->n_slots = n_blocks * block_size;
    out->bytes = bytes;
    return DERAS_OK;
}

int kvmath_batch_bytes(const kvmath_seq *s, int64_t n_seqs, uint64_t *out)
{
    if (!s || !out)
        return deras_fail(DERAS_EINVAL, "kvmath_batch_bytes: NULL argument");
    if (n_seqs < 0)
        return deras_fail(DERAS_EINVAL, "batch size must not be negative (got %lld)",
                          (long long)n_seqs);
    return mul_u64(s->bytes, (uint64_t)n_seqs, out);
}

/* ---- parameters and weights ---- */

int kvmath_params_count(const model_config *c, int tp_size, kvmath_params *out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "kvmath_params_count: NULL argument");
    kvmath_shard s;
    int rc = kvmath_shard_heads(c, tp_size, &s);
    if (rc)
        return rc;
    if (c->d_model < 1 || c->d_ff < 1 || c->vocab_size < 1)
        return deras_fail(DERAS_EINVAL, "kv math: config has no hidden, MLP or vocabulary size");
    /* validated configs stay far below 2^63 (every factor < 2^27); others are checked */
    bool ovf = false;
    const int64_t d = c->d_model, L = c->n_layers;
    const int64_t q_rows = (int64_t)s.n_heads * c->head_dim;    /* n_heads/tp * head_dim */
    const int64_t kv_rows = (int64_t)s.n_kv_heads * c->head_dim; /* n_kv_heads/tp * head_dim */
    const int64_t ff = ceil_div(c->d_ff, tp_size), vocab = ceil_div(c->vocab_size, tp_size);

    /* Q, K, V: (rows, d); O: (d, q_rows) */
    int64_t qkv_rows = add_i64(q_rows, mul_i64(2, kv_rows, &ovf), &ovf);
    int64_t attn = add_i64(mul_i64(d, qkv_rows, &ovf), mul_i64(q_rows, d, &ovf), &ovf);
    if (c->qkv_bias)
        attn = add_i64(attn, qkv_rows, &ovf);
    out->embedding = mul_i64(vocab, d, &ovf);
    out->attn = mul_i64(L, attn, &ovf);
    out->mlp = mul_i64(L, mul_i64(3 * ff, d, &ovf), &ovf);
    out->norms = (2 * L + 1) * d; /* both below 2^31 */
    out->lm_head = c->tied_embeddings ? 0 : out->embedding;
    out->total = add_i64(add_i64(out->embedding, out->attn, &ovf),
                         add_i64(add_i64(out->mlp, out->norms, &ovf), out->lm_head, &ovf), &ovf);
    if (ovf)
        return deras_fail(DERAS_ERANGE, "kv math: parameter count overflows 64 bits");
    return DERAS_OK;
}

int kvmath_weight_bytes(const kvmath_params *p, enum kvmath_dtype dt, uint64_t *out)
{
    if (!p || !out)
        return deras_fail(DERAS_EINVAL, "kvmath_weight_bytes: NULL argument");
    if (!dtype_ok(dt))
        return deras_fail(DERAS_EINVAL, "kvmath_weight_bytes: invalid dtype %d", (int)dt);
    if (p->total < 0)
        return deras_fail(DERAS_EINVAL, "kvmath_weight_bytes: negative parameter count");
    return mul_u64((uint64_t)p->total, (uint64_t)kvmath_dtype_size(dt), out);
}

/* ---- budgets ---- */

int kvmath_plan_budget(uint64_t budget, uint64_t block_bytes, int block_size, kvmath_plan *out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "kvmath_plan_budget: NULL argument");
    if (!block_bytes || block_size < 1)
        return deras_fail(DERAS_EINVAL, "kv plan: block of %llu bytes and %d tokens is empty",
                          (unsigned long long)block_bytes, block_size);
    memset(out, 0, sizeof *out);
    out->budget = budget;
    out->block_bytes = block_bytes;
    out->block_size = block_size;
    /* budget < 2^64 and block_bytes >= 1, but n_blocks must fit int64 */
    uint64_t n = budget / block_bytes;
    if (n > (uint64_t)INT64_MAX / (uint64_t)block_size)
        return deras_fail(DERAS_ERANGE, "kv plan: %llu blocks of %d tokens is too many",
                          (unsigned long long)n, block_size);
    out->n_blocks = (int64_t)n;
    out->n_usable_blocks = n ? (int64_t)n - 1 : 0;
    out->n_tokens = out->n_usable_blocks * block_size;
    out->kv_bytes = n * block_bytes; /* <= budget */
    out->budget_used = budget ? (double)out->kv_bytes / (double)budget : 0.0;
    return DERAS_OK;
}

int kvmath_plan_device(uint64_t device_bytes, double utilization, uint64_t weight_bytes,
                       uint64_t block_bytes, int block_size, kvmath_plan *out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "kvmath_plan_device: NULL argument");
    if (!device_bytes)
        return deras_fail(DERAS_EINVAL, "kv plan: device memory must be positive");
    if (!(utilization > 0 && utilization <= 1))
        return deras_fail(DERAS_EINVAL, "kv plan: memory utilization must be in (0, 1] (got %g)",
                          utilization);
    /* utilization <= 1, so the product is below 2^64; round to nearest so that 0.9 x 80 GiB
     * is exactly 72 GiB despite 0.9 being inexact in binary */
    double usable_d = nearbyint((double)device_bytes * utilization);
    uint64_t usable = usable_d >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)usable_d;
    bool fit = weight_bytes <= usable;
    int rc = kvmath_plan_budget(fit ? usable - weight_bytes : 0, block_bytes, block_size, out);
    if (rc)
        return rc;
    out->device_bytes = device_bytes;
    out->utilization = utilization;
    out->usable_bytes = usable;
    out->weight_bytes = weight_bytes;
    out->weights_fit = fit;
    return DERAS_OK;
}

int64_t kvmath_plan_max_seqs(const kvmath_plan *p, int64_t seq_blocks)
{
    if (!p || seq_blocks < 1)
        return 0;
    return p->n_usable_blocks / seq_blocks;
}

/* ---- sizes as text ---- */

static const struct {
    const char *unit;
    double mult;
} size_units[] = {
    {"b", 1.0},
    {"kb", 1e3},  {"mb", 1e6},  {"gb", 1e9},  {"tb", 1e12},
    {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0},
};

int kvmath_parse_size(const char *s, uint64_t *out)
{
    if (!s || !out)
        return deras_fail(DERAS_EINVAL, "kvmath_parse_size: NULL argument");
    /* scan the number ourselves: strtod alone would take signs, hex, inf and nan */
    const char *p = s;
    int n_digits = 0;
    while (isdigit((unsigned char)*p))
        p++, n_digits++;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p))
            p++, n_digits++;
    }
    if (!n_digits)
        return deras_fail(DERAS_EINVAL, "size '%s': expected a number like 80GiB, 24GB or 141e9",
                          s);
    if (*p == 'e' || *p == 'E') {
        const char *q = p + 1;
        if (*q == '+' || *q == '-')
            q++;
        if (isdigit((unsigned char)*q)) {
            while (isdigit((unsigned char)*q))
                q++;
            p = q;
        }
    }
    char num[64];
    size_t len = (size_t)(p - s);
    if (len >= sizeof num)
        return deras_fail(DERAS_EINVAL, "size '%s': number too long", s);
    memcpy(num, s, len);
    num[len] = '\0';
    double v = strtod(num, NULL);

    while (*p == ' ')
        p++;
    double mult = 0;
    if (!*p) {
        mult = 1.0;
    } else {
        for (size_t i = 0; i < sizeof size_units / sizeof size_units[0]; i++)
            if (!strcasecmp(p, size_units[i].unit)) {
                mult = size_units[i].mult;
                break;
            }
    }
    if (mult == 0)
        return deras_fail(DERAS_EINVAL,
                          "size '%s': unknown unit '%s' (expected B, KB, MB, GB, TB, KiB, "
                          "MiB, GiB or TiB)",
                          s, p);
    double bytes = nearbyint(v * mult);
    if (!isfinite(bytes) || bytes >= 9223372036854775808.0)
        return deras_fail(DERAS_ERANGE, "size '%s' is too large (at most 2^63 bytes)", s);
    *out = (uint64_t)bytes;
    return DERAS_OK;
}

void kvmath_format_bytes(uint64_t n, char *buf, size_t cap)
{
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (!buf || !cap)
        return;
    if (n < 1024) {
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
        return;
    }
    double v = (double)n / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.2f %s", v, units[u]);
}

/* ---- presets ---- */

/* The fields every preset sets; rope scaling and windows are added where a model has them. */
#define ARCH(ar, layers, d, heads, kv_heads, hd, ff, vocab, ctx, eps, theta, tied, bias) \
    .arch = (ar), .n_layers = (layers), .d_model = (d), .n_heads = (heads),            \
    .n_kv_heads = (kv_heads), .head_dim = (hd), .d_ff = (ff), .vocab_size = (vocab),    \
    .max_seq_len = (ctx), .norm_eps = (eps), .rope_theta = (theta),                     \
    .tied_embeddings = (tied), .qkv_bias = (bias)

/* Llama 3.1 / 3.2 rope_scaling {"rope_type": "llama3", "factor": f, "low_freq_factor": 1,
 * "high_freq_factor": 4, "original_max_position_embeddings": 8192} */
#define LLAMA3_ROPE(f)                                                                  \
    .rope_scaling = ROPE_SCALING_LLAMA3, .rope_factor = (f), .rope_low_freq_factor = 1, \
    .rope_high_freq_factor = 4, .rope_orig_max_pos = 8192

static const kvmath_preset presets[] = {
    {"llama-2-7b", "meta-llama/Llama-2-7b-hf",
     {ARCH(MODEL_ARCH_LLAMA, 32, 4096, 32, 32, 128, 11008, 32000, 4096, 1e-5f, 10000.0f,
           false, false)}},
    {"llama-2-13b", "meta-llama/Llama-2-13b-hf",
     {ARCH(MODEL_ARCH_LLAMA, 40, 5120, 40, 40, 128, 13824, 32000, 4096, 1e-5f, 10000.0f,
           false, false)}},
    {"llama-2-70b", "meta-llama/Llama-2-70b-hf",
     {ARCH(MODEL_ARCH_LLAMA, 80, 8192, 64, 8, 128, 28672, 32000, 4096, 1e-5f, 10000.0f,
           false, false)}},
    {"llama-3-8b", "meta-llama/Meta-Llama-3-8B",
     {ARCH(MODEL_ARCH_LLAMA, 32, 4096, 32, 8, 128, 14336, 128256, 8192, 1e-5f, 500000.0f,
           false, false)}},
    {"llama-3.1-8b", "meta-llama/Llama-3.1-8B",
     {ARCH(MODEL_ARCH_LLAMA, 32, 4096, 32, 8, 128, 14336, 128256, 131072, 1e-5f, 500000.0f,
           false, false),
      LLAMA3_ROPE(8)}},
    {"llama-3.1-70b", "meta-llama/Llama-3.1-70B",
     {ARCH(MODEL_ARCH_LLAMA, 80, 8192, 64, 8, 128, 28672, 128256, 131072, 1e-5f, 500000.0f,
           false, false),
      LLAMA3_ROPE(8)}},
    {"llama-3.1-405b", "meta-llama/Llama-3.1-405B",
     {ARCH(MODEL_ARCH_LLAMA, 126, 16384, 128, 8, 128, 53248, 128256, 131072, 1e-5f, 500000.0f,
           false, false),
      LLAMA3_ROPE(8)}},
    {"llama-3.2-1b", "meta-llama/Llama-3.2-1B",
     {ARCH(MODEL_ARCH_LLAMA, 16, 2048, 32, 8, 64, 8192, 128256, 131072, 1e-5f, 500000.0f,
           true, false),
      LLAMA3_ROPE(32)}},
    {"llama-3.2-3b", "meta-llama/Llama-3.2-3B",
     {ARCH(MODEL_ARCH_LLAMA, 28, 3072, 24, 8, 128, 8192, 128256, 131072, 1e-5f, 500000.0f,
           true, false),
      LLAMA3_ROPE(32)}},
    {"mistral-7b", "mistralai/Mistral-7B-v0.1",
     {ARCH(MODEL_ARCH_LLAMA, 32, 4096, 32, 8, 128, 14336, 32000, 32768, 1e-5f, 10000.0f,
           false, false),
      .sliding_window = 4096}},
    {"qwen2-0.5b", "Qwen/Qwen2-0.5B",
     {ARCH(MODEL_ARCH_QWEN2, 24, 896, 14, 2, 64, 4864, 151936, 131072, 1e-6f, 1000000.0f,
           true, true)}},
    {"qwen2-7b", "Qwen/Qwen2-7B",
     {ARCH(MODEL_ARCH_QWEN2, 28, 3584, 28, 4, 128, 18944, 152064, 131072, 1e-6f, 1000000.0f,
           false, true)}},
    {"tinyllama-1.1b", "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
     {ARCH(MODEL_ARCH_LLAMA, 22, 2048, 32, 4, 64, 5632, 32000, 2048, 1e-5f, 10000.0f,
           false, false)}},
    {"smollm2-135m", "HuggingFaceTB/SmolLM2-135M",
     {ARCH(MODEL_ARCH_LLAMA, 30, 576, 9, 3, 64, 1536, 49152, 8192, 1e-5f, 100000.0f,
           true, false)}},
};

int kvmath_n_presets(void)
{
    return (int)(sizeof presets / sizeof presets[0]);
}

const kvmath_preset *kvmath_preset_at(int i)
{
    return i >= 0 && i < kvmath_n_presets() ? &presets[i] : NULL;
}

const kvmath_preset *kvmath_preset_find(const char *name)
{
    if (!name)
        return NULL;
    for (int i = 0; i < kvmath_n_presets(); i++)
        if (!strcasecmp(name, presets[i].name))
            return &presets[i];
    return NULL;
}
