/* SPDX-License-Identifier: Apache-2.0 */
/* test_admin_proto.c - the admin protocol's requests (common/wire/admin_proto.h): what
 * derasctl encodes decodes to the same request, every hostile frame gets its stable code
 * and a message naming the problem, and the encoder refuses what the decoder would.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/admin_proto.h"
#include "common/base/status.h"
#include "mp_text.h"

static msgpack_sbuffer sb;

static void encoded_requests_decode_to_the_same_request(void **state)
{
    (void)state;
    admin_codec_t *c = NULL;
    assert_int_equal(admin_codec_new(&c), DERAS_OK);
    assert_non_null(c);
    admin_request in[] = {
        {.type = ADMIN_STATUS, .timeout_ms = -1, .wait = true},
        {.type = ADMIN_HEALTH, .timeout_ms = -1, .wait = true},
        {.type = ADMIN_METRICS, .timeout_ms = -1, .wait = true},
        {.type = ADMIN_DRAIN, .worker = "w0", .timeout_ms = -1, .wait = true},
        {.type = ADMIN_DRAIN, .all = true, .timeout_ms = 2500, .wait = false},
        {.type = ADMIN_DRAIN, .worker = "gpu-7", .timeout_ms = 0, .wait = true},
        {.type = ADMIN_UNDRAIN, .worker = "w1", .timeout_ms = -1, .wait = true},
        {.type = ADMIN_UNDRAIN, .all = true, .timeout_ms = -1, .wait = true},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        const void *buf;
        size_t len;
        assert_int_equal(admin_encode_request(c, &in[i], &buf, &len), DERAS_OK);
        void *copy = malloc(len);
        memcpy(copy, buf, len);
        admin_request out;
        proto_error err;
        int rc = admin_decode_request(c, copy, len, &out, &err);
        if (rc)
            fail_msg("request %zu (%s): expected to decode, got %s: %s", i,
                     admin_type_name(in[i].type), proto_error_name(err.code), err.message);
        if (out.type != in[i].type || strcmp(out.worker, in[i].worker) || out.all != in[i].all ||
            out.timeout_ms != in[i].timeout_ms || out.wait != in[i].wait)
            fail_msg("request %zu: expected %s '%s' all %d timeout %lld wait %d, got %s '%s' all "
                     "%d timeout %lld wait %d", i, admin_type_name(in[i].type), in[i].worker,
                     in[i].all, (long long)in[i].timeout_ms, in[i].wait,
                     admin_type_name(out.type), out.worker, out.all, (long long)out.timeout_ms,
                     out.wait);
        free(copy);
    }
    admin_codec_destroy(&c);
    assert_null(c);
}

typedef struct vcase {
    const char *frame;
    enum proto_error_code code;
    const char *msg;
} vcase;

static const vcase cases[] = {
    {"{type: \"status\"}", PE_NONE, ""},
    {"{type: \"status\", v: 1}", PE_NONE, ""},
    {"{type: \"drain\", worker: \"w0\", timeout_ms: 86400000, wait: true}", PE_NONE, ""},
    {"{type: \"status\", v: 2}", PE_UNSUPPORTED_VERSION, "v must be 1"},
    {"{type: \"reboot\"}", PE_UNKNOWN_TYPE, "'reboot'"},
    {"{v: 1}", PE_MISSING_FIELD, "type"},
    {"{type: 7}", PE_INVALID_FIELD, "type"},
    {"[1, 2]", PE_MALFORMED, "map"},
    {"{type: \"status\", worker: \"w0\"}", PE_INVALID_FIELD, "unknown key 'worker' in status"},
    {"{type: \"health\", verbose: true}", PE_INVALID_FIELD, "unknown key 'verbose' in health"},
    {"{type: \"drain\"}", PE_MISSING_FIELD, "drain needs \"worker\": NAME or \"all\": true"},
    {"{type: \"drain\", all: false}", PE_MISSING_FIELD, "drain needs"},
    {"{type: \"drain\", worker: \"w0\", all: true}", PE_INVALID_FIELD, "not both"},
    {"{type: \"drain\", worker: \"\"}", PE_INVALID_FIELD, "worker"},
    {"{type: \"drain\", worker: str(65)}", PE_LIMIT_EXCEEDED, "worker"},
    {"{type: \"drain\", worker: \"w\\x00\"}", PE_INVALID_FIELD, "worker"},
    {"{type: \"drain\", worker: \"\\xff\\xfe\"}", PE_INVALID_UTF8, "worker"},
    {"{type: \"drain\", worker: 3}", PE_INVALID_FIELD, "worker"},
    {"{type: \"drain\", all: \"yes\"}", PE_INVALID_FIELD, "all"},
    {"{type: \"drain\", all: true, timeout_ms: -1}", PE_VALUE_OUT_OF_RANGE, "timeout_ms"},
    {"{type: \"drain\", all: true, timeout_ms: 86400001}", PE_LIMIT_EXCEEDED, "timeout_ms"},
    {"{type: \"drain\", all: true, timeout_ms: 1.5}", PE_INVALID_FIELD, "timeout_ms"},
    {"{type: \"drain\", all: true, wait: 1}", PE_INVALID_FIELD, "wait"},
    {"{type: \"drain\", all: true, all: true}", PE_INVALID_FIELD, "duplicate key 'all'"},
    {"{type: \"undrain\", all: true, timeout_ms: 5}", PE_INVALID_FIELD, "unknown key 'timeout_ms' in undrain"},
    {"{type: \"undrain\"}", PE_MISSING_FIELD, "undrain needs"},
    {"{type: \"status\", pad: str(70000)}", PE_MESSAGE_TOO_LARGE, "65536"},
};

static void hostile_admin_frames_get_their_codes(void **state)
{
    (void)state;
    admin_codec_t *c = NULL;
    assert_int_equal(admin_codec_new(&c), DERAS_OK);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        admin_request q;
        proto_error err;
        mpt_pack(&sb, cases[i].frame);
        int rc = admin_decode_request(c, sb.data, sb.size, &q, &err);
        bool ok = cases[i].code == PE_NONE
                      ? rc == DERAS_OK
                      : rc == DERAS_EFORMAT && err.code == cases[i].code &&
                            strstr(err.message, cases[i].msg);
        if (!ok)
            fail_msg("%.80s\n  expected %s \"...%s...\"\n  got rc %d, %s \"%s\"", cases[i].frame,
                     proto_error_name(cases[i].code), cases[i].msg, rc,
                     proto_error_name(err.code), err.message);
    }
    /* not msgpack at all, and a frame that lies about its length */
    admin_request q;
    proto_error err;
    assert_int_equal(admin_decode_request(c, "\xc1\xc1", 2, &q, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_MALFORMED);
    assert_int_equal(admin_decode_request(c, "\xdd\xff\xff\xff\xff", 5, &q, &err), DERAS_EFORMAT);
    assert_int_equal(err.code, PE_MALFORMED);
    assert_int_equal(admin_decode_request(c, NULL, 0, &q, &err), DERAS_EFORMAT);
    admin_codec_destroy(&c);
}

