/* SPDX-License-Identifier: Apache-2.0 */
/* test_checkpoint.c - model configs and checkpoints from GGUF and Hugging Face files:
 * checkpoints here (same rows from either format, Q/K unpermuting, range checks, errors
 * that name the file and tensor), configs in test_checkpoint_config.c. One executable,
 * one ctest; well under a second.
 *
 * Data (tests/ref/make_checkpoint_fixtures.py, make_rope_configs.py): a tiny random Llama and a
 * tiny Qwen2, each as a GGUF (llama.cpp names, Q/K permuted for llama) and as an HF
 * directory (the llama one sharded, in F32/F16/BF16), holding the same numbers; configs
 * with transformers' RoPE inverse frequencies. Bad checkpoints are made here by patching
 * temporary copies; bad configs by writing small JSON and GGUF files.
 */
#include "test_checkpoint.h"

/* ---- small helpers: files and temporary directories ---- */

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

/* The stored bytes of a block-aligned slice, dequantized, are the rows checkpoint_read_cols
 * gives (Q rows of a llama GGUF gathered through the permutation); an unaligned slice is
 * refused. */
static void stored_slices_are_the_dequantized_rows(void **state)
{
    (void)state;
    char *p = data("tiny/llama-gqa-q8_0.gguf");
    checkpoint_t *c = open_ok(p);
    assert_int_equal(checkpoint_dtype(c, CKPT_ATTN_Q, 0), DT_Q8_0);
    assert_int_equal(checkpoint_dtype(c, CKPT_ATTN_Q_BIAS, 0), DT_UNSUPPORTED);
    int64_t rows, cols;
    assert_int_equal(checkpoint_shape(c, CKPT_ATTN_Q, 0, &rows, &cols), DERAS_OK);
    const int64_t r0 = 1, n = rows - 2, c0 = 32, nc = cols - 32; /* rows inside heads */
    uint8_t *q = malloc((size_t)n * (size_t)(nc / 32) * 34);
    float *got = malloc(sizeof(float) * (size_t)(n * nc)), *want = malloc(sizeof(float) * (size_t)(n * nc));
    assert_int_equal(checkpoint_read_stored(c, CKPT_ATTN_Q, 0, r0, n, c0, nc, q), DERAS_OK);
    assert_int_equal(dtype_to_f32(DT_Q8_0, q, got, n * nc), DERAS_OK);
    assert_int_equal(checkpoint_read_cols(c, CKPT_ATTN_Q, 0, r0, n, c0, nc, want, NULL), DERAS_OK);
    assert_memory_equal(got, want, sizeof(float) * (size_t)(n * nc));
    assert_int_equal(checkpoint_read_stored(c, CKPT_ATTN_Q, 0, 0, 1, 16, 32, q), DERAS_EFORMAT);
    assert_int_equal(checkpoint_read_stored(c, CKPT_ATTN_Q, 0, rows, 1, 0, 32, q), DERAS_ERANGE);
    free(q), free(got), free(want);
    checkpoint_destroy(&c);
    free(p);
}

/* The stored rows in place: checkpoint_stored_rows points at the mapping, in stored order
 * (GGUF llama Q/K permuted, qk_perm_hd = head_dim; HF files and V not), and a reference
 * taken with checkpoint_retain keeps the mapping readable after the opener's destroy. */
static void stored_rows_point_into_the_mapping_and_outlive_the_opener(void **state)
{
    (void)state;
    char *p = data("tiny/llama-gqa-q8_0.gguf");
    checkpoint_t *c = open_ok(p);
    const void *q, *v;
    size_t rb, rbv;
    int perm = -1, permv = -1;
    int64_t rows, cols;
    assert_int_equal(checkpoint_shape(c, CKPT_ATTN_Q, 0, &rows, &cols), DERAS_OK);
    assert_int_equal(checkpoint_stored_rows(c, CKPT_ATTN_Q, 0, &q, &rb, &perm), DERAS_OK);
    assert_int_equal(checkpoint_stored_rows(c, CKPT_ATTN_V, 1, &v, &rbv, &permv), DERAS_OK);
    const int hd = checkpoint_config(c)->head_dim;
    assert_int_equal(perm, hd);
    assert_int_equal(permv, 0);
    assert_int_equal(rb, (size_t)cols / 32 * 34);
    /* HF row h*hd + j*hd/2 + i is the stored row h*hd + 2i + j */
    uint8_t *row = malloc(rb);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t h = r / hd, w = r % hd, s = h * hd + 2 * (w % (hd / 2)) + w / (hd / 2);
        assert_int_equal(checkpoint_read_stored(c, CKPT_ATTN_Q, 0, r, 1, 0, cols, row), DERAS_OK);
        if (memcmp(row, (const uint8_t *)q + (size_t)s * rb, rb))
            fail_msg("HF row %lld is not stored row %lld", (long long)r, (long long)s);
    }
    checkpoint_t *ref = checkpoint_retain(c);
    assert_ptr_equal(ref, c);
    checkpoint_destroy(&c);
    assert_null(c);
    /* the mapping is still there: read it (the sanitizers would catch an unmapped read) */
    uint8_t sum = 0;
    for (size_t i = 0; i < rbv; i++)
        sum ^= ((const uint8_t *)v)[i];
    (void)sum;
    checkpoint_prefetch(v, rbv);
    checkpoint_prefetch(NULL, 0);
    assert_int_equal(checkpoint_stored_rows(ref, CKPT_ATTN_Q, 0, NULL, NULL, NULL), DERAS_OK);
    assert_int_equal(checkpoint_stored_rows(ref, CKPT_OUTPUT, 0, &q, &rb, &perm), DERAS_ENOTFOUND);
    checkpoint_destroy(&ref);
    assert_null(checkpoint_retain(NULL));
    free(row);
    free(p);

    p = data("tiny/llama-gqa"); /* safetensors: HF order */
    c = open_ok(p);
    assert_int_equal(checkpoint_stored_rows(c, CKPT_ATTN_K, 0, &q, &rb, &perm), DERAS_OK);
    assert_int_equal(perm, 0);
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
        cmocka_unit_test(stored_slices_are_the_dequantized_rows),
        cmocka_unit_test(stored_rows_point_into_the_mapping_and_outlive_the_opener),
        cmocka_unit_test(row_ranges_roles_and_layers_are_checked),
        cmocka_unit_test(gguf_checkpoint_errors_name_file_and_tensor),
        cmocka_unit_test(hf_checkpoint_errors_name_file_and_tensor),
        cmocka_unit_test(hf_tied_config_ignores_a_saved_lm_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
