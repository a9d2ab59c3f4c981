/* SPDX-License-Identifier: Apache-2.0 */
/* test_gguf.c - the GGUF reader: every accessor on gguf-py fixtures, and the bad-file corpus.
 *
 * Fixtures come from tests/ref/make_gguf_fixtures.py. The bad files are made here from the
 * valid v3 fixture: every proper prefix, and one targeted corruption per validation rule,
 * located by searching the fixture for the key or tensor name it concerns. Each must fail
 * with the expected status and a message naming the file, the key or tensor, and the
 * reason; none may crash (the sanitizer build runs this too).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "common/base/dtype.h"
#include "common/checkpoint/gguf.h"
#include "common/base/status.h"
#include "test_util.h"

#define BAD_NAME "corrupt.gguf"

static uint8_t *load_fixture(const char *rel, size_t *len)
{
    char *path = test_data_path(rel);
    uint8_t *buf = (uint8_t *)test_read_file(path, len);
    if (!buf)
        test_skip("fixture %s missing (run tests/ref/make_gguf_fixtures.py)", path);
    free(path);
    return buf;
}

static gguf_t *open_ok(const uint8_t *buf, size_t n)
{
    gguf_t *g = NULL;
    int rc = gguf_open_memory(buf, n, "fixture", &g);
    if (rc != DERAS_OK)
        fail_msg("expected the fixture to open, got %s: %s", deras_status_name(rc),
                 deras_errmsg());
    return g;
}

/* Offset of the GGUF string (u64 length + bytes) `s`: the first occurrence at or after
 * `from`, or the last one before `before` when last is set. */
static size_t find_gguf_str(const uint8_t *buf, size_t n, const char *s, size_t from,
                            size_t before, bool last)
{
    size_t len = strlen(s), found = SIZE_MAX;
    for (size_t i = from; i + 8 + len <= n && i < before; i++) {
        uint64_t l;
        memcpy(&l, buf + i, 8);
        if (l == len && !memcmp(buf + i + 8, s, len)) {
            found = i;
            if (!last)
                break;
        }
    }
    if (found == SIZE_MAX)
        fail_msg("fixture: string '%s' not found", s);
    return found;
}

static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Offset just past the key string of metadata entry `key` (its value type field). */
static size_t kv_type_off(const uint8_t *buf, size_t n, const char *key)
{
    return find_gguf_str(buf, n, key, 24, n, false) + 8 + strlen(key);
}

/* Where the tensor infos live: after all metadata, before the data. A tensor name is also
 * a key in the fixture ("t.f32"), so take the last occurrence before the data section. */
static size_t data_start(const uint8_t *buf, size_t n)
{
    gguf_t *g = open_ok(buf, n);
    tensor_view v;
    assert_int_equal(gguf_tensor_at(g, 0, &v), DERAS_OK);
    size_t off = (size_t)((const uint8_t *)v.data - buf);
    gguf_destroy(&g);
    return off;
}

/* Offset of tensor `name`'s n_dims field. */
static size_t ti_off(const uint8_t *buf, size_t n, const char *name)
{
    return find_gguf_str(buf, n, name, 24, data_start(buf, n), true) + 8 + strlen(name);
}

static void expect_fail(const uint8_t *buf, size_t n, int status, const char *what1,
                        const char *what2, const char *case_name)
{
    gguf_t *g = (gguf_t *)0x1;
    deras_errclear();
    int rc = gguf_open_memory(buf, n, BAD_NAME, &g);
    if (rc != status)
        fail_msg("%s: expected %s, got %s (%s)", case_name, deras_status_name(status),
                 deras_status_name(rc), deras_errmsg());
    if (g != NULL)
        fail_msg("%s: *out must be NULL on failure", case_name);
    const char *msg = deras_errmsg();
    const char *want[] = {BAD_NAME, what1, what2};
    for (int i = 0; i < 3; i++)
        if (want[i] && !strstr(msg, want[i]))
            fail_msg("%s: expected the message to contain '%s', got '%s'", case_name, want[i],
                     msg);
}

/* ---- the valid fixtures ---- */

