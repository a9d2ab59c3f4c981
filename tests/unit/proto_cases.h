/* SPDX-License-Identifier: Apache-2.0 */
/* proto_cases.h - helpers the client protocol's tests share (test_protocol.c and
 * test_protocol_hostile.c): frames written as text (mp_text.h), a default decoder, and the
 * check that a frame fails with a given code and a message containing a given text. */
#ifndef DERAS_PROTO_CASES_H
#define DERAS_PROTO_CASES_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <string.h>

#include "common/base/status.h"
#include "common/wire/protocol.h"
#include "mp_text.h"

static msgpack_sbuffer sb; /* main() inits and destroys it */

/* Decode `text` as a client frame with decoder d. */
static inline int decode_text(proto_decoder_t *d, const char *text, proto_client_msg *m,
                              proto_error *err)
{
    mpt_pack(&sb, text);
    return proto_decode_client(d, sb.data, sb.size, m, err);
}

static inline proto_decoder_t *default_decoder(void)
{
    proto_decoder_t *d = NULL;
    assert_int_equal(proto_decoder_new(NULL, &d), DERAS_OK);
    assert_non_null(d);
    return d;
}

/* A frame expected to fail: its code and a substring of its message. */
typedef struct vcase {
    const char *frame;
    enum proto_error_code code;
    const char *msg; /* a substring the message must contain */
} vcase;

#define REQ "type: \"request\", id: \"r1\", "

static inline void check_case(proto_decoder_t *d, const char *frame,
                              enum proto_error_code code, const char *msg)
{
    proto_client_msg m;
    proto_error err;
    mpt_pack(&sb, frame);
    int rc = proto_decode_client(d, sb.data, sb.size, &m, &err);
    if (rc != DERAS_EFORMAT || err.code != code || !strstr(err.message, msg))
        fail_msg("%s\n  expected %s \"...%s...\"\n  got rc %d, %s \"%s\"", frame,
                 proto_error_name(code), msg, rc, proto_error_name(err.code), err.message);
    if (strcmp(deras_errmsg() + strlen(proto_error_name(code)) + 2, err.message))
        fail_msg("%s: deras_errmsg() '%s' does not carry the message", frame, deras_errmsg());
}

#endif
