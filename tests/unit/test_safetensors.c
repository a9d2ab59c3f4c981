/* SPDX-License-Identifier: Apache-2.0 */
/* test_safetensors.c - the safetensors reader: the valid fixture, and the bad-file corpus.
 *
 * The fixture comes from tests/ref/make_st_fixtures.py (the safetensors library itself).
 * Bad files are made here from it: every proper prefix, and targeted corruptions made by
 * editing the fixture's JSON header text and re-prefixing its length. Each must fail with
 * the expected status and a message naming the file, the tensor and the reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <string.h>

#include "common/base/dtype.h"
#include "common/checkpoint/safetensors.h"
#include "common/base/status.h"
#include "test_util.h"

#define BAD_NAME "corrupt.safetensors"

struct fixture {
    uint8_t *buf;
    size_t n;
    char *header; /* NUL-terminated copy of the JSON header */
    size_t hlen;
    const uint8_t *data;
    size_t data_len;
};

static struct fixture fixture_load(void)
{
    struct fixture f;
    char *path = test_data_path("st/fixture.safetensors");
    f.buf = (uint8_t *)test_read_file(path, &f.n);
    if (!f.buf)
        test_skip("fixture %s missing (run tests/ref/make_st_fixtures.py)", path);
    free(path);
    uint64_t h;
    memcpy(&h, f.buf, 8);
    assert_true(h + 8 <= f.n);
    f.hlen = (size_t)h;
    f.header = malloc(f.hlen + 1);
    memcpy(f.header, f.buf + 8, f.hlen);
    f.header[f.hlen] = '\0';
    f.data = f.buf + 8 + f.hlen;
    f.data_len = f.n - 8 - f.hlen;
    return f;
}

static void fixture_free(struct fixture *f)
{
    free(f->buf);
    free(f->header);
}

/* A file with this header text and the fixture's data. */
static uint8_t *rebuild(const struct fixture *f, const char *header, size_t *n)
{
    size_t hl = strlen(header);
    *n = 8 + hl + f->data_len;
    uint8_t *b = malloc(*n);
    uint64_t h = hl;
    memcpy(b, &h, 8);
    memcpy(b + 8, header, hl);
    memcpy(b + 8 + hl, f->data, f->data_len);
    return b;
}

/* The fixture header with the first `from` replaced by `to`. */
static char *edit(const struct fixture *f, const char *from, const char *to)
{
    const char *at = strstr(f->header, from);
    if (!at)
        fail_msg("fixture header lacks '%s'", from);
    size_t pre = (size_t)(at - f->header), fl = strlen(from), tl = strlen(to);
    char *h = malloc(f->hlen - fl + tl + 1);
    memcpy(h, f->header, pre);
    memcpy(h + pre, to, tl);
    strcpy(h + pre + tl, at + fl);
    return h;
}

static void expect_fail_buf(const uint8_t *b, size_t n, int status, const char *what1,
                            const char *what2, const char *case_name)
{
    st_file_t *s = (st_file_t *)0x1;
    deras_errclear();
    int rc = st_open_memory(b, n, BAD_NAME, &s);
    if (rc != status)
        fail_msg("%s: expected %s, got %s (%s)", case_name, deras_status_name(status),
                 deras_status_name(rc), deras_errmsg());
    if (s)
        fail_msg("%s: *out must be NULL on failure", case_name);
    const char *want[] = {BAD_NAME, what1, what2};
    for (int i = 0; i < 3; i++)
        if (want[i] && !strstr(deras_errmsg(), want[i]))
            fail_msg("%s: expected the message to contain '%s', got '%s'", case_name, want[i],
                     deras_errmsg());
}

/* Replace `from` by `to` in the fixture header and expect the given failure. */
static void expect_edit_fails(const struct fixture *f, const char *from, const char *to,
                              int status, const char *what1, const char *what2)
{
    char *h = edit(f, from, to);
    size_t n;
    uint8_t *b = rebuild(f, h, &n);
    char case_name[256];
    snprintf(case_name, sizeof case_name, "'%s' -> '%s'", from, to);
    expect_fail_buf(b, n, status, what1, what2, case_name);
    free(b);
    free(h);
}

static void check_values(const tensor_view *v, const float *want, int64_t n)
{
    float got[32];
    assert_true(n <= 32);
    assert_int_equal(tensor_view_numel(v), n);
    assert_int_equal(dtype_to_f32(v->dtype, v->data, got, n), DERAS_OK);
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s[%lld]: expected %g, got %g", v->name, (long long)i, want[i], got[i]);
}