static void scalars_of_every_type_read_back(void **state)
{
    (void)state;
    size_t n;
    uint8_t *buf = load_fixture("gguf/fixture_v3.gguf", &n);
    gguf_t *g = open_ok(buf, n);
    assert_int_equal(gguf_version(g), 3);
    assert_string_equal(gguf_name(g), "fixture");

    const struct { const char *key; int64_t want; } ints[] = {
        {"t.u8", 200}, {"t.i8", -100}, {"t.u16", 60000}, {"t.i16", -30000},
        {"t.u32", 4000000000LL}, {"t.i32", -2000000000LL}, {"t.u64_small", 7},
        {"t.i64", -(1LL << 62)},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t v = 0;
        int rc = gguf_get_int(g, ints[i].key, &v);
        if (rc || v != ints[i].want)
            fail_msg("%s: expected %lld, got %lld (%s)", ints[i].key, (long long)ints[i].want,
                     (long long)v, deras_status_name(rc));
        double d = 0;
        assert_int_equal(gguf_get_float(g, ints[i].key, &d), DERAS_OK);
        assert_true(d == (double)ints[i].want);
    }
    int64_t big;
    assert_int_equal(gguf_get_int(g, "t.u64", &big), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "t.u64"));

    double d;
    assert_int_equal(gguf_get_float(g, "t.f32", &d), DERAS_OK);
    assert_true(d == 1.5);
    assert_int_equal(gguf_get_float(g, "t.f64", &d), DERAS_OK);
    assert_true(d == 2.718281828459045);

    bool b = false;
    assert_int_equal(gguf_get_bool(g, "t.bool", &b), DERAS_OK);
    assert_true(b);
    assert_int_equal(gguf_get_bool(g, "t.bool_false", &b), DERAS_OK);
    assert_false(b);

    const char *s;
    size_t len;
    assert_int_equal(gguf_get_str(g, "general.architecture", &s, &len), DERAS_OK);
    assert_string_equal(s, "testarch");
    assert_int_equal(gguf_get_str(g, "t.str", &s, &len), DERAS_OK);
    assert_int_equal(len, 6);
    assert_string_equal(s, "h\xc3\xa9llo");
    assert_int_equal(gguf_get_str(g, "t.str_nul", &s, &len), DERAS_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(s, "a\0b", 4); /* embedded NUL kept, and NUL-terminated */

    gguf_destroy(&g);
    assert_null(g);
    free(buf);
}

static void type_mismatch_and_missing_key_name_the_key_and_types(void **state)
{
    (void)state;
    size_t n;
    uint8_t *buf = load_fixture("gguf/fixture_v3.gguf", &n);
    gguf_t *g = open_ok(buf, n);
    int64_t i;
    double d;
    bool b;
    const char *s;

    assert_int_equal(gguf_get_int(g, "t.f32", &i), DERAS_EFORMAT);
    assert_non_null(strstr(deras_errmsg(), "'t.f32'"));
    assert_non_null(strstr(deras_errmsg(), "float32"));
    assert_non_null(strstr(deras_errmsg(), "integer"));
    assert_int_equal(gguf_get_float(g, "t.str", &d), DERAS_EFORMAT);
    assert_int_equal(gguf_get_bool(g, "t.u8", &b), DERAS_EFORMAT);
    assert_non_null(strstr(deras_errmsg(), "uint8"));
    assert_int_equal(gguf_get_str(g, "arr.str", &s, NULL), DERAS_EFORMAT);
    assert_non_null(strstr(deras_errmsg(), "array of string"));
    assert_int_equal(gguf_get_int(g, "t.bool", &i), DERAS_EFORMAT);

    assert_false(gguf_has_key(g, "no.such.key"));
    assert_true(gguf_has_key(g, "t.u8"));
    assert_int_equal(gguf_get_int(g, "no.such.key", &i), DERAS_ENOTFOUND);
    assert_non_null(strstr(deras_errmsg(), "no.such.key"));
    assert_non_null(strstr(deras_errmsg(), "fixture"));
    assert_int_equal(gguf_get_int(NULL, "t.u8", &i), DERAS_EINVAL);
    assert_int_equal(gguf_get_int(g, NULL, &i), DERAS_EINVAL);
    assert_false(gguf_has_key(NULL, "t.u8"));
    gguf_destroy(&g);
    free(buf);
}

