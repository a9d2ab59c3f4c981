/* SPDX-License-Identifier: Apache-2.0 */
/* test_checkpoint_config.c - part of test_checkpoint: model configs. The tiny fixtures
 * agree between GGUF and config.json; RoPE inverse frequencies (classic and transformers
 * v5 forms, llama3 scaling, a GGUF rope_freqs tensor) match transformers within 1e-6;
 * config.json defaults follow transformers, and what deras does not implement or a
 * mistyped field is refused naming the field; GGUF configs built here in memory check
 * defaults and errors. Milliseconds.
 */
#include "test_checkpoint.h"

void tiny_configs_agree_between_gguf_and_hf(void **state)
{
    (void)state;
    const char *pairs[][2] = {{"ckpt/llama.gguf", "ckpt/llama_hf/config.json"},
                              {"ckpt/qwen2.gguf", "ckpt/qwen2_hf/config.json"}};
    for (int k = 0; k < 2; k++) {
        char *gp = data(pairs[k][0]), *hp = data(pairs[k][1]);
        gguf_t *g = NULL;
        assert_int_equal(gguf_open(gp, &g), DERAS_OK);
        model_config a, b;
        int rc = model_config_from_gguf(g, &a);
        if (rc)
            fail_msg("%s: %s", gp, deras_errmsg());
        rc = model_config_from_hf_json(hp, &b);
        if (rc)
            fail_msg("%s: %s", hp, deras_errmsg());
        assert_configs_equal(&a, &b);
        assert_int_equal(a.n_layers, 2);
        assert_int_equal(a.d_model, 32);
        assert_int_equal(a.n_heads, 4);
        assert_int_equal(a.n_kv_heads, 2);
        assert_int_equal(a.head_dim, 8);
        assert_int_equal(a.d_ff, 48);
        assert_int_equal(a.vocab_size, 64);
        assert_int_equal(a.max_seq_len, 128);
        assert_int_equal(a.rope_scaling, ROPE_SCALING_NONE);
        if (k == 0) {
            assert_int_equal(a.arch, MODEL_ARCH_LLAMA);
            assert_false(a.tied_embeddings);
            assert_false(a.qkv_bias);
            assert_true(a.rope_theta == 10000.0f && a.norm_eps == 1e-5f);
        } else {
            assert_int_equal(a.arch, MODEL_ARCH_QWEN2);
            assert_true(a.tied_embeddings);
            assert_true(a.qkv_bias);
            assert_true(a.rope_theta == 1e6f && a.norm_eps == 1e-6f);
        }
        assert_int_equal(model_config_validate(&a), DERAS_OK);
        gguf_destroy(&g);
        free(gp);
        free(hp);
    }
}

static float *load_f32(const char *rel, size_t *n)
{
    char *p = data(rel);
    size_t bytes = 0;
    float *v = (float *)test_read_file(p, &bytes);
    assert_non_null(v);
    *n = bytes / sizeof(float);
    free(p);
    return v;
}

/* inv_freq from deras vs transformers: within 1e-6 relative (the formulas are the same;
 * transformers evaluates them in float32, deras in double rounded once). */
static void check_inv_freq(const model_config *c, const char *ref_rel)
{
    size_t n = 0;
    float *want = load_f32(ref_rel, &n);
    assert_int_equal(n, (size_t)c->head_dim / 2);
    float got[MODEL_MAX_HEAD_DIM / 2];
    model_config_rope_inv_freq(c, got);
    for (size_t i = 0; i < n; i++) {
        double rel = fabs((double)got[i] - want[i]) / fabs((double)want[i]);
        if (!(rel <= 1e-6))
            fail_msg("%s: inv_freq[%zu] expected %.9g (transformers), got %.9g (rel %.2g)",
                     ref_rel, i, want[i], got[i], rel);
    }
    free(want);
}

static model_config hf_config(const char *rel)
{
    char *p = data(rel);
    model_config c;
    int rc = model_config_from_hf_json(p, &c);
    if (rc)
        fail_msg("%s: expected ok, got %s: %s", p, deras_status_name(rc), deras_errmsg());
    free(p);
    return c;
}