static void fixture_tensors_read_back_in_data_order(void **state)
{
    (void)state;
    struct fixture f = fixture_load();
    st_file_t *s = NULL;
    int rc = st_open_memory(f.buf, f.n, "fixture", &s);
    if (rc)
        fail_msg("expected the fixture to open, got %s", deras_errmsg());
    assert_string_equal(st_name(s), "fixture");
    const struct {
        const char *name; int dtype; const char *type_name; int n_dims; int64_t shape[4];
        size_t n_bytes;
    } want[] = {
        {"ids", DT_UNSUPPORTED, "I64", 1, {3}, 24},   {"f64", DT_UNSUPPORTED, "F64", 1, {2}, 16},
        {"a", DT_F32, "F32", 2, {2, 3}, 24},      {"d4", DT_F32, "F32", 4, {1, 2, 3, 4}, 96},
        {"empty", DT_F32, "F32", 2, {0, 3}, 0},   {"scalar", DT_F32, "F32", 0, {0}, 4},
        {"i32", DT_UNSUPPORTED, "I32", 1, {1}, 4},    {"c", DT_BF16, "BF16", 2, {2, 2}, 8},
        {"b", DT_F16, "F16", 1, {4}, 8},          {"u16", DT_UNSUPPORTED, "U16", 1, {2}, 4},
        {"f8", DT_UNSUPPORTED, "F8_E4M3", 1, {4}, 4}, {"i8", DT_UNSUPPORTED, "I8", 1, {2}, 2},
        {"mask", DT_UNSUPPORTED, "U8", 1, {5}, 5},    {"flag", DT_UNSUPPORTED, "BOOL", 1, {2}, 2},
    };
    const int64_t nt = (int64_t)(sizeof want / sizeof want[0]);
    assert_int_equal(st_n_tensors(s), nt);
    for (int64_t i = 0; i < nt; i++) {
        tensor_view a, b;
        assert_int_equal(st_tensor_at(s, i, &a), DERAS_OK);
        assert_string_equal(a.name, want[i].name);
        assert_int_equal(st_find_tensor(s, want[i].name, &b), DERAS_OK);
        assert_memory_equal(&a, &b, sizeof a);
        assert_int_equal(a.dtype, want[i].dtype);
        assert_string_equal(a.type_name, want[i].type_name);
        assert_int_equal(a.n_dims, want[i].n_dims);
        for (int d = 0; d < a.n_dims; d++)
            assert_int_equal(a.shape[d], want[i].shape[d]);
        assert_int_equal(a.n_bytes, want[i].n_bytes);
        assert_true((const uint8_t *)a.data >= f.data &&
                    (const uint8_t *)a.data + a.n_bytes <= f.buf + f.n);
    }
    tensor_view v;
    const float a_want[6] = {0, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f};
    assert_int_equal(st_find_tensor(s, "a", &v), DERAS_OK);
    check_values(&v, a_want, 6);
    const float b_want[4] = {1, -2, 0.5f, 65504};
    assert_int_equal(st_find_tensor(s, "b", &v), DERAS_OK);
    check_values(&v, b_want, 4);
    const float c_want[4] = {1, -3.5f, 256, 0.0078125f};
    assert_int_equal(st_find_tensor(s, "c", &v), DERAS_OK);
    check_values(&v, c_want, 4);
    const float s_want[1] = {3};
    assert_int_equal(st_find_tensor(s, "scalar", &v), DERAS_OK);
    check_values(&v, s_want, 1);
    float d4_want[24];
    for (int i = 0; i < 24; i++)
        d4_want[i] = (float)i;
    assert_int_equal(st_find_tensor(s, "d4", &v), DERAS_OK);
    check_values(&v, d4_want, 24);

    assert_int_equal(st_find_tensor(s, "__metadata__", &v), DERAS_ENOTFOUND);
    assert_int_equal(st_find_tensor(s, "nope", &v), DERAS_ENOTFOUND);
    assert_non_null(strstr(deras_errmsg(), "'nope'"));
    assert_int_equal(st_tensor_at(s, nt, &v), DERAS_ERANGE);
    st_destroy(&s);
    assert_null(s);
    st_destroy(&s);
    fixture_free(&f);
}

static void open_maps_files_and_reports_io_errors(void **state)
{
    (void)state;
    char *path = test_data_path("st/fixture.safetensors");
    st_file_t *s = NULL;
    assert_int_equal(st_open(path, &s), DERAS_OK);
    assert_string_equal(st_name(s), path);
    assert_int_equal(st_n_tensors(s), 14);
    st_destroy(&s);
    free(path);
    assert_int_equal(st_open("/nonexistent/model.safetensors", &s), DERAS_EIO);
    assert_non_null(strstr(deras_errmsg(), "/nonexistent/model.safetensors"));
    assert_null(s);
    assert_int_equal(st_open_memory(NULL, 3, "x", &s), DERAS_EINVAL);
}