static void arrays_of_every_element_type_read_back(void **state)
{
    (void)state;
    size_t n;
    uint8_t *buf = load_fixture("gguf/fixture_v3.gguf", &n);
    gguf_t *g = open_ok(buf, n);

    const struct { const char *key; int type; uint64_t n; } info[] = {
        {"arr.u8", GGUF_TYPE_UINT8, 3},    {"arr.i8", GGUF_TYPE_INT8, 2},
        {"arr.u16", GGUF_TYPE_UINT16, 2},  {"arr.i16", GGUF_TYPE_INT16, 2},
        {"arr.u32", GGUF_TYPE_UINT32, 2},  {"arr.i32", GGUF_TYPE_INT32, 3},
        {"arr.f32", GGUF_TYPE_FLOAT32, 2}, {"arr.bool", GGUF_TYPE_BOOL, 3},
        {"arr.str", GGUF_TYPE_STRING, 4},  {"arr.u64", GGUF_TYPE_UINT64, 2},
        {"arr.i64", GGUF_TYPE_INT64, 1},   {"arr.f64", GGUF_TYPE_FLOAT64, 2},
    };
    for (size_t k = 0; k < sizeof info / sizeof info[0]; k++) {
        int et = -1;
        uint64_t cnt = 0;
        assert_int_equal(gguf_get_arr_info(g, info[k].key, &et, &cnt), DERAS_OK);
        if (et != info[k].type || cnt != info[k].n)
            fail_msg("%s: expected type %d x %llu, got %d x %llu", info[k].key, info[k].type,
                     (unsigned long long)info[k].n, et, (unsigned long long)cnt);
    }
    assert_int_equal(gguf_get_arr_info(g, "t.u8", NULL, NULL), DERAS_EFORMAT);

    int32_t i32[3];
    assert_int_equal(gguf_get_arr_i32(g, "arr.u8", i32, 3), DERAS_OK);
    assert_true(i32[0] == 1 && i32[1] == 2 && i32[2] == 255);
    assert_int_equal(gguf_get_arr_i32(g, "arr.i8", i32, 2), DERAS_OK);
    assert_true(i32[0] == -1 && i32[1] == 2);
    assert_int_equal(gguf_get_arr_i32(g, "arr.u16", i32, 2), DERAS_OK);
    assert_true(i32[0] == 65535 && i32[1] == 0);
    assert_int_equal(gguf_get_arr_i32(g, "arr.i16", i32, 2), DERAS_OK);
    assert_true(i32[0] == -32768 && i32[1] == 5);
    assert_int_equal(gguf_get_arr_i32(g, "arr.i32", i32, 3), DERAS_OK);
    assert_true(i32[0] == -5 && i32[1] == 7 && i32[2] == 2147483647);
    assert_int_equal(gguf_get_arr_i32(g, "arr.u64", i32, 2), DERAS_OK);
    assert_true(i32[0] == 1 && i32[1] == 2);
    assert_int_equal(gguf_get_arr_i32(g, "arr.i64", i32, 1), DERAS_OK);
    assert_true(i32[0] == -3);
    assert_int_equal(gguf_get_arr_i32(g, "arr.u32", i32, 2), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "arr.u32"));
    assert_int_equal(gguf_get_arr_i32(g, "arr.i32", i32, 2), DERAS_EINVAL);
    assert_int_equal(gguf_get_arr_i32(g, "arr.f32", i32, 2), DERAS_EFORMAT);
    assert_int_equal(gguf_get_arr_i32(g, "arr.str", i32, 4), DERAS_EFORMAT);

    float f32[2];
    assert_int_equal(gguf_get_arr_f32(g, "arr.f32", f32, 2), DERAS_OK);
    assert_true(f32[0] == 0.5f && f32[1] == -1.25f);
    assert_int_equal(gguf_get_arr_f32(g, "arr.f64", f32, 2), DERAS_OK);
    assert_true(f32[0] == 0.1f && isinf(f32[1]));
    assert_int_equal(gguf_get_arr_f32(g, "arr.i32", f32, 3), DERAS_EFORMAT);

    const char *s;
    size_t len;
    const char *want[] = {"a", "", "tokens \xe2\x9c\x93"};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(gguf_get_arr_str(g, "arr.str", (uint64_t)k, &s, &len), DERAS_OK);
        assert_string_equal(s, want[k]);
        assert_int_equal(len, strlen(want[k]));
    }
    assert_int_equal(gguf_get_arr_str(g, "arr.str", 3, &s, &len), DERAS_OK);
    assert_int_equal(len, 300);
    assert_int_equal(strspn(s, "x"), 300);
    assert_int_equal(s[300], '\0');
    assert_int_equal(gguf_get_arr_str(g, "arr.str", 4, &s, &len), DERAS_ERANGE);
    assert_int_equal(gguf_get_arr_str(g, "arr.u8", 0, &s, &len), DERAS_EFORMAT);
    gguf_destroy(&g);
    free(buf);
}