void hf_configs_read_in_classic_and_v5_form_with_transformers_inv_freq(void **state)
{
    (void)state;
    model_config c = hf_config("config/llama_default_v5/config.json");
    assert_int_equal(c.arch, MODEL_ARCH_LLAMA);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.n_kv_heads, 2);
    assert_true(c.rope_theta == 500000.0f);
    assert_int_equal(c.rope_scaling, ROPE_SCALING_NONE);
    assert_int_equal(c.max_seq_len, 4096);
    check_inv_freq(&c, "config/llama_default_v5/inv_freq.f32");

    c = hf_config("config/llama_linear/config.json");
    assert_int_equal(c.head_dim, 128); /* explicit head_dim, not 256 / 2 */
    assert_int_equal(c.rope_scaling, ROPE_SCALING_LINEAR);
    assert_true(c.rope_factor == 4.0f);
    check_inv_freq(&c, "config/llama_linear/inv_freq.f32");

    const char *l3[] = {"config/llama3_classic", "config/llama3_v5"};
    model_config first;
    for (int k = 0; k < 2; k++) {
        char rel[96];
        snprintf(rel, sizeof rel, "%s/config.json", l3[k]);
        c = hf_config(rel);
        assert_int_equal(c.rope_scaling, ROPE_SCALING_LLAMA3);
        assert_true(c.rope_factor == 8.0f && c.rope_low_freq_factor == 1.0f &&
                    c.rope_high_freq_factor == 4.0f);
        assert_int_equal(c.rope_orig_max_pos, 8192);
        assert_true(c.rope_theta == 500000.0f);
        assert_int_equal(c.max_seq_len, 131072);
        assert_int_equal(c.vocab_size, 128256);
        assert_int_equal(c.n_kv_heads, 8);
        assert_int_equal(c.head_dim, 128);
        assert_false(c.tied_embeddings);
        snprintf(rel, sizeof rel, "%s/inv_freq.f32", l3[k]);
        check_inv_freq(&c, rel);
        if (k == 0)
            first = c;
        else
            assert_configs_equal(&first, &c);
    }

    c = hf_config("config/mistral/config.json");
    assert_int_equal(c.arch, MODEL_ARCH_LLAMA);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(c.max_seq_len, 32768);
    check_inv_freq(&c, "config/mistral/inv_freq.f32");

    c = hf_config("config/qwen2/config.json");
    assert_int_equal(c.arch, MODEL_ARCH_QWEN2);
    assert_true(c.qkv_bias && c.tied_embeddings);
    assert_int_equal(c.sliding_window, 0); /* use_sliding_window false */
    assert_int_equal(c.n_heads, 14);
    assert_int_equal(c.head_dim, 64);
    assert_true(c.rope_theta == 1e6f && c.norm_eps == 1e-6f);
    check_inv_freq(&c, "config/qwen2/inv_freq.f32");

    char buf[256];
    model_config_describe(&c, buf, sizeof buf);
    assert_non_null(strstr(buf, "qwen2, 24 layers, d=896, heads 14/2 x 64"));
    assert_non_null(strstr(buf, "tied"));
    model_config_describe(&c, buf, 10);
    assert_int_equal(strlen(buf), 9);
}

void gguf_rope_freqs_tensor_reproduces_llama3_scaling(void **state)
{
    (void)state;
    char *p = data("config/llama3_factors.gguf");
    gguf_t *g = NULL;
    assert_int_equal(gguf_open(p, &g), DERAS_OK);
    model_config c;
    int rc = model_config_from_gguf(g, &c);
    if (rc)
        fail_msg("%s", deras_errmsg());
    assert_int_equal(c.rope_scaling, ROPE_SCALING_FACTORS);
    assert_int_equal(c.n_rope_freq_factors, 64);
    assert_true(c.rope_freq_factors[0] == 1.0f && c.rope_freq_factors[63] == 8.0f);
    assert_int_equal(c.n_kv_heads, 8);
    /* llama.cpp's divisors give the same frequencies as transformers' llama3 rule */
    check_inv_freq(&c, "config/llama3_classic/inv_freq.f32");
    char buf[256];
    model_config_describe(&c, buf, sizeof buf);
    assert_non_null(strstr(buf, "64 file factors"));
    gguf_destroy(&g);
    free(p);
}