static void minimal_headers_are_accepted(void **state)
{
    (void)state;
    const char *headers[] = {"{}", "{}      ", " {\"__metadata__\":{}} ",
                             "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
                             "\"extra\":1}}"};
    uint8_t buf[128];
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        uint64_t hl = strlen(headers[i]);
        memcpy(buf, &hl, 8);
        memcpy(buf + 8, headers[i], hl);
        memset(buf + 8 + hl, 0, 4);
        st_file_t *s = NULL;
        int rc = st_open_memory(buf, 8 + hl + 4, "mini", &s);
        if (rc)
            fail_msg("header '%s': expected ok, got %s", headers[i], deras_errmsg());
        assert_int_equal(st_n_tensors(s), i == 3 ? 1 : 0);
        st_destroy(&s);
    }
}

static void every_truncation_is_refused(void **state)
{
    (void)state;
    struct fixture f = fixture_load();
    for (size_t len = 0; len < f.n; len++) {
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, f.buf, len);
        st_file_t *s = NULL;
        int rc = st_open_memory(copy, len, BAD_NAME, &s);
        if (rc != DERAS_EFORMAT || s)
            fail_msg("prefix of %zu bytes: expected format_error, got %s (%s)", len,
                     deras_status_name(rc), deras_errmsg());
        if (!strstr(deras_errmsg(), BAD_NAME))
            fail_msg("prefix of %zu bytes: message '%s' lacks the file name", len, deras_errmsg());
        free(copy);
    }
    fixture_free(&f);
}

static void header_length_corruptions_are_refused(void **state)
{
    (void)state;
    struct fixture f = fixture_load();
    uint8_t *b = malloc(f.n);
    memcpy(b, f.buf, f.n);
    uint64_t h = f.n - 7; /* one byte more than the file holds after the length */
    memcpy(b, &h, 8);
    expect_fail_buf(b, f.n, DERAS_EFORMAT, "beyond the end", NULL, "header past the end");
    h = 200u * 1000 * 1000;
    memcpy(b, &h, 8);
    expect_fail_buf(b, f.n, DERAS_EFORMAT, "cap", NULL, "huge header");
    h = UINT64_MAX;
    memcpy(b, &h, 8);
    expect_fail_buf(b, f.n, DERAS_EFORMAT, "cap", NULL, "header length 2^64-1");
    free(b);

    const char *not_json[] = {"{not json", "[]", "\"x\"", "{\"a\":1,}", ""};
    for (size_t i = 0; i < sizeof not_json / sizeof not_json[0]; i++) {
        size_t n;
        uint8_t *nb = rebuild(&f, not_json[i], &n);
        expect_fail_buf(nb, n, DERAS_EFORMAT, "header", NULL, not_json[i]);
        free(nb);
    }
    fixture_free(&f);
}

