/* SPDX-License-Identifier: Apache-2.0 */
/* test_kv_math.c - KV-cache, parameter and budget arithmetic (common/checkpoint/kv_math.c).
 *
 * Pins the KV formula on published architectures (Llama-2-7B at 4096 tokens fp16 is
 * exactly 2 GiB; GQA and MQA models), block rounding, parameter counts against the
 * published counts of the presets, tensor-parallel division (KV heads split, then
 * replicated), budget planning including budgets that hold nothing, and size strings.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/checkpoint/kv_math.h"
#include "common/checkpoint/model_config.h"
#include "common/base/status.h"
#include "test_util.h"

static const model_config *preset(const char *name)
{
    const kvmath_preset *p = kvmath_preset_find(name);
    if (!p)
        fail_msg("preset '%s' not found", name);
    return &p->config;
}

static uint64_t token_bytes(const model_config *c, int tp, enum kvmath_dtype dt)
{
    uint64_t b = 0;
    int rc = kvmath_token_bytes(c, tp, dt, &b);
    if (rc)
        fail_msg("kvmath_token_bytes(tp %d): %s", tp, deras_errmsg());
    return b;
}

static kvmath_params params(const model_config *c, int tp)
{
    kvmath_params p;
    int rc = kvmath_params_count(c, tp, &p);
    if (rc)
        fail_msg("kvmath_params_count(tp %d): %s", tp, deras_errmsg());
    return p;
}

/* A valid config for synthetic cases (MQA, odd vocabularies). */
static model_config small_config(int n_heads, int n_kv_heads)
{
    model_config c;
    memset(&c, 0, sizeof c);
    c.arch = MODEL_ARCH_LLAMA;
    c.n_layers = 4;
    c.head_dim = 64;
    c.n_heads = n_heads;
    c.n_kv_heads = n_kv_heads;
    c.d_model = n_heads * 64;
    c.d_ff = 4 * c.d_model;
    c.vocab_size = 1000;
    c.max_seq_len = 2048;
    c.norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    return c;
}

/* ---- the KV formula ---- */

static void test_llama2_7b_fp16_4096_tokens_is_exactly_2_GiB(void **state)
{
    const model_config *c = preset("llama-2-7b");
    uint64_t tb = token_bytes(c, 1, KVMATH_FP16);
    if (tb != 524288)
        fail_msg("llama-2-7b fp16: expected 524288 bytes per token, got %llu",
                 (unsigned long long)tb);
    kvmath_seq s;
    assert_int_equal(kvmath_seq_size(tb, 16, 4096, &s), DERAS_OK);
    if (s.bytes != 2147483648ull)
        fail_msg("llama-2-7b fp16 4096 tokens: expected 2147483648 bytes, got %llu",
                 (unsigned long long)s.bytes);
    assert_int_equal(s.n_blocks, 256);
    assert_int_equal(s.n_slots, 4096);
    uint64_t bb;
    assert_int_equal(kvmath_block_bytes(tb, 16, &bb), DERAS_OK);
    assert_int_equal(bb, 8388608);
}

static void test_without_gqa_token_bytes_are_2_layers_hidden_bytes(void **state)
{
    const char *names[] = {"llama-2-7b", "llama-2-13b"};
    for (size_t i = 0; i < 2; i++) {
        const model_config *c = preset(names[i]);
        assert_int_equal(c->n_heads, c->n_kv_heads);
        for (int dt = 0; dt < KVMATH_N_DTYPES; dt++) {
            uint64_t want = 2ull * c->n_layers * c->d_model * kvmath_dtype_size(dt);
            uint64_t got = token_bytes(c, 1, dt);
            if (got != want)
                fail_msg("%s %s: expected 2 x layers x hidden x bytes = %llu, got %llu",
                         names[i], kvmath_dtype_name(dt), (unsigned long long)want,
                         (unsigned long long)got);
        }
    }
}

