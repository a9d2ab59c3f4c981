/* test_checkpoint.c - model configs and checkpoints from GGUF and Hugging Face files.
 *
 * Data (tests/ref/make_checkpoint_fixtures.py, make_rope_configs.py): a tiny random Llama and a
 * tiny Qwen2, each as a GGUF (llama.cpp names, Q/K permuted for llama) and as an HF
 * directory (the llama one sharded, in F32/F16/BF16), holding the same numbers; configs
 * with transformers' RoPE inverse frequencies. Bad checkpoints are made here by patching
 * temporary copies; bad configs by writing small JSON and GGUF files.
 */
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

/* ---- small helpers: files and temporary directories ---- */

static char *data(const char *rel)
{
    char *p = test_data_path(rel);
    struct stat st;
    if (stat(p, &st) != 0)
        test_skip("%s missing (run the scripts in tests/ref/)", p);
    return p;
}

static void write_file(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
}

static char *path_join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

static char *make_tmpdir(void)
{
    char tmpl[] = "/tmp/deras-ckpt-XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    return strdup(tmpl);
}

static void rm_tree(char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char *p = path_join(dir, e->d_name);
            unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

/* Copy every file of src_dir into a new temporary directory. */
static char *copy_dir(const char *src_dir)
{
    char *dst = make_tmpdir();
    DIR *d = opendir(src_dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char *s = path_join(src_dir, e->d_name), *t = path_join(dst, e->d_name);
        size_t n = 0;
        char *buf = test_read_file(s, &n);
        assert_non_null(buf);
        write_file(t, buf, n);
        free(buf);
        free(s);
        free(t);
    }
    closedir(d);
    return dst;
}

/* Replace the first `from` by `to` (same length) in a file. */
static void patch_file(const char *path, const char *from, const char *to)
{
    size_t n = 0, fl = strlen(from);
    assert_int_equal(fl, strlen(to));
    char *buf = test_read_file(path, &n);
    assert_non_null(buf);
    char *at = memmem(buf, n, from, fl);
    if (!at)
        fail_msg("%s: '%s' not found to patch", path, from);
    memcpy(at, to, fl);
    write_file(path, buf, n);
    free(buf);
}

static void expect_open_fails(const char *path, int status, const char *w1, const char *w2,
                              const char *w3)
{
    checkpoint_t *c = (checkpoint_t *)0x1;
    deras_errclear();
    int rc = checkpoint_open(path, &c);
    if (rc != status)
        fail_msg("%s: expected %s, got %s (%s)", path, deras_status_name(status),
                 deras_status_name(rc), deras_errmsg());
    assert_null(c);
    const char *want[] = {w1, w2, w3};
    for (int i = 0; i < 3; i++)
        if (want[i] && !strstr(deras_errmsg(), want[i]))
            fail_msg("expected the message to contain '%s', got '%s'", want[i], deras_errmsg());
}

static checkpoint_t *open_ok(const char *path)
{
    checkpoint_t *c = NULL;
    int rc = checkpoint_open(path, &c);
    if (rc)
        fail_msg("%s: expected to open, got %s: %s", path, deras_status_name(rc), deras_errmsg());
    return c;
}

/* ---- configs ---- */

static void assert_configs_equal(const model_config *a, const model_config *b)
{
#define SAME(f)                                                                              \
    if (a->f != b->f)                                                                      \
        fail_msg("config field " #f ": %g vs %g", (double)a->f, (double)b->f);
    SAME(arch) SAME(n_layers) SAME(d_model) SAME(n_heads) SAME(n_kv_heads) SAME(head_dim)
    SAME(d_ff) SAME(vocab_size) SAME(max_seq_len) SAME(norm_eps) SAME(rope_theta)
    SAME(rope_scaling) SAME(sliding_window) SAME(tied_embeddings) SAME(qkv_bias)
#undef SAME
}

static void tiny_configs_agree_between_gguf_and_hf(void **state)
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

static void hf_configs_read_in_classic_and_v5_form_with_transformers_inv_freq(void **state)
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

static void gguf_rope_freqs_tensor_reproduces_llama3_scaling(void **state)
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

static void hf_config_defaults_follow_transformers(void **state)
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

static void hf_config_refuses_what_deras_does_not_implement(void **state)
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

static void hf_config_type_and_value_errors_name_the_field(void **state)
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

static void gguf_config_defaults_and_errors(void **state)
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

/* ---- checkpoints ---- */

static const char *role_str(int t)
{
    static const char *n[CKPT_N_TENSORS] = {
        "TOK_EMBD", "OUTPUT_NORM", "OUTPUT", "ATTN_NORM", "ATTN_Q", "ATTN_K", "ATTN_V",
        "ATTN_Q_BIAS", "ATTN_K_BIAS", "ATTN_V_BIAS", "ATTN_OUT", "FFN_NORM", "FFN_GATE",
        "FFN_UP", "FFN_DOWN"};
    return n[t];
}

static bool is_layer(int t)
{
    return t >= CKPT_ATTN_NORM;
}

/* Every role and layer: same presence, shape and rows (whole tensors and random ranges)
 * from both checkpoints, bit for bit. */
static void compare_checkpoints(const char *gguf_rel, const char *hf_rel, int n_present)
{
    char *gp = data(gguf_rel), *hp = data(hf_rel);
    checkpoint_t *a = open_ok(gp), *b = open_ok(hp);
    assert_non_null(checkpoint_gguf(a));
    assert_null(checkpoint_hf_dir(a));
    assert_null(checkpoint_gguf(b));
    assert_string_equal(checkpoint_hf_dir(b), hp);
    assert_string_equal(checkpoint_path(a), gp);
    assert_configs_equal(checkpoint_config(a), checkpoint_config(b));
    const int n_layers = checkpoint_config(a)->n_layers;
    uint64_t rng = 42;
    int n_seen = 0;
    for (int t = 0; t < CKPT_N_TENSORS; t++) {
        for (int l = 0; l < (is_layer(t) ? n_layers : 1); l++) {
            bool ha = checkpoint_has(a, (enum ckpt_tensor)t, l);
            if (ha != checkpoint_has(b, (enum ckpt_tensor)t, l))
                fail_msg("%s layer %d: present in one checkpoint only", role_str(t), l);
            if (!ha)
                continue;
            n_seen++;
            int64_t ra, ca, rb, cb;
            assert_int_equal(checkpoint_shape(a, (enum ckpt_tensor)t, l, &ra, &ca), DERAS_OK);
            assert_int_equal(checkpoint_shape(b, (enum ckpt_tensor)t, l, &rb, &cb), DERAS_OK);
            if (ra != rb || ca != cb)
                fail_msg("%s layer %d: shape (%lld, %lld) vs (%lld, %lld)", role_str(t), l,
                         (long long)ra, (long long)ca, (long long)rb, (long long)cb);
            size_t n = (size_t)(ra * ca);
            float *fa = malloc(n * sizeof *fa), *fb = malloc(n * sizeof *fb);
            assert_int_equal(checkpoint_read_rows(a, (enum ckpt_tensor)t, l, 0, ra, fa), DERAS_OK);
            assert_int_equal(checkpoint_read_rows(b, (enum ckpt_tensor)t, l, 0, rb, fb), DERAS_OK);
            for (size_t i = 0; i < n; i++)
                if (memcmp(&fa[i], &fb[i], 4))
                    fail_msg("%s layer %d element (%zu, %zu): GGUF %.9g, HF %.9g", role_str(t), l,
                             i / (size_t)ca, i % (size_t)ca, fa[i], fb[i]);
            /* random ranges must equal the slices of the whole tensor */
            float *part = malloc(n * sizeof *part);
            for (int k = 0; k < 20; k++) {
                int64_t r0 = (int64_t)(test_rng_next(&rng) % (uint64_t)ra);
                int64_t nr = 1 + (int64_t)(test_rng_next(&rng) % (uint64_t)(ra - r0));
                checkpoint_t *which = (k & 1) ? a : b;
                assert_int_equal(checkpoint_read_rows(which, (enum ckpt_tensor)t, l, r0, nr, part),
                                 DERAS_OK);
                if (memcmp(part, fa + r0 * ca, (size_t)(nr * ca) * sizeof(float)))
                    fail_msg("%s layer %d rows %lld+%lld from the %s checkpoint differ from the "
                             "whole-tensor read", role_str(t), l, (long long)r0, (long long)nr,
                             (k & 1) ? "GGUF" : "HF");
            }
            free(part);
            free(fa);
            free(fb);
        }
    }
    assert_int_equal(n_seen, n_present);
    assert_true(checkpoint_file_bytes(a) > 0 && checkpoint_file_bytes(b) > 0);
    checkpoint_destroy(&a);
    checkpoint_destroy(&b);
    assert_null(a);
    checkpoint_destroy(&a);
    free(gp);
    free(hp);
}

static void llama_gguf_and_sharded_hf_dir_give_identical_rows(void **state)
{
    (void)state;
    /* 3 global (embedding, norm, output) + 9 per layer x 2 layers */
    compare_checkpoints("ckpt/llama.gguf", "ckpt/llama_hf", 3 + 9 * 2);
}

static void qwen2_gguf_and_hf_dir_give_identical_rows_with_biases(void **state)
{
    (void)state;
    /* tied: no output; 12 per layer with the three biases */
    compare_checkpoints("ckpt/qwen2.gguf", "ckpt/qwen2_hf", 2 + 12 * 2);
}

static void gguf_llama_q_k_rows_are_unpermuted_and_qwen2_not(void **state)
{
    (void)state;
    /* row 1 of head 0 in HF order lives at stored row 2 in the llama GGUF (h*hd + 2i + j
     * with i = 1, j = 0); the qwen2 GGUF stores rows as they are */
    char *p = data("ckpt/llama.gguf");
    checkpoint_t *c = open_ok(p);
    const gguf_t *g = checkpoint_gguf(c);
    tensor_view v;
    assert_int_equal(gguf_find_tensor(g, "blk.0.attn_q.weight", &v), DERAS_OK);
    float row[32], stored[32];
    assert_int_equal(checkpoint_read_rows(c, CKPT_ATTN_Q, 0, 1, 1, row), DERAS_OK);
    memcpy(stored, (const float *)v.data + 2 * 32, sizeof stored);
    assert_memory_equal(row, stored, sizeof row);
    /* HF row 4 (head 0, second half, i = 0) is stored at row 1 */
    assert_int_equal(checkpoint_read_rows(c, CKPT_ATTN_Q, 0, 4, 1, row), DERAS_OK);
    memcpy(stored, (const float *)v.data + 1 * 32, sizeof stored);
    assert_memory_equal(row, stored, sizeof row);
    /* V is never permuted */
    assert_int_equal(gguf_find_tensor(g, "blk.0.attn_v.weight", &v), DERAS_OK);
    assert_int_equal(checkpoint_read_rows(c, CKPT_ATTN_V, 0, 1, 1, row), DERAS_OK);
    assert_memory_equal(row, (const float *)v.data + 32, sizeof row);
    checkpoint_destroy(&c);
    free(p);

    p = data("ckpt/qwen2.gguf");
    c = open_ok(p);
    assert_int_equal(gguf_find_tensor(checkpoint_gguf(c), "blk.1.attn_k.weight", &v), DERAS_OK);
    assert_int_equal(checkpoint_read_rows(c, CKPT_ATTN_K, 1, 1, 1, row), DERAS_OK);
    assert_memory_equal(row, (const float *)v.data + 32, sizeof row);
    checkpoint_destroy(&c);
    free(p);
}

static void row_ranges_roles_and_layers_are_checked(void **state)
{
    (void)state;
    char *p = data("ckpt/qwen2.gguf");
    checkpoint_t *c = open_ok(p);
    float buf[64 * 32];
    assert_int_equal(checkpoint_read_rows(c, CKPT_TOK_EMBD, 0, 0, 64, buf), DERAS_OK);
    assert_int_equal(checkpoint_read_rows(c, CKPT_TOK_EMBD, 0, 63, 1, buf), DERAS_OK);
    assert_int_equal(checkpoint_read_rows(c, CKPT_TOK_EMBD, 0, 64, 0, buf), DERAS_OK);
    assert_int_equal(checkpoint_read_rows(c, CKPT_TOK_EMBD, 0, 63, 2, buf), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "token_embd.weight"));
    assert_int_equal(checkpoint_read_rows(c, CKPT_TOK_EMBD, 0, -1, 1, buf), DERAS_ERANGE);
    assert_int_equal(checkpoint_read_rows(c, CKPT_TOK_EMBD, 0, 0, -1, buf), DERAS_ERANGE);
    assert_int_equal(checkpoint_read_rows(c, CKPT_TOK_EMBD, 0, 1, INT64_MAX, buf), DERAS_ERANGE);
    assert_int_equal(checkpoint_read_rows(c, CKPT_ATTN_Q_BIAS, 0, 0, 1, buf), DERAS_OK);
    assert_int_equal(checkpoint_read_rows(c, CKPT_ATTN_Q_BIAS, 0, 1, 1, buf), DERAS_ERANGE);
    assert_int_equal(checkpoint_read_rows(c, CKPT_FFN_UP, 2, 0, 1, buf), DERAS_ERANGE);
    assert_int_equal(checkpoint_read_rows(c, CKPT_FFN_UP, -1, 0, 1, buf), DERAS_ERANGE);
    assert_int_equal(checkpoint_read_rows(c, CKPT_OUTPUT, 0, 0, 1, buf), DERAS_ENOTFOUND);
    assert_non_null(strstr(deras_errmsg(), "tied"));
    assert_int_equal(checkpoint_read_rows(c, CKPT_N_TENSORS, 0, 0, 1, buf), DERAS_EINVAL);
    assert_int_equal(checkpoint_read_rows(c, CKPT_TOK_EMBD, 0, 0, 1, NULL), DERAS_EINVAL);
    assert_int_equal(checkpoint_read_rows(NULL, CKPT_TOK_EMBD, 0, 0, 1, buf), DERAS_EINVAL);
    int64_t r, k;
    assert_int_equal(checkpoint_shape(c, CKPT_OUTPUT_NORM, 0, &r, &k), DERAS_OK);
    assert_true(r == 1 && k == 32);
    assert_int_equal(checkpoint_shape(c, CKPT_FFN_DOWN, 1, &r, &k), DERAS_OK);
    assert_true(r == 32 && k == 48);
    assert_int_equal(checkpoint_shape(c, CKPT_ATTN_K, 0, &r, &k), DERAS_OK);
    assert_true(r == 16 && k == 32);
    assert_false(checkpoint_has(c, CKPT_OUTPUT, 0));
    assert_false(checkpoint_has(c, CKPT_FFN_UP, 2));
    assert_true(checkpoint_has(c, CKPT_OUTPUT_NORM, 12345)); /* layer ignored for globals */
    checkpoint_destroy(&c);
    free(p);
}

/* A temporary copy of a tiny GGUF with one patch applied. */
static char *gguf_copy_patched(const char *rel, const char *from, const void *to, size_t to_len,
                               size_t skip_after)
{
    char *src = data(rel);
    size_t n = 0;
    char *buf = test_read_file(src, &n);
    assert_non_null(buf);
    char *at = memmem(buf, n, from, strlen(from));
    if (!at)
        fail_msg("'%s' not found in %s", from, src);
    memcpy(at + skip_after, to, to_len);
    char tmpl[] = "/tmp/deras-ckpt-XXXXXX.gguf";
    int fd = mkstemps(tmpl, 5);
    assert_true(fd >= 0);
    close(fd);
    write_file(tmpl, buf, n);
    free(buf);
    free(src);
    return strdup(tmpl);
}

static void gguf_checkpoint_errors_name_file_and_tensor(void **state)
{
    (void)state;
    char *p;
    p = gguf_copy_patched("ckpt/llama.gguf", "blk.1.ffn_up.weight", "blk.1.ffn_uq.weight", 19, 0);
    expect_open_fails(p, DERAS_ENOTFOUND, p, "'blk.1.ffn_up.weight'", "missing");
    unlink(p);
    free(p);

    /* ffn_gate's ne = [32, 48] -> [32, 47]: HF shape (47, 32) instead of (48, 32) */
    uint64_t ne1 = 47;
    p = gguf_copy_patched("ckpt/llama.gguf", "blk.0.ffn_gate.weight", &ne1, 8,
                          strlen("blk.0.ffn_gate.weight") + 4 + 8);
    expect_open_fails(p, DERAS_EFORMAT, "'blk.0.ffn_gate.weight'", "expected shape (48, 32)",
                      "found (47, 32)");
    unlink(p);
    free(p);

    uint32_t i32 = 26; /* F32 -> I32: same size, not computable */
    p = gguf_copy_patched("ckpt/llama.gguf", "blk.0.attn_norm.weight", &i32, 4,
                          strlen("blk.0.attn_norm.weight") + 4 + 8);
    expect_open_fails(p, DERAS_EUNSUPPORTED, "'blk.0.attn_norm.weight'", "type I32", p);
    unlink(p);
    free(p);

    p = gguf_copy_patched("ckpt/llama.gguf", "llama", "llamb", 5, 0);
    expect_open_fails(p, DERAS_EUNSUPPORTED, "'llamb'", p, NULL);
    unlink(p);
    free(p);

    /* the qwen2 file relabelled llama: a llama GGUF with Q/K/V biases, which deras would
     * otherwise silently ignore */
    p = gguf_copy_patched("ckpt/qwen2.gguf", "qwen2", "llama", 5, 0);
    {
        size_t n = 0;
        char *buf = test_read_file(p, &n), *at;
        while ((at = memmem(buf, n, "qwen2", 5)))
            memcpy(at, "llama", 5);
        write_file(p, buf, n);
        free(buf);
    }
    expect_open_fails(p, DERAS_EUNSUPPORTED, "'blk.0.attn_q.bias'", "no such bias", p);
    unlink(p);
    free(p);

    expect_open_fails("/nonexistent/model.gguf", DERAS_EIO, "/nonexistent/model.gguf", NULL,
                      NULL);
    char *fx = data("gguf/fixture_v3.gguf");
    expect_open_fails(fx, DERAS_EUNSUPPORTED, "'testarch'", NULL, NULL);
    free(fx);
}

static void hf_checkpoint_errors_name_file_and_tensor(void **state)
{
    (void)state;
    char *src = data("ckpt/llama_hf");
    char *d, *f;

    d = copy_dir(src);
    f = path_join(d, "model-00002-of-00002.safetensors");
    patch_file(f, "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weighX");
    expect_open_fails(d, DERAS_ENOTFOUND, f, "'model.layers.1.mlp.up_proj.weight'", "missing");
    free(f);
    rm_tree(d);

    d = copy_dir(src);
    f = path_join(d, "model-00001-of-00002.safetensors");
    patch_file(f, "\"model.layers.0.mlp.gate_proj.weight\":{\"dtype\":\"F16\",\"shape\":[48,32]",
               "\"model.layers.0.mlp.gate_proj.weight\":{\"dtype\":\"F16\",\"shape\":[32,48]");
    expect_open_fails(d, DERAS_EFORMAT, f, "expected shape (48, 32)", "found (32, 48)");
    free(f);
    rm_tree(d);

    d = copy_dir(src);
    f = path_join(d, "model-00002-of-00002.safetensors");
    patch_file(f, "\"model.layers.1.input_layernorm.weight\":{\"dtype\":\"BF16\"",
               "\"model.layers.1.input_layernorm.weight\":{\"dtype\":\"I16\" ");
    expect_open_fails(d, DERAS_EUNSUPPORTED, f, "'model.layers.1.input_layernorm.weight'",
                      "type I16");
    free(f);
    rm_tree(d);

    d = copy_dir(src);
    f = path_join(d, "model.safetensors.index.json");
    patch_file(f, "\"model.norm.weight\"", "\"model.norm.weighX\"");
    expect_open_fails(d, DERAS_ENOTFOUND, f, "'model.norm.weight'", "weight_map");
    free(f);
    rm_tree(d);

    d = copy_dir(src);
    f = path_join(d, "config.json");
    patch_file(f, "\"model_type\": \"llama\"", "\"model_type\": \"gpt2x\"");
    expect_open_fails(d, DERAS_EUNSUPPORTED, f, "'gpt2x'", NULL);
    free(f);
    rm_tree(d);

    d = copy_dir(src);
    f = path_join(d, "config.json");
    unlink(f);
    expect_open_fails(d, DERAS_ENOTFOUND, "config.json", d, NULL);
    free(f);
    rm_tree(d);

    char *shard = path_join(src, "model-00001-of-00002.safetensors");
    expect_open_fails(shard, DERAS_EFORMAT, "by its directory", shard, NULL);
    free(shard);

    /* a directory with a config but no weights */
    d = make_tmpdir();
    char *cfg_src = path_join(src, "config.json");
    f = path_join(d, "config.json");
    size_t n = 0;
    char *buf = test_read_file(cfg_src, &n);
    write_file(f, buf, n);
    free(buf);
    free(cfg_src);
    expect_open_fails(d, DERAS_ENOTFOUND, "model.safetensors", d, NULL);
    free(f);
    rm_tree(d);
    free(src);
}

static void hf_tied_config_ignores_a_saved_lm_head(void **state)
{
    (void)state;
    char *src = data("ckpt/llama_hf");
    char *d = copy_dir(src);
    char *f = path_join(d, "config.json");
    patch_file(f, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true ");
    checkpoint_t *c = open_ok(d);
    assert_true(checkpoint_config(c)->tied_embeddings);
    assert_false(checkpoint_has(c, CKPT_OUTPUT, 0));
    assert_int_equal(checkpoint_read_rows(c, CKPT_OUTPUT, 0, 0, 1, (float[32]){0}),
                     DERAS_ENOTFOUND);
    checkpoint_destroy(&c);
    free(f);
    rm_tree(d);
    free(src);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_configs_agree_between_gguf_and_hf),
        cmocka_unit_test(hf_configs_read_in_classic_and_v5_form_with_transformers_inv_freq),
        cmocka_unit_test(gguf_rope_freqs_tensor_reproduces_llama3_scaling),
        cmocka_unit_test(hf_config_defaults_follow_transformers),
        cmocka_unit_test(hf_config_refuses_what_deras_does_not_implement),
        cmocka_unit_test(hf_config_type_and_value_errors_name_the_field),
        cmocka_unit_test(gguf_config_defaults_and_errors),
        cmocka_unit_test(llama_gguf_and_sharded_hf_dir_give_identical_rows),
        cmocka_unit_test(qwen2_gguf_and_hf_dir_give_identical_rows_with_biases),
        cmocka_unit_test(gguf_llama_q_k_rows_are_unpermuted_and_qwen2_not),
        cmocka_unit_test(row_ranges_roles_and_layers_are_checked),
        cmocka_unit_test(gguf_checkpoint_errors_name_file_and_tensor),
        cmocka_unit_test(hf_checkpoint_errors_name_file_and_tensor),
        cmocka_unit_test(hf_tied_config_ignores_a_saved_lm_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