static void check_f32(const tensor_view *v, const float *want, int64_t n)
{
    float *got = malloc((size_t)n * sizeof *got);
    assert_int_equal(tensor_view_numel(v), n);
    assert_int_equal(dtype_to_f32(v->dtype, v->data, got, n), DERAS_OK);
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], 4))
            fail_msg("%s[%lld]: expected %.9g, got %.9g", v->name, (long long)i, want[i], got[i]);
    free(got);
}

static void tensors_have_reversed_shapes_types_and_data(void **state)
{
    (void)state;
    size_t n;
    uint8_t *buf = load_fixture("gguf/fixture_v3.gguf", &n);
    gguf_t *g = open_ok(buf, n);
    const struct {
        const char *name; int dtype; const char *type_name; int n_dims; int64_t shape[4];
        size_t n_bytes;
    } want[] = {
        {"t.f32", DT_F32, "F32", 2, {3, 4}, 48},
        {"t.f16", DT_F16, "F16", 1, {8}, 16},
        {"t.bf16", DT_BF16, "BF16", 1, {4}, 8},
        {"t.q8_0", DT_Q8_0, "Q8_0", 2, {2, 64}, 136},
        {"t.q8_0.expected", DT_F32, "F32", 2, {2, 64}, 512},
        {"t.q4_k", DT_Q4_K, "Q4_K", 2, {1, 256}, 144},
        {"t.q4_k.expected", DT_F32, "F32", 2, {1, 256}, 1024},
        {"t.i32", DT_UNSUPPORTED, "I32", 1, {5}, 20},
        {"t.q2_k", DT_UNSUPPORTED, "Q2_K", 2, {1, 256}, 84},
        {"t.3d", DT_F32, "F32", 3, {2, 3, 4}, 96},
        {"t.4d", DT_F32, "F32", 4, {2, 1, 3, 2}, 48},
    };
    const int64_t nt = (int64_t)(sizeof want / sizeof want[0]);
    assert_int_equal(gguf_n_tensors(g), nt);
    for (int64_t i = 0; i < nt; i++) {
        tensor_view a, b;
        assert_int_equal(gguf_tensor_at(g, i, &a), DERAS_OK);
        assert_string_equal(a.name, want[i].name); /* file order */
        assert_int_equal(gguf_find_tensor(g, want[i].name, &b), DERAS_OK);
        assert_memory_equal(&a, &b, sizeof a);
        assert_int_equal(a.dtype, want[i].dtype);
        assert_string_equal(a.type_name, want[i].type_name);
        assert_int_equal(a.n_dims, want[i].n_dims);
        for (int d = 0; d < a.n_dims; d++)
            if (a.shape[d] != want[i].shape[d])
                fail_msg("%s: shape[%d] expected %lld, got %lld", a.name, d,
                         (long long)want[i].shape[d], (long long)a.shape[d]);
        assert_int_equal(a.n_bytes, want[i].n_bytes);
        const uint8_t *p = a.data;
        assert_true(p >= buf && p + a.n_bytes <= buf + n);
        assert_int_equal((size_t)(p - buf) % 32, 0);
    }

    tensor_view v, e;
    float vals[24];
    for (int k = 0; k < 24; k++)
        vals[k] = (float)k * (k < 12 ? 0.5f : 1.0f);
    assert_int_equal(gguf_find_tensor(g, "t.f32", &v), DERAS_OK);
    check_f32(&v, vals, 12);
    const float f16[8] = {1, -2, 0.5f, 65504, -0.0f, ldexpf(503, -24) /* 3e-5 in f16 */, 7, 8};
    assert_int_equal(gguf_find_tensor(g, "t.f16", &v), DERAS_OK);
    check_f32(&v, f16, 8);
    const float bf16[4] = {1.0f, -3.5f, 1.00000002e30f, 0};
    float bf16_want[4];
    memcpy(bf16_want, bf16, sizeof bf16);
    uint32_t u;
    memcpy(&u, &bf16_want[2], 4);
    u &= 0xffff0000u; /* the fixture truncated to bf16 */
    memcpy(&bf16_want[2], &u, 4);
    bf16_want[3] = ldexpf(1.0f, -130);
    assert_int_equal(gguf_find_tensor(g, "t.bf16", &v), DERAS_OK);
    check_f32(&v, bf16_want, 4);
    for (int k = 0; k < 24; k++)
        vals[k] = (float)k;
    assert_int_equal(gguf_find_tensor(g, "t.3d", &v), DERAS_OK);
    check_f32(&v, vals, 24);
    const char *quant[] = {"t.q8_0", "t.q4_k"};
    for (int k = 0; k < 2; k++) {
        char ename[32];
        snprintf(ename, sizeof ename, "%s.expected", quant[k]);
        assert_int_equal(gguf_find_tensor(g, quant[k], &v), DERAS_OK);
        assert_int_equal(gguf_find_tensor(g, ename, &e), DERAS_OK);
        check_f32(&v, e.data, tensor_view_numel(&e));
    }

    assert_int_equal(gguf_find_tensor(g, "t.missing", &v), DERAS_ENOTFOUND);
    assert_non_null(strstr(deras_errmsg(), "t.missing"));
    assert_int_equal(gguf_tensor_at(g, nt, &v), DERAS_ERANGE);
    assert_int_equal(gguf_tensor_at(g, -1, &v), DERAS_ERANGE);
    gguf_destroy(&g);
    free(buf);
}