/* Write `json` as a config file and expect model_config_from_hf_json's verdict. */
static void expect_hf_json(const char *json, int status, const char *w1, const char *w2,
                           model_config *out)
{
    char tmpl[] = "/tmp/deras-config-XXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    model_config c;
    deras_errclear();
    int rc = model_config_from_hf_json(tmpl, &c);
    if (rc != status)
        fail_msg("config %s: expected %s, got %s (%s)", json, deras_status_name(status),
                 deras_status_name(rc), deras_errmsg());
    const char *want[] = {w1, w2, status ? tmpl : NULL};
    for (int i = 0; i < 3; i++)
        if (want[i] && !strstr(deras_errmsg(), want[i]))
            fail_msg("config %s: expected the message to contain '%s', got '%s'", json,
                     want[i], deras_errmsg());
    if (out)
        *out = c;
    unlink(tmpl);
}

#define BASE_LLAMA                                                                           \
    "\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":96,"                \
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100"
#define BASE_QWEN2                                                                           \
    "\"architectures\":[\"Qwen2ForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":96," \
    "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,"          \
    "\"vocab_size\":100"

void hf_config_defaults_follow_transformers(void **state)
{
    (void)state;
    model_config c;
    expect_hf_json("{" BASE_LLAMA "}", DERAS_OK, NULL, NULL, &c);
    assert_int_equal(c.n_kv_heads, 4);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.max_seq_len, 2048);
    assert_true(c.norm_eps == 1e-6f && c.rope_theta == 10000.0f);
    assert_false(c.tied_embeddings);
    assert_int_equal(c.rope_scaling, ROPE_SCALING_NONE);
    expect_hf_json("{" BASE_LLAMA ",\"head_dim\":null,\"num_key_value_heads\":null,"
                   "\"rope_scaling\":null,\"rope_theta\":20000}", DERAS_OK, NULL, NULL, &c);
    assert_int_equal(c.head_dim, 16);
    assert_true(c.rope_theta == 20000.0f);
    expect_hf_json("{" BASE_LLAMA ",\"rope_scaling\":{\"rope_type\":\"default\"}}", DERAS_OK,
                   NULL, NULL, &c);
    assert_int_equal(c.rope_scaling, ROPE_SCALING_NONE);
    /* rope_parameters supplies theta; a non-empty classic rope_scaling wins on the type */
    expect_hf_json("{" BASE_LLAMA ",\"rope_parameters\":{\"rope_type\":\"default\","
                   "\"rope_theta\":123456}}", DERAS_OK, NULL, NULL, &c);
    assert_true(c.rope_theta == 123456.0f);
    expect_hf_json("{" BASE_LLAMA ",\"rope_parameters\":{\"rope_type\":\"default\"},"
                   "\"rope_scaling\":{\"type\":\"linear\",\"factor\":2}}", DERAS_OK, NULL,
                   NULL, &c);
    assert_int_equal(c.rope_scaling, ROPE_SCALING_LINEAR);
    /* llama3 without original_max_position_embeddings falls back to the context */
    expect_hf_json("{" BASE_LLAMA ",\"max_position_embeddings\":4096,\"rope_scaling\":"
                   "{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,"
                   "\"high_freq_factor\":4}}", DERAS_OK, NULL, NULL, &c);
    assert_int_equal(c.rope_orig_max_pos, 4096);
    expect_hf_json("{\"architectures\":[\"MistralForCausalLM\"]," BASE_LLAMA
                   ",\"sliding_window\":null}", DERAS_OK, NULL, NULL, &c);
    assert_int_equal(c.sliding_window, 0);
    expect_hf_json("{\"architectures\":[\"MistralForCausalLM\"]," BASE_LLAMA "}", DERAS_OK,
                   NULL, NULL, &c);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(c.max_seq_len, 131072);
    expect_hf_json("{" BASE_QWEN2 "}", DERAS_OK, NULL, NULL, &c);
    assert_true(c.qkv_bias);
    assert_int_equal(c.max_seq_len, 32768);
    assert_int_equal(c.sliding_window, 0);
    expect_hf_json("{" BASE_QWEN2 ",\"use_sliding_window\":true,\"sliding_window\":512,"
                   "\"max_window_layers\":0}", DERAS_OK, NULL, NULL, &c);
    assert_int_equal(c.sliding_window, 512);
    expect_hf_json("{" BASE_QWEN2 ",\"use_sliding_window\":true,\"sliding_window\":512,"
                   "\"max_window_layers\":4}", DERAS_OK, NULL, NULL, &c);
    assert_int_equal(c.sliding_window, 0); /* no layer reaches max_window_layers */
    expect_hf_json("{" BASE_QWEN2 ",\"sliding_window\":64,\"layer_types\":[\"sliding_attention\","
                   "\"sliding_attention\",\"sliding_attention\",\"sliding_attention\"]}",
                   DERAS_OK, NULL, NULL, &c);
    assert_int_equal(c.sliding_window, 64);
}