static void the_encoder_refuses_what_the_decoder_would(void **state)
{
    (void)state;
    admin_codec_t *c = NULL;
    assert_int_equal(admin_codec_new(&c), DERAS_OK);
    const void *buf;
    size_t len;
    admin_request both = {.type = ADMIN_DRAIN, .worker = "w0", .all = true, .timeout_ms = -1};
    admin_request none = {.type = ADMIN_UNDRAIN, .timeout_ms = -1};
    admin_request late = {.type = ADMIN_DRAIN, .all = true, .timeout_ms = ADMIN_MAX_TIMEOUT_MS + 1};
    admin_request bad = {.type = (enum admin_type)99};
    assert_int_equal(admin_encode_request(c, &both, &buf, &len), DERAS_EINVAL);
    assert_int_equal(admin_encode_request(c, &none, &buf, &len), DERAS_EINVAL);
    assert_int_equal(admin_encode_request(c, &late, &buf, &len), DERAS_EINVAL);
    assert_int_equal(admin_encode_request(c, &bad, &buf, &len), DERAS_EINVAL);
    assert_int_equal(admin_encode_request(NULL, &none, &buf, &len), DERAS_EINVAL);
    assert_string_equal(admin_type_name(ADMIN_UNDRAIN), "undrain");
    assert_string_equal(admin_type_name((enum admin_type)0), "?");
    admin_codec_destroy(&c);
}

int main(void)
{
    msgpack_sbuffer_init(&sb);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(encoded_requests_decode_to_the_same_request),
        cmocka_unit_test(hostile_admin_frames_get_their_codes),
        cmocka_unit_test(the_encoder_refuses_what_the_decoder_would),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}