static void entry_corruptions_are_refused(void **state)
{
    (void)state;
    struct fixture f = fixture_load();
    const char *a = "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[40,64]}";
    /* wrong field types */
    expect_edit_fails(&f, a, "\"a\":[1,2]", DERAS_EFORMAT, "'a'", "expected an object");
    expect_edit_fails(&f, "\"dtype\":\"F32\",\"shape\":[2,3]", "\"dtype\":5,\"shape\":[2,3]",
                      DERAS_EFORMAT, "'a'", "dtype is an integer");
    expect_edit_fails(&f, "\"shape\":[2,3]", "\"shape\":\"2x3\"", DERAS_EFORMAT, "'a'",
                      "shape is a string");
    expect_edit_fails(&f, "\"shape\":[2,3]", "\"shape\":[2.0,3]", DERAS_EFORMAT, "'a'",
                      "shape[0] is a real number");
    expect_edit_fails(&f, "\"shape\":[2,3]", "\"shape\":[2,null]", DERAS_EFORMAT, "'a'",
                      "shape[1] is null");
    expect_edit_fails(&f, "[40,64]", "[40]", DERAS_EFORMAT, "'a'", "two integers");
    expect_edit_fails(&f, "[40,64]", "[\"40\",64]", DERAS_EFORMAT, "'a'", "data_offsets[0]");
    expect_edit_fails(&f, "[40,64]", "[40,64,88]", DERAS_EFORMAT, "'a'", "two integers");
    expect_edit_fails(&f, "\"dtype\":\"F32\",\"shape\":[2,3],", "\"shape\":[2,3],",
                      DERAS_EFORMAT, "'a'", "missing field 'dtype'");
    expect_edit_fails(&f, ",\"data_offsets\":[40,64]", "", DERAS_EFORMAT, "'a'",
                      "missing field 'data_offsets'");
    /* sizes and bounds */
    expect_edit_fails(&f, "\"shape\":[2,3]", "\"shape\":[2,4]", DERAS_EFORMAT, "'a'",
                      "span 24 bytes, but F32 x 8 elements need 32");
    expect_edit_fails(&f, "\"shape\":[2,3]", "\"shape\":[-2,3]", DERAS_EFORMAT, "'a'",
                      "negative");
    expect_edit_fails(&f, "\"shape\":[2,3]", "\"shape\":[4611686018427387904,4]",
                      DERAS_EFORMAT, "'a'", "overflows");
    expect_edit_fails(&f, "\"shape\":[2,3]", "\"shape\":[1,1,1,2,3]", DERAS_EUNSUPPORTED, "'a'",
                      "5 dimensions");
    expect_edit_fails(&f, "[40,64]", "[64,40]", DERAS_EFORMAT, "'a'", "end before they begin");
    expect_edit_fails(&f, "[40,64]", "[-40,64]", DERAS_EFORMAT, "'a'", "non-negative");
    expect_edit_fails(&f, "\"flag\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[199,201]}",
                      "\"flag\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[200,202]}",
                      DERAS_EFORMAT, "'flag'", "past the 201 bytes of data");
    expect_edit_fails(&f, "[40,64]", "[1000000000000,1000000000024]", DERAS_EFORMAT, "'a'",
                      "past the");
    expect_edit_fails(&f, "[40,64]", "[24,48]", DERAS_EFORMAT, "overlap", NULL);
    expect_edit_fails(&f, "[40,64]", "[20,44]", DERAS_EFORMAT, "'ids'", "overlap");
    /* dtypes */
    expect_edit_fails(&f, "\"dtype\":\"F32\",\"shape\":[2,3]", "\"dtype\":\"Q9\",\"shape\":[2,3]",
                      DERAS_EUNSUPPORTED, "'a'", "unknown dtype 'Q9'");
    expect_edit_fails(&f, "\"dtype\":\"U8\",\"shape\":[5]", "\"dtype\":\"F4\",\"shape\":[5]",
                      DERAS_EFORMAT, "'mask'", "whole number of bytes");
    /* metadata and duplicates */
    expect_edit_fails(&f, "{\"format\":\"pt\"}", "{\"format\":1}", DERAS_EFORMAT, "__metadata__",
                      "'format'");
    expect_edit_fails(&f, "{\"format\":\"pt\"}", "[\"pt\"]", DERAS_EFORMAT, "__metadata__", NULL);
    expect_edit_fails(&f, "\"ids\":", "\"a\":", DERAS_EFORMAT, "duplicate", NULL);
    expect_edit_fails(&f, "\"ids\":", "\"i\\u0000d\":", DERAS_EFORMAT, "header", NULL);
    fixture_free(&f);
}

/* Random damage anywhere in the header: no crash, a message on failure, views inside. */
static void random_damage_never_escapes_the_buffer(void **state)
{
    (void)state;
    struct fixture f = fixture_load();
    uint8_t *b = malloc(f.n);
    uint64_t rng = 99;
    int n_ok = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(b, f.buf, f.n);
        int flips = 1 + (int)(test_rng_next(&rng) % 3);
        for (int k = 0; k < flips; k++) {
            size_t at = 8 + test_rng_next(&rng) % f.hlen;
            /* digits and structure characters are more interesting than noise */
            const char pool[] = "0123456789,:[]{}\"-e. ";
            uint64_t r = test_rng_next(&rng);
            b[at] = (r & 1) ? (uint8_t)pool[(r >> 1) % (sizeof pool - 1)] : (uint8_t)(r >> 8);
        }
        st_file_t *s = NULL;
        int rc = st_open_memory(b, f.n, BAD_NAME, &s);
        if (rc) {
            if (!strstr(deras_errmsg(), BAD_NAME))
                fail_msg("iteration %d: message '%s' lacks the file name", iter, deras_errmsg());
            continue;
        }
        n_ok++;
        for (int64_t i = 0; i < st_n_tensors(s); i++) {
            tensor_view v;
            st_tensor_at(s, i, &v);
            assert_true((const uint8_t *)v.data >= b + 8 + f.hlen &&
                        (const uint8_t *)v.data + v.n_bytes <= b + f.n);
        }
        st_destroy(&s);
    }
    assert_true(n_ok > 0);
    free(b);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixture_tensors_read_back_in_data_order),
        cmocka_unit_test(open_maps_files_and_reports_io_errors),
        cmocka_unit_test(minimal_headers_are_accepted),
        cmocka_unit_test(every_truncation_is_refused),
        cmocka_unit_test(header_length_corruptions_are_refused),
        cmocka_unit_test(entry_corruptions_are_refused),
        cmocka_unit_test(random_damage_never_escapes_the_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