void hf_config_refuses_what_deras_does_not_implement(void **state)
{
    (void)state;
    expect_hf_json("{" BASE_LLAMA ",\"attention_bias\":true}", DERAS_EUNSUPPORTED,
                   "attention_bias", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"mlp_bias\":true}", DERAS_EUNSUPPORTED, "mlp_bias", NULL,
                   NULL);
    expect_hf_json("{" BASE_LLAMA ",\"hidden_act\":\"gelu\"}", DERAS_EUNSUPPORTED, "gelu", NULL,
                   NULL);
    expect_hf_json("{" BASE_LLAMA ",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}",
                   DERAS_EUNSUPPORTED, "yarn", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"rope_parameters\":{\"rope_type\":\"dynamic\","
                   "\"factor\":2}}", DERAS_EUNSUPPORTED, "dynamic", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"rope_parameters\":{\"rope_type\":\"default\","
                   "\"partial_rotary_factor\":0.5}}", DERAS_EUNSUPPORTED,
                   "partial_rotary_factor", NULL, NULL);
    expect_hf_json("{\"architectures\":[\"GPT2LMHeadModel\"]," BASE_LLAMA "}",
                   DERAS_EUNSUPPORTED, "GPT2LMHeadModel", NULL, NULL);
    expect_hf_json("{\"model_type\":\"phi3\",\"hidden_size\":64}", DERAS_EUNSUPPORTED, "phi3",
                   NULL, NULL);
    expect_hf_json("{\"hidden_size\":64}", DERAS_ENOTFOUND, "model_type", NULL, NULL);
    expect_hf_json("{" BASE_QWEN2 ",\"use_sliding_window\":true,\"sliding_window\":512,"
                   "\"max_window_layers\":1}", DERAS_EUNSUPPORTED, "3 of 4 layers", NULL, NULL);
    expect_hf_json("{" BASE_QWEN2 ",\"layer_types\":[\"full_attention\",\"sliding_attention\","
                   "\"full_attention\",\"full_attention\"]}", DERAS_EUNSUPPORTED, "1 of 4", NULL,
                   NULL);
}