static void v2_file_with_custom_alignment_opens(void **state)
{
    (void)state;
    size_t n;
    uint8_t *buf = load_fixture("gguf/fixture_v2.gguf", &n);
    gguf_t *g = open_ok(buf, n);
    assert_int_equal(gguf_version(g), 2);
    int64_t a;
    assert_int_equal(gguf_get_int(g, "general.alignment", &a), DERAS_OK);
    assert_int_equal(a, 64);
    const char *s;
    assert_int_equal(gguf_get_str(g, "general.name", &s, NULL), DERAS_OK);
    assert_string_equal(s, "v2 fixture");
    tensor_view v;
    const float a_want[3] = {0, 1, 2}, b_want[5] = {100, 101, 102, 103, 104};
    assert_int_equal(gguf_find_tensor(g, "a", &v), DERAS_OK);
    assert_int_equal(((const uint8_t *)v.data - buf) % 64, 0);
    check_f32(&v, a_want, 3);
    assert_int_equal(gguf_find_tensor(g, "b", &v), DERAS_OK);
    assert_int_equal(((const uint8_t *)v.data - buf) % 64, 0);
    check_f32(&v, b_want, 5);
    gguf_destroy(&g);
    free(buf);
}

static void open_maps_files_and_reports_io_errors_with_the_path(void **state)
{
    (void)state;
    char *path = test_data_path("gguf/fixture_v3.gguf");
    gguf_t *g = NULL;
    assert_int_equal(gguf_open(path, &g), DERAS_OK);
    assert_string_equal(gguf_name(g), path);
    assert_int_equal(gguf_n_tensors(g), 11);
    gguf_destroy(&g);
    assert_null(g);
    gguf_destroy(&g); /* NULL-safe */
    gguf_destroy(NULL);
    free(path);

    g = (gguf_t *)0x1;
    assert_int_equal(gguf_open("/nonexistent/dir/model.gguf", &g), DERAS_EIO);
    assert_null(g);
    assert_non_null(strstr(deras_errmsg(), "/nonexistent/dir/model.gguf"));
    char *dir = test_data_path("gguf");
    assert_int_equal(gguf_open(dir, &g), DERAS_EIO);
    free(dir);

    char tmpl[] = "/tmp/deras-test-gguf-XXXXXX";
    int fd = mkstemp(tmpl);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(gguf_open(tmpl, &g), DERAS_EFORMAT);
    assert_non_null(strstr(deras_errmsg(), tmpl));
    unlink(tmpl);
    assert_int_equal(gguf_open(NULL, &g), DERAS_EINVAL);
    assert_int_equal(gguf_open_memory(NULL, 10, "x", &g), DERAS_EINVAL);
}