static void test_gqa_models_store_only_their_kv_heads(void **state)
{
    static const struct {
        const char *name;
        uint64_t fp16_bytes; /* 2 x layers x kv_heads x head_dim x 2 */
    } cases[] = {
        {"llama-3-8b", 131072},     /* 2 x 32 x 8 x 128 x 2 */
        {"llama-3.1-70b", 327680},  /* 2 x 80 x 8 x 128 x 2 */
        {"llama-2-70b", 327680},
        {"mistral-7b", 131072},
        {"qwen2-7b", 57344},        /* 2 x 28 x 4 x 128 x 2 */
        {"tinyllama-1.1b", 22528},  /* 2 x 22 x 4 x 64 x 2 */
        {"smollm2-135m", 23040},    /* 2 x 30 x 3 x 64 x 2 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t got = token_bytes(preset(cases[i].name), 1, KVMATH_FP16);
        if (got != cases[i].fp16_bytes)
            fail_msg("%s fp16: expected %llu bytes per token, got %llu", cases[i].name,
                     (unsigned long long)cases[i].fp16_bytes, (unsigned long long)got);
    }
    /* the dtype scales it linearly */
    const model_config *c = preset("llama-3-8b");
    assert_int_equal(token_bytes(c, 1, KVMATH_FP32), 262144);
    assert_int_equal(token_bytes(c, 1, KVMATH_BF16), 131072);
    assert_int_equal(token_bytes(c, 1, KVMATH_FP8), 65536);
}

static void test_mqa_one_kv_head_whatever_the_tp_size(void **state)
{
    model_config c = small_config(32, 1);
    assert_int_equal(model_config_validate(&c), DERAS_OK);
    assert_int_equal(token_bytes(&c, 1, KVMATH_FP16), 2 * 4 * 1 * 64 * 2);
    /* 4 ranks, 1 KV head: every rank holds the one head, replicated 4 times */
    kvmath_shard s;
    assert_int_equal(kvmath_shard_heads(&c, 4, &s), DERAS_OK);
    assert_int_equal(s.n_heads, 8);
    assert_int_equal(s.n_kv_heads, 1);
    assert_int_equal(s.kv_replicas, 4);
    assert_int_equal(token_bytes(&c, 4, KVMATH_FP16), 2 * 4 * 1 * 64 * 2);
}

static void test_dtypes_by_name(void **state)
{
    static const struct {
        const char *name;
        enum kvmath_dtype dt;
        int size;
    } ok[] = {
        {"fp32", KVMATH_FP32, 4}, {"FP16", KVMATH_FP16, 2}, {"bf16", KVMATH_BF16, 2},
        {"fp8", KVMATH_FP8, 1},   {"float16", KVMATH_FP16, 2}, {"bfloat16", KVMATH_BF16, 2},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        enum kvmath_dtype dt;
        if (kvmath_dtype_parse(ok[i].name, &dt))
            fail_msg("'%s': expected a dtype, got error %s", ok[i].name, deras_errmsg());
        assert_int_equal(dt, ok[i].dt);
        assert_int_equal(kvmath_dtype_size(dt), ok[i].size);
    }
    assert_string_equal(kvmath_dtype_name(KVMATH_BF16), "bf16");
    assert_string_equal(kvmath_dtype_name((enum kvmath_dtype)99), "invalid");
    assert_int_equal(kvmath_dtype_size((enum kvmath_dtype)-1), 0);
    enum kvmath_dtype dt;
    assert_int_equal(kvmath_dtype_parse("int4", &dt), DERAS_EINVAL);
    assert_non_null(strstr(deras_errmsg(), "int4"));
    assert_int_equal(kvmath_dtype_parse("", &dt), DERAS_EINVAL);
    uint64_t b;
    assert_int_equal(kvmath_token_bytes(preset("llama-2-7b"), 1, (enum kvmath_dtype)7, &b),
                     DERAS_EINVAL);
}

/* ---- blocks ---- */

static void test_sequences_round_up_to_whole_blocks(void **state)
{
    static const struct {
        int64_t n_tokens;
        int block_size;
        int64_t n_blocks, n_slots;
    } cases[] = {
        {0, 16, 0, 0},   {1, 16, 1, 16},     {15, 16, 1, 16},      {16, 16, 1, 16},
        {17, 16, 2, 32}, {4096, 16, 256, 4096}, {4097, 16, 257, 4112}, {100, 1, 100, 100},
        {100, 32, 4, 128},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvmath_seq s;
        assert_int_equal(kvmath_seq_size(1000, cases[i].block_size, cases[i].n_tokens, &s),
                         DERAS_OK);
        if (s.n_blocks != cases[i].n_blocks || s.n_slots != cases[i].n_slots ||
            s.bytes != (uint64_t)cases[i].n_blocks * cases[i].block_size * 1000)
            fail_msg("%lld tokens in blocks of %d: expected %lld blocks / %lld slots, got "
                     "%lld / %lld (%llu bytes)",
                     (long long)cases[i].n_tokens, cases[i].block_size,
                     (long long)cases[i].n_blocks, (long long)cases[i].n_slots,
                     (long long)s.n_blocks, (long long)s.n_slots, (unsigned long long)s.bytes);
        assert_int_equal(s.n_tokens, cases[i].n_tokens);
    }
    kvmath_seq s;
    assert_int_equal(kvmath_seq_size(1000, 0, 10, &s), DERAS_EINVAL);
    assert_int_equal(kvmath_seq_size(1000, 16, -1, &s), DERAS_EINVAL);
    assert_int_equal(kvmath_seq_size(UINT64_MAX / 8, 16, 1000, &s), DERAS_ERANGE);
    assert_int_equal(kvmath_seq_size(0, 16, INT64_MAX, &s), DERAS_ERANGE);
    uint64_t b;
    assert_int_equal(kvmath_block_bytes(1, 0, &b), DERAS_EINVAL);
    assert_int_equal(kvmath_block_bytes(UINT64_MAX / 2, 16, &b), DERAS_ERANGE);
}

static void test_batch_is_sequences_times_sequence_bytes(void **state)
{
    kvmath_seq s;
    assert_int_equal(kvmath_seq_size(524288, 16, 4096, &s), DERAS_OK);
    uint64_t b;
    assert_int_equal(kvmath_batch_bytes(&s, 8, &b), DERAS_OK);
    assert_int_equal(b, 8ull << 31);
    assert_int_equal(kvmath_batch_bytes(&s, 0, &b), DERAS_OK);
    assert_int_equal(b, 0);
    assert_int_equal(kvmath_batch_bytes(&s, -1, &b), DERAS_EINVAL);
    assert_int_equal(kvmath_batch_bytes(&s, INT64_MAX, &b), DERAS_ERANGE);
}

/* ---- parameters ---- */

static void test_parameter_counts_match_the_published_ones(void **state)
{
    /* counts from the model cards / safetensors metadata of each source repository */
    static const struct {
        const char *name;
        double published;
    } cases[] = {
        {"llama-2-7b", 6.74e9},     {"llama-2-13b", 13.02e9},   {"llama-2-70b", 68.98e9},
        {"llama-3-8b", 8.03e9},     {"llama-3.1-8b", 8.03e9},   {"llama-3.1-70b", 70.55e9},
        {"llama-3.1-405b", 405.85e9}, {"llama-3.2-1b", 1.24e9}, {"llama-3.2-3b", 3.21e9},
        {"mistral-7b", 7.24e9},     {"qwen2-0.5b", 0.494e9},    {"qwen2-7b", 7.62e9},
        {"tinyllama-1.1b", 1.1e9},  {"smollm2-135m", 134.5e6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kvmath_params p = params(preset(cases[i].name), 1);
        double rel = fabs((double)p.total - cases[i].published) / cases[i].published;
        if (rel > 0.005)
            fail_msg("%s: expected about %.4g parameters (within 0.5%%), got %lld (off by "
                     "%.2f%%)",
                     cases[i].name, cases[i].published, (long long)p.total, 100 * rel);
    }
    /* exact where the count is known to the parameter */
    assert_int_equal(params(preset("llama-2-7b"), 1).total, 6738415616ll);
    assert_int_equal(params(preset("llama-3-8b"), 1).total, 8030261248ll);
    assert_int_equal(params(preset("smollm2-135m"), 1).total, 134515008ll);
    assert_int_equal(params(preset("qwen2-7b"), 1).total, 7615616512ll);
}

static void test_parameter_parts_follow_the_architecture(void **state)
{
    /* llama-2-7b by hand */
    kvmath_params p = params(preset("llama-2-7b"), 1);
    assert_int_equal(p.embedding, 32000ll * 4096);
    assert_int_equal(p.lm_head, 32000ll * 4096);
    assert_int_equal(p.attn, 32ll * 4 * 4096 * 4096);
    assert_int_equal(p.mlp, 32ll * 3 * 4096 * 11008);
    assert_int_equal(p.norms, (2 * 32 + 1) * 4096);
    assert_int_equal(p.total, p.embedding + p.attn + p.mlp + p.norms + p.lm_head);

    /* tied embeddings: no LM head of its own */
    kvmath_params s = params(preset("smollm2-135m"), 1);
    assert_int_equal(s.lm_head, 0);

    /* Q/K/V biases: one per output row of Q, K and V in every layer */
    model_config q = *preset("qwen2-7b");
    kvmath_params with = params(&q, 1);
    q.qkv_bias = false;
    kvmath_params without = params(&q, 1);
    assert_int_equal(with.attn - without.attn, 28ll * (28 + 2 * 4) * 128);

    uint64_t wb;
    assert_int_equal(kvmath_weight_bytes(&p, KVMATH_FP16, &wb), DERAS_OK);
    assert_int_equal(wb, 2 * 6738415616ull);
    assert_int_equal(kvmath_weight_bytes(&p, KVMATH_FP8, &wb), DERAS_OK);
    assert_int_equal(wb, 6738415616ull);
    assert_int_equal(kvmath_weight_bytes(&p, KVMATH_N_DTYPES, &wb), DERAS_EINVAL);
}

/* ---- tensor parallelism ---- */

static void test_tp_divides_kv_heads_then_replicates_them(void **state)
{
    const model_config *c = preset("llama-2-70b"); /* 64 heads, 8 KV heads */
    const uint64_t whole = token_bytes(c, 1, KVMATH_FP16);
    for (int tp = 1; tp <= 8; tp *= 2) {
        uint64_t got = token_bytes(c, tp, KVMATH_FP16);
        if (got * (uint64_t)tp != whole)
            fail_msg("llama-2-70b tp %d: expected %llu bytes per token per rank, got %llu", tp,
                     (unsigned long long)(whole / tp), (unsigned long long)got);
    }
    /* 16 and 32 ranks: one KV head per rank, each held by 2 and 4 ranks */
    kvmath_shard s;
    assert_int_equal(kvmath_shard_heads(c, 16, &s), DERAS_OK);
    assert_int_equal(s.n_heads, 4);
    assert_int_equal(s.n_kv_heads, 1);
    assert_int_equal(s.kv_replicas, 2);
    assert_int_equal(kvmath_shard_heads(c, 32, &s), DERAS_OK);
    assert_int_equal(s.kv_replicas, 4);
    assert_int_equal(token_bytes(c, 16, KVMATH_FP16), whole / 8);
    assert_int_equal(token_bytes(c, 32, KVMATH_FP16), whole / 8);

    /* sizes that split heads unevenly are refused, naming the counts */
    uint64_t b;
    assert_int_equal(kvmath_token_bytes(c, 3, KVMATH_FP16, &b), DERAS_EUNSUPPORTED);
    assert_non_null(strstr(deras_errmsg(), "64"));
    assert_int_equal(kvmath_shard_heads(c, 0, &s), DERAS_EINVAL);
    assert_int_equal(kvmath_shard_heads(c, -2, &s), DERAS_EINVAL);
    model_config odd = small_config(48, 12); /* tp 8 divides 48 heads but not 12 KV heads */
    assert_int_equal(kvmath_shard_heads(&odd, 8, &s), DERAS_EUNSUPPORTED);
    assert_int_equal(kvmath_shard_heads(&odd, 4, &s), DERAS_OK);
    assert_int_equal(s.n_kv_heads, 3);
}

static void test_tp_divides_weights_except_norms(void **state)
{
    /* every rank holds 1/tp of each split matrix and all the norms, so
     * tp x rank share == total + (tp - 1) x norms, for every preset and every even split */
    for (int i = 0; i < kvmath_n_presets(); i++) {
        const kvmath_preset *pr = kvmath_preset_at(i);
        const model_config *c = &pr->config;
        kvmath_params whole = params(c, 1);
        for (int tp = 2; tp <= 64; tp *= 2) {
            kvmath_params r;
            kvmath_shard s;
            if (kvmath_shard_heads(c, tp, &s) || s.kv_replicas > 1 || c->d_ff % tp ||
                c->vocab_size % tp)
                continue; /* uneven or replicated: checked elsewhere */
            assert_int_equal(kvmath_params_count(c, tp, &r), DERAS_OK);
            assert_int_equal(r.norms, whole.norms);
            if (r.total * tp != whole.total + (tp - 1) * whole.norms)
                fail_msg("%s tp %d: expected rank share %lld, got %lld", pr->name, tp,
                         (long long)((whole.total + (tp - 1) * whole.norms) / tp),
                         (long long)r.total);
        }
    }
    /* a vocabulary tp does not divide: rank 0 holds the larger share, ceil(vocab / tp) */
    model_config c = small_config(8, 8);
    c.vocab_size = 1001;
    kvmath_params r = params(&c, 4);
    assert_int_equal(r.embedding, 251ll * c.d_model);
    /* replicated KV heads count their weights on every rank holding them */
    model_config m = small_config(8, 2);
    kvmath_params r8 = params(&m, 8);
    assert_int_equal(r8.attn, 4ll * (m.d_model * (64 + 2 * 64) + 64 * m.d_model));
}

/* ---- budgets ---- */

static void test_budget_plans_whole_blocks_and_reserves_the_null_block(void **state)
{
    kvmath_plan p;
    assert_int_equal(kvmath_plan_budget(10 * 1000 + 999, 1000, 16, &p), DERAS_OK);
    assert_int_equal(p.n_blocks, 10);
    assert_int_equal(p.n_usable_blocks, 9);
    assert_int_equal(p.n_tokens, 9 * 16);
    assert_int_equal(p.kv_bytes, 10000);
    assert_true(fabs(p.budget_used - 10000.0 / 10999.0) < 1e-12);
    assert_int_equal(kvmath_plan_max_seqs(&p, 3), 3);
    assert_int_equal(kvmath_plan_max_seqs(&p, 10), 0);
    assert_int_equal(kvmath_plan_max_seqs(&p, 0), 0);
    assert_int_equal(kvmath_plan_max_seqs(NULL, 1), 0);

    /* budgets below one or two blocks hold no tokens: an ordinary result */
    assert_int_equal(kvmath_plan_budget(999, 1000, 16, &p), DERAS_OK);
    assert_int_equal(p.n_blocks, 0);
    assert_int_equal(p.n_usable_blocks, 0);
    assert_int_equal(p.n_tokens, 0);
    assert_int_equal(kvmath_plan_budget(1000, 1000, 16, &p), DERAS_OK);
    assert_int_equal(p.n_blocks, 1);
    assert_int_equal(p.n_usable_blocks, 0);
    assert_int_equal(kvmath_plan_budget(0, 1000, 16, &p), DERAS_OK);
    assert_int_equal(p.n_blocks, 0);
    assert_true(p.budget_used == 0.0);

    assert_int_equal(kvmath_plan_budget(1000, 0, 16, &p), DERAS_EINVAL);
    assert_int_equal(kvmath_plan_budget(1000, 10, 0, &p), DERAS_EINVAL);
    assert_int_equal(kvmath_plan_budget(UINT64_MAX, 1, 16, &p), DERAS_ERANGE);
}

static void test_device_plan_llama2_7b_on_80_GiB(void **state)
{
    const model_config *c = preset("llama-2-7b");
    kvmath_params pc = params(c, 1);
    uint64_t wb, bb;
    assert_int_equal(kvmath_weight_bytes(&pc, KVMATH_FP16, &wb), DERAS_OK);
    assert_int_equal(kvmath_block_bytes(token_bytes(c, 1, KVMATH_FP16), 16, &bb), DERAS_OK);
    kvmath_plan p;
    assert_int_equal(kvmath_plan_device(80ull << 30, 0.9, wb, bb, 16, &p), DERAS_OK);
    assert_true(p.weights_fit);
    assert_int_equal(p.usable_bytes, 72ull << 30); /* 0.9 is inexact; rounding makes it exact */
    assert_int_equal(p.budget, (72ull << 30) - 13476831232ull);
    assert_int_equal(p.n_blocks, 7609); /* floor(63832580096 / 8 MiB) */
    assert_int_equal(p.n_usable_blocks, 7608);
    assert_int_equal(p.n_tokens, 7608 * 16);
    assert_int_equal(kvmath_plan_max_seqs(&p, 256), 29);
    assert_true(p.budget_used > 0.999 && p.budget_used <= 1.0);
}

static void test_weights_larger_than_the_device_give_zero_blocks(void **state)
{
    const model_config *c = preset("llama-2-70b");
    kvmath_params pc = params(c, 1);
    uint64_t wb, bb;
    assert_int_equal(kvmath_weight_bytes(&pc, KVMATH_FP16, &wb), DERAS_OK);
    assert_int_equal(kvmath_block_bytes(token_bytes(c, 1, KVMATH_FP16), 16, &bb), DERAS_OK);
    kvmath_plan p;
    assert_int_equal(kvmath_plan_device(24000000000ull, 0.9, wb, bb, 16, &p), DERAS_OK);
    assert_false(p.weights_fit);
    assert_int_equal(p.budget, 0);
    assert_int_equal(p.n_blocks, 0);
    assert_int_equal(p.n_tokens, 0);
    assert_int_equal(kvmath_plan_max_seqs(&p, 256), 0);
    /* weights exactly filling the usable memory: fit, but no room for KV */
    assert_int_equal(kvmath_plan_device(1000, 1.0, 1000, 10, 16, &p), DERAS_OK);
    assert_true(p.weights_fit);
    assert_int_equal(p.n_blocks, 0);

    assert_int_equal(kvmath_plan_device(0, 0.9, 0, 10, 16, &p), DERAS_EINVAL);
    assert_int_equal(kvmath_plan_device(1000, 0.0, 0, 10, 16, &p), DERAS_EINVAL);
    assert_int_equal(kvmath_plan_device(1000, 1.5, 0, 10, 16, &p), DERAS_EINVAL);
    assert_int_equal(kvmath_plan_device(1000, NAN, 0, 10, 16, &p), DERAS_EINVAL);
    assert_int_equal(kvmath_plan_device(UINT64_MAX, 1.0, 0, 1, 1, &p), DERAS_ERANGE);
}

/* ---- sizes as text ---- */

static void test_size_strings(void **state)
{
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {
        {"80GiB", 80ull << 30},     {"24GB", 24000000000ull}, {"141e9", 141000000000ull},
        {"512", 512},               {"512B", 512},            {"1.5 KiB", 1536},
        {"0.5MiB", 524288},         {"2tb", 2000000000000ull}, {"1TiB", 1ull << 40},
        {"1kb", 1000},              {"7MB", 7000000},         {"1.25e3", 1250},
        {".5KiB", 512},             {"0", 0},                 {"2E+3 b", 2000},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 0;
        if (kvmath_parse_size(ok[i].s, &v))
            fail_msg("'%s': expected %llu, got error %s", ok[i].s, (unsigned long long)ok[i].v,
                     deras_errmsg());
        if (v != ok[i].v)
            fail_msg("'%s': expected %llu, got %llu", ok[i].s, (unsigned long long)ok[i].v,
                     (unsigned long long)v);
    }
    static const char *bad[] = {"",     "GiB",  "-1GB", "+1GB", "0x10", "inf",    "nan",
                                "80G",  "80Gi", "80 GiBs", " 80GiB", "1e", "1..2", "80GiB "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        int rc = kvmath_parse_size(bad[i], &v);
        if (rc != DERAS_EINVAL)
            fail_msg("'%s': expected invalid_argument, got %s", bad[i], deras_status_name(rc));
        if (!strstr(deras_errmsg(), bad[i]))
            fail_msg("'%s': the message should name the string, got '%s'", bad[i],
                     deras_errmsg());
    }
    uint64_t v;
    assert_int_equal(kvmath_parse_size("1e30", &v), DERAS_ERANGE);
    assert_int_equal(kvmath_parse_size("10000000TB", &v), DERAS_ERANGE);
    assert_int_equal(kvmath_parse_size("1e999", &v), DERAS_ERANGE);
}

static void test_byte_formatting(void **state)
{
    char buf[32];
    kvmath_format_bytes(0, buf, sizeof buf);
    assert_string_equal(buf, "0 B");
    kvmath_format_bytes(1023, buf, sizeof buf);
    assert_string_equal(buf, "1023 B");
    kvmath_format_bytes(1024, buf, sizeof buf);
    assert_string_equal(buf, "1.00 KiB");
    kvmath_format_bytes(524288, buf, sizeof buf);
    assert_string_equal(buf, "512.00 KiB");
    kvmath_format_bytes(2147483648ull, buf, sizeof buf);
    assert_string_equal(buf, "2.00 GiB");
    kvmath_format_bytes(13476831232ull, buf, sizeof buf);
    assert_string_equal(buf, "12.55 GiB");
    kvmath_format_bytes(UINT64_MAX, buf, sizeof buf);
    assert_string_equal(buf, "16384.00 PiB");
    kvmath_format_bytes(2147483648ull, buf, 4);
    assert_string_equal(buf, "2.0");
}

/* ---- presets ---- */

static void test_presets_are_valid_and_found_by_name(void **state)
{
    static const char *required[] = {"llama-2-7b", "llama-2-13b", "llama-2-70b",
                                     "llama-3-8b", "llama-3.1-70b", "mistral-7b",
                                     "qwen2-7b", "tinyllama-1.1b", "smollm2-135m"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!kvmath_preset_find(required[i]))
            fail_msg("expected a preset named '%s'", required[i]);
    for (int i = 0; i < kvmath_n_presets(); i++) {
        const kvmath_preset *p = kvmath_preset_at(i);
        assert_non_null(p);
        if (model_config_validate(&p->config))
            fail_msg("preset %s: %s", p->name, deras_errmsg());
        assert_ptr_equal(kvmath_preset_find(p->name), p);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(kvmath_preset_at(j)->name, p->name);
    }
    assert_ptr_equal(kvmath_preset_find("Llama-2-7B"), kvmath_preset_find("llama-2-7b"));
    assert_null(kvmath_preset_find("llama-9"));
    assert_null(kvmath_preset_find(NULL));
    assert_null(kvmath_preset_at(-1));
    assert_null(kvmath_preset_at(kvmath_n_presets()));
}

/* The presets agree with configs read from real config.json files of the same models. */
static void test_presets_match_loaded_configs(void **state)
{
    static const struct {
        const char *file, *preset;
    } cases[] = {
        {"config/mistral/config.json", "mistral-7b"},
        {"config/qwen2/config.json", "qwen2-0.5b"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = test_data_path(cases[i].file);
        struct stat st;
        if (stat(path, &st))
            test_skip("%s missing", path);
        model_config c;
        if (model_config_from_hf_json(path, &c))
            fail_msg("%s: %s", path, deras_errmsg());
        const model_config *p = preset(cases[i].preset);
        assert_int_equal(token_bytes(&c, 1, KVMATH_FP16), token_bytes(p, 1, KVMATH_FP16));
        assert_int_equal(params(&c, 1).total, params(p, 1).total);
        free(path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama2_7b_fp16_4096_tokens_is_exactly_2_GiB),
        cmocka_unit_test(test_without_gqa_token_bytes_are_2_layers_hidden_bytes),
        cmocka_unit_test(test_gqa_models_store_only_their_kv_heads),
        cmocka_unit_test(test_mqa_one_kv_head_whatever_the_tp_size),
        cmocka_unit_test(test_dtypes_by_name),
        cmocka_unit_test(test_sequences_round_up_to_whole_blocks),
        cmocka_unit_test(test_batch_is_sequences_times_sequence_bytes),
        cmocka_unit_test(test_parameter_counts_match_the_published_ones),
        cmocka_unit_test(test_parameter_parts_follow_the_architecture),
        cmocka_unit_test(test_tp_divides_kv_heads_then_replicates_them),
        cmocka_unit_test(test_tp_divides_weights_except_norms),
        cmocka_unit_test(test_budget_plans_whole_blocks_and_reserves_the_null_block),
        cmocka_unit_test(test_device_plan_llama2_7b_on_80_GiB),
        cmocka_unit_test(test_weights_larger_than_the_device_give_zero_blocks),
        cmocka_unit_test(test_size_strings),
        cmocka_unit_test(test_byte_formatting),
        cmocka_unit_test(test_presets_are_valid_and_found_by_name),
        cmocka_unit_test(test_presets_match_loaded_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