void hf_config_type_and_value_errors_name_the_field(void **state)
{
    (void)state;
    expect_hf_json("{\"model_type\":\"llama\",\"hidden_size\":\"64\",\"intermediate_size\":96,"
                   "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100}",
                   DERAS_EFORMAT, "'hidden_size' is a string, expected an integer", NULL, NULL);
    expect_hf_json("{\"model_type\":\"llama\",\"intermediate_size\":96,"
                   "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"vocab_size\":100}",
                   DERAS_ENOTFOUND, "'hidden_size'", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"num_key_value_heads\":3}", DERAS_EFORMAT, "n_heads 4",
                   "n_kv_heads 3", NULL);
    expect_hf_json("{" BASE_LLAMA ",\"head_dim\":7}", DERAS_EFORMAT, "head_dim", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"rms_norm_eps\":0}", DERAS_EFORMAT, "norm_eps", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"rms_norm_eps\":\"1e-5\"}", DERAS_EFORMAT, "rms_norm_eps",
                   "expected a number", NULL);
    expect_hf_json("{" BASE_LLAMA ",\"tie_word_embeddings\":1}", DERAS_EFORMAT,
                   "tie_word_embeddings", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"num_hidden_layers\":-1}", DERAS_EFORMAT,
                   "num_hidden_layers", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"rope_scaling\":{\"type\":\"linear\"}}", DERAS_ENOTFOUND,
                   "rope_scaling.factor", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,"
                   "\"high_freq_factor\":4}}", DERAS_ENOTFOUND, "low_freq_factor", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"rope_scaling\":\"linear\"}", DERAS_EFORMAT, "rope_scaling",
                   NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":-2}}",
                   DERAS_EFORMAT, "rope_factor", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",", DERAS_EFORMAT, "not valid JSON", NULL, NULL);
    expect_hf_json("[1]", DERAS_EFORMAT, "expected an object", NULL, NULL);
    expect_hf_json("{" BASE_LLAMA ",\"vocab_size\":1}", DERAS_EFORMAT, "duplicate", NULL, NULL);
    model_config c;
    assert_int_equal(model_config_from_hf_json("/nonexistent/config.json", &c), DERAS_EIO);
    assert_non_null(strstr(deras_errmsg(), "/nonexistent/config.json"));
}

/* A metadata-only GGUF built here, for config cases the fixtures do not have. */
struct gb {
    uint8_t buf[4096];
    size_t n;
    uint64_t n_kv;
};

static void gb_raw(struct gb *b, const void *p, size_t n)
{
    assert_true(b->n + n <= sizeof b->buf);
    memcpy(b->buf + b->n, p, n);
    b->n += n;
}

static void gb_key(struct gb *b, const char *key, uint32_t type)
{
    uint64_t l = strlen(key);
    gb_raw(b, &l, 8);
    gb_raw(b, key, l);
    gb_raw(b, &type, 4);
    b->n_kv++;
}

static void gb_u32(struct gb *b, const char *key, uint32_t v)
{
    gb_key(b, key, GGUF_TYPE_UINT32);
    gb_raw(b, &v, 4);
}

static void gb_f32(struct gb *b, const char *key, float v)
{
    gb_key(b, key, GGUF_TYPE_FLOAT32);
    gb_raw(b, &v, 4);
}

static void gb_str(struct gb *b, const char *key, const char *s)
{
    gb_key(b, key, GGUF_TYPE_STRING);
    uint64_t l = strlen(s);
    gb_raw(b, &l, 8);
    gb_raw(b, s, l);
}

static void gb_begin(struct gb *b, const char *arch)
{
    memset(b, 0, sizeof *b);
    uint32_t v = 3;
    uint64_t zero = 0;
    gb_raw(b, "GGUF", 4);
    gb_raw(b, &v, 4);
    gb_raw(b, &zero, 8); /* tensors */
    gb_raw(b, &zero, 8); /* kv count, patched by gb_config */
    gb_str(b, "general.architecture", arch);
}

/* A complete minimal config for `arch`, minus the key named `skip`. */
static void gb_base(struct gb *b, const char *arch, const char *skip)
{
    gb_begin(b, arch);
    const char *ints[] = {"block_count", "context_length", "embedding_length",
                          "feed_forward_length", "attention.head_count", "vocab_size"};
    const uint32_t vals[] = {2, 256, 64, 96, 4, 100};
    char key[96];
    for (int i = 0; i < 6; i++) {
        if (skip && !strcmp(skip, ints[i]))
            continue;
        snprintf(key, sizeof key, "%s.%s", arch, ints[i]);
        gb_u32(b, key, vals[i]);
    }
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if (!skip || strcmp(skip, "attention.layer_norm_rms_epsilon"))
        gb_f32(b, key, 1e-5f);
}