/* ---- the bad-file corpus ---- */

static void every_truncation_is_refused_with_the_file_name(void **state)
{
    (void)state;
    size_t n;
    uint8_t *buf = load_fixture("gguf/fixture_v3.gguf", &n);
    /* the file may end after the last tensor's data; the padding behind it is optional */
    gguf_t *g = open_ok(buf, n);
    size_t need = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        tensor_view v;
        gguf_tensor_at(g, i, &v);
        size_t end = (size_t)((const uint8_t *)v.data - buf) + v.n_bytes;
        if (end > need)
            need = end;
    }
    gguf_destroy(&g);
    assert_true(need > 1000 && need <= n);

    for (size_t len = 0; len < n; len++) {
        uint8_t *copy = malloc(len ? len : 1); /* exact size: ASan sees any overread */
        memcpy(copy, buf, len);
        g = NULL;
        int rc = gguf_open_memory(copy, len, BAD_NAME, &g);
        if (len < need) {
            if (rc != DERAS_EFORMAT)
                fail_msg("prefix of %zu bytes: expected format_error, got %s (%s)", len,
                         deras_status_name(rc), deras_errmsg());
            if (!strstr(deras_errmsg(), BAD_NAME))
                fail_msg("prefix of %zu bytes: message '%s' lacks the file name", len,
                         deras_errmsg());
            assert_null(g);
        } else {
            if (rc != DERAS_OK)
                fail_msg("prefix of %zu bytes (>= %zu): expected ok, got %s", len, need,
                         deras_errmsg());
            gguf_destroy(&g);
        }
        free(copy);
    }
    free(buf);
}

struct corpus {
    uint8_t *buf;
    size_t n;
    uint8_t *orig;
};

static struct corpus corpus_new(const char *rel)
{
    struct corpus c;
    c.orig = load_fixture(rel, &c.n);
    c.buf = malloc(c.n);
    memcpy(c.buf, c.orig, c.n);
    return c;
}

static void corpus_reset(struct corpus *c)
{
    memcpy(c->buf, c->orig, c->n);
}

static void corpus_free(struct corpus *c)
{
    free(c->buf);
    free(c->orig);
}

static void header_corruptions_are_refused(void **state)
{
    (void)state;
    struct corpus c = corpus_new("gguf/fixture_v3.gguf");

    c.buf[0] = 'X';
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "magic", NULL, "bad magic");
    corpus_reset(&c);
    put32(c.buf + 4, 1);
    expect_fail(c.buf, c.n, DERAS_EUNSUPPORTED, "version 1", NULL, "version 1");
    put32(c.buf + 4, 4);
    expect_fail(c.buf, c.n, DERAS_EUNSUPPORTED, "version 4", NULL, "version 4");
    put32(c.buf + 4, 0x03000000u);
    expect_fail(c.buf, c.n, DERAS_EUNSUPPORTED, "big-endian", NULL, "big-endian");
    corpus_reset(&c);
    put64(c.buf + 8, 1ull << 60);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "tensor count", "1152921504606846976",
                "huge tensor count");
    corpus_reset(&c);
    put64(c.buf + 16, UINT64_MAX);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "metadata count", NULL, "huge kv count");
    corpus_reset(&c);
    put64(c.buf + 16, get64(c.orig + 16) + 1); /* one entry more than there is */
    expect_fail(c.buf, c.n, DERAS_EFORMAT, NULL, NULL, "kv count off by one");
    corpus_free(&c);
}