static int gb_config(struct gb *b, model_config *c)
{
    memcpy(b->buf + 16, &b->n_kv, 8);
    gguf_t *g = NULL;
    int rc = gguf_open_memory(b->buf, b->n, "cfg.gguf", &g);
    if (rc)
        fail_msg("test GGUF did not open: %s", deras_errmsg());
    deras_errclear();
    rc = model_config_from_gguf(g, c);
    gguf_destroy(&g);
    return rc;
}

void gguf_config_defaults_and_errors(void **state)
{
    (void)state;
    struct gb b;
    model_config c;
    gb_base(&b, "llama", NULL);
    assert_int_equal(gb_config(&b, &c), DERAS_OK);
    assert_int_equal(c.n_kv_heads, 4); /* head_count_kv defaults to head_count */
    assert_int_equal(c.head_dim, 16);
    assert_true(c.rope_theta == 10000.0f);
    assert_true(c.tied_embeddings); /* no output.weight */
    assert_int_equal(c.vocab_size, 100);

    gb_base(&b, "llama", NULL);
    gb_u32(&b, "llama.attention.key_length", 32);
    gb_u32(&b, "llama.attention.value_length", 32);
    gb_u32(&b, "llama.attention.head_count_kv", 2);
    gb_str(&b, "llama.rope.scaling.type", "linear");
    gb_f32(&b, "llama.rope.scaling.factor", 2.0f);
    assert_int_equal(gb_config(&b, &c), DERAS_OK);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.rope_scaling, ROPE_SCALING_LINEAR);
    assert_true(c.rope_factor == 2.0f);

    gb_base(&b, "llama", NULL);
    gb_f32(&b, "llama.rope.scale_linear", 4.0f); /* older conversions' key */
    assert_int_equal(gb_config(&b, &c), DERAS_OK);
    assert_int_equal(c.rope_scaling, ROPE_SCALING_LINEAR);
    assert_true(c.rope_factor == 4.0f);

    gb_base(&b, "llama", NULL);
    gb_str(&b, "llama.rope.scaling.type", "yarn");
    assert_int_equal(gb_config(&b, &c), DERAS_EUNSUPPORTED);
    assert_non_null(strstr(deras_errmsg(), "'llama.rope.scaling.type' is 'yarn'"));

    gb_base(&b, "llama", NULL);
    gb_u32(&b, "llama.rope.dimension_count", 8);
    assert_int_equal(gb_config(&b, &c), DERAS_EUNSUPPORTED);
    assert_non_null(strstr(deras_errmsg(), "partial rotary"));

    gb_base(&b, "gpt2", NULL);
    assert_int_equal(gb_config(&b, &c), DERAS_EUNSUPPORTED);
    assert_non_null(strstr(deras_errmsg(), "'gpt2'"));
    assert_non_null(strstr(deras_errmsg(), "cfg.gguf"));

    gb_base(&b, "qwen2", "block_count");
    assert_int_equal(gb_config(&b, &c), DERAS_ENOTFOUND);
    assert_non_null(strstr(deras_errmsg(), "'qwen2.block_count'"));

    gb_base(&b, "llama", "attention.layer_norm_rms_epsilon");
    assert_int_equal(gb_config(&b, &c), DERAS_ENOTFOUND);
    assert_non_null(strstr(deras_errmsg(), "layer_norm_rms_epsilon"));

    gb_base(&b, "llama", "vocab_size");
    assert_int_equal(gb_config(&b, &c), DERAS_ENOTFOUND);
    assert_non_null(strstr(deras_errmsg(), "vocabulary"));

    gb_base(&b, "llama", NULL);
    gb_str(&b, "llama.attention.head_count_kv", "two");
    assert_int_equal(gb_config(&b, &c), DERAS_EFORMAT);
    assert_non_null(strstr(deras_errmsg(), "llama.attention.head_count_kv"));

    gb_base(&b, "llama", NULL);
    gb_u32(&b, "llama.attention.head_count_kv", 3);
    assert_int_equal(gb_config(&b, &c), DERAS_EFORMAT);
    assert_non_null(strstr(deras_errmsg(), "n_kv_heads 3"));
    assert_non_null(strstr(deras_errmsg(), "cfg.gguf"));
}