static void metadata_corruptions_are_refused(void **state)
{
    (void)state;
    struct corpus c = corpus_new("gguf/fixture_v3.gguf");
    size_t t;

    /* the key string of t.u8 claims 2^62 bytes */
    put64(c.buf + find_gguf_str(c.buf, c.n, "t.u8", 24, c.n, false), 1ull << 62);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "metadata entry", "key length", "huge key length");
    corpus_reset(&c);
    t = kv_type_off(c.buf, c.n, "t.str");
    put64(c.buf + t + 4, 1ull << 62);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.str'", "string value length", "huge string length");
    corpus_reset(&c);
    t = kv_type_off(c.buf, c.n, "t.u8");
    put32(c.buf + t, 13);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.u8'", "invalid value type 13", "bad value type");
    corpus_reset(&c);
    t = kv_type_off(c.buf, c.n, "t.bool");
    c.buf[t + 4] = 2;
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.bool'", "not 0 or 1", "bool value 2");
    corpus_reset(&c);
    t = kv_type_off(c.buf, c.n, "arr.u8");
    put32(c.buf + t + 4, GGUF_TYPE_ARRAY);
    expect_fail(c.buf, c.n, DERAS_EUNSUPPORTED, "'arr.u8'", "nested arrays", "nested array");
    put32(c.buf + t + 4, 99);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'arr.u8'", "invalid array element type 99",
                "bad element type");
    corpus_reset(&c);
    t = kv_type_off(c.buf, c.n, "arr.u32");
    put64(c.buf + t + 8, 1ull << 61);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'arr.u32'", "array of 2305843009213693952 uint32",
                "huge numeric array");
    corpus_reset(&c);
    t = kv_type_off(c.buf, c.n, "arr.str");
    put64(c.buf + t + 8, UINT64_MAX);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'arr.str'", "strings", "huge string array");
    corpus_reset(&c);
    t = kv_type_off(c.buf, c.n, "arr.str"); /* element 1 ("") claims 2^40 bytes */
    put64(c.buf + t + 16 + 9, 1ull << 40);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'arr.str'", "string element 1", "huge element");
    corpus_reset(&c);
    t = find_gguf_str(c.buf, c.n, "t.i8", 24, c.n, false);
    c.buf[t + 8 + 2] = 'u'; /* "t.i8" becomes a second "t.u8" */
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.u8'", "more than once", "duplicate key");
    corpus_reset(&c);
    c.buf[t + 9] = '\0';
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "NUL", NULL, "NUL in key");
    corpus_free(&c);
}

static void alignment_corruptions_are_refused(void **state)
{
    (void)state;
    struct corpus c = corpus_new("gguf/fixture_v2.gguf");
    size_t t = kv_type_off(c.buf, c.n, "general.alignment");
    put32(c.buf + t + 4, 48);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'general.alignment'", "power of two",
                "alignment 48");
    put32(c.buf + t + 4, 0);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'general.alignment'", "power of two",
                "alignment 0");
    corpus_reset(&c);
    put32(c.buf + t, GGUF_TYPE_INT32);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'general.alignment'", "expected uint32",
                "alignment of type int32");
    corpus_reset(&c);
    put32(c.buf + t + 4, 32); /* valid, but the 64-aligned file now has a different layout */
    gguf_t *g = NULL;
    int rc = gguf_open_memory(c.buf, c.n, BAD_NAME, &g);
    if (rc == DERAS_OK) { /* still inside and aligned: views must then be within the file */
        tensor_view v;
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            gguf_tensor_at(g, i, &v);
            assert_true((const uint8_t *)v.data + v.n_bytes <= c.buf + c.n);
        }
        gguf_destroy(&g);
    }
    corpus_free(&c);
}

static void tensor_info_corruptions_are_refused(void **state)
{
    (void)state;
    struct corpus c = corpus_new("gguf/fixture_v3.gguf");
    size_t t = ti_off(c.buf, c.n, "t.f32"); /* n_dims=2, ne[2], type, offset */
    assert_int_equal(c.buf[t], 2);

    put32(c.buf + t, 0);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.f32'", "0 dimensions", "n_dims 0");
    put32(c.buf + t, 5);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.f32'", "5 dimensions", "n_dims 5");
    corpus_reset(&c);
    put64(c.buf + t + 4, 0);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.f32'", "dimension 0 is 0", "zero dim");
    corpus_reset(&c);
    put64(c.buf + t + 4, 1ull << 32);
    put64(c.buf + t + 12, 1ull << 32);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.f32'", "overflows", "dim product overflow");
    corpus_reset(&c);
    put64(c.buf + t + 12, 1ull << 63);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.f32'", "dimension 1", "dim above int64");
    corpus_reset(&c);
    put64(c.buf + t + 4, 1ull << 40);
    put64(c.buf + t + 12, 1ull << 21); /* 2^61 f32 elements: the byte size overflows */
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.f32'", NULL, "byte size overflow");
    corpus_reset(&c);
    put32(c.buf + t + 20, 200);
    expect_fail(c.buf, c.n, DERAS_EUNSUPPORTED, "'t.f32'", "type id 200", "unknown type");
    put32(c.buf + t + 20, 4); /* a removed ggml type (Q4_2) */
    expect_fail(c.buf, c.n, DERAS_EUNSUPPORTED, "'t.f32'", "type id 4", "removed type");
    corpus_reset(&c);
    put64(c.buf + t + 24, get64(c.orig + t + 24) + 4);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.f32'", "not a multiple of the alignment 32",
                "misaligned offset");
    corpus_reset(&c);
    put64(c.buf + t + 24, 1ull << 40);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.f32'", "past the end", "offset past end");
    corpus_reset(&c);
    size_t t4 = ti_off(c.buf, c.n, "t.4d"); /* last tensor: move it one alignment unit on */
    put64(c.buf + t4 + 4 + 4 * 8 + 4, get64(c.orig + t4 + 4 + 4 * 8 + 4) + 64);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.4d'", "past the end", "data past end");
    corpus_reset(&c);
    size_t tq = ti_off(c.buf, c.n, "t.q8_0");
    put64(c.buf + tq + 4, 33);
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.q8_0'", "not a multiple of the Q8_0 block",
                "partial block row");
    corpus_reset(&c);
    size_t tn = find_gguf_str(c.buf, c.n, "t.f16", 24, data_start(c.orig, c.n), true);
    memcpy(c.buf + tn + 8, "t.f32", 5); /* same length, so the layout is unchanged */
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t.f32'", "more than once", "duplicate tensor");
    corpus_reset(&c);
    c.buf[tn + 8 + 2] = '\x01'; /* control characters are escaped in the message */
    c.buf[tn + 8 + 1] = '\0';
    expect_fail(c.buf, c.n, DERAS_EFORMAT, "'t\\x00\\x01", "NUL", "NUL in tensor name");
    corpus_free(&c);
}

/* Random single-byte and multi-byte damage: whatever happens, no crash, a status from the
 * enum, a message on failure, and on success every view inside the buffer. */
static void random_damage_never_escapes_the_buffer(void **state)
{
    (void)state;
    struct corpus c = corpus_new("gguf/fixture_v3.gguf");
    uint64_t rng = 12345;
    size_t header = data_start(c.orig, c.n);
    int n_ok = 0, n_fail = 0;
    for (int iter = 0; iter < 3000; iter++) {
        corpus_reset(&c);
        int n_flips = 1 + (int)(test_rng_next(&rng) % 4);
        for (int k = 0; k < n_flips; k++)
            c.buf[test_rng_next(&rng) % header] = (uint8_t)test_rng_next(&rng);
        gguf_t *g = NULL;
        deras_errclear();
        int rc = gguf_open_memory(c.buf, c.n, BAD_NAME, &g);
        if (rc != DERAS_OK) {
            n_fail++;
            assert_true(rc == DERAS_EFORMAT || rc == DERAS_EUNSUPPORTED || rc == DERAS_ENOMEM);
            if (!strstr(deras_errmsg(), BAD_NAME))
                fail_msg("iteration %d: message '%s' lacks the file name", iter, deras_errmsg());
            continue;
        }
        n_ok++;
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            tensor_view v;
            assert_int_equal(gguf_tensor_at(g, i, &v), DERAS_OK);
            assert_true((const uint8_t *)v.data >= c.buf &&
                        (const uint8_t *)v.data + v.n_bytes <= c.buf + c.n);
        }
        gguf_destroy(&g);
    }
    assert_true(n_ok > 0 && n_fail > 0);
    corpus_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(scalars_of_every_type_read_back),
        cmocka_unit_test(type_mismatch_and_missing_key_name_the_key_and_types),
        cmocka_unit_test(arrays_of_every_element_type_read_back),
        cmocka_unit_test(tensors_have_reversed_shapes_types_and_data),
        cmocka_unit_test(v2_file_with_custom_alignment_opens),
        cmocka_unit_test(open_maps_files_and_reports_io_errors_with_the_path),
        cmocka_unit_test(every_truncation_is_refused_with_the_file_name),
        cmocka_unit_test(header_corruptions_are_refused),
        cmocka_unit_test(metadata_corruptions_are_refused),
        cmocka_unit_test(alignment_corruptions_are_refused),
        cmocka_unit_test(tensor_info_corruptions_are_refused),
        cmocka_unit_test(random_damage_never_escapes_the_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
