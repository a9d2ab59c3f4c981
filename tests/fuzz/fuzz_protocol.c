/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_protocol.c - libFuzzer target for the client protocol.
 *
 * Arbitrary bytes go through proto_decode_client and proto_decode_server. Invariants
 * (any violation aborts, so libFuzzer reports it):
 *  - a failure is DERAS_EFORMAT with a code in the enum, a NUL-terminated message that is
 *    valid UTF-8, and an id that is "" or a valid id; and the router's reply to it
 *    (proto_encode_error) decodes back to the same code and message;
 *  - a decoded client message re-encodes (proto_encode_request / _cancel) to a frame that
 *    decodes to the same message, field for field;
 *  - a decoded reply re-encodes (chunk / final / error / pong) to a frame that decodes to
 *    the same reply.
 * Two decoders are used so the first message's pointers stay valid while the second is
 * decoded. The seed corpus (corpus/fuzz_protocol) holds valid frames of every type.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/protocol.h"
#include "common/base/status.h"
#include "common/base/utf8.h"
#include "fuzz_same.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static proto_decoder_t *d1, *d2;
static proto_encoder_t *enc, *err_enc;

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            abort();                                                                         \
    } while (0)

static bool valid_text(const char *s, size_t cap)
{
    const char *nul = memchr(s, '\0', cap);
    return nul && utf8_valid_prefix(s, (size_t)(nul - s)) == (size_t)(nul - s);
}

static void check_failure(int rc, const proto_error *err)
{
    CHECK(rc == DERAS_EFORMAT);
    CHECK(err->code > PE_NONE && err->code < PE_N_CODES);
    CHECK(valid_text(err->message, sizeof err->message) && err->message[0]);
    CHECK(valid_text(err->id, sizeof err->id));
    /* The router answers with an error reply: it must decode to the same thing. */
    const void *buf;
    size_t len;
    CHECK(proto_encode_error(err_enc, err->id, err->code, err->message, &buf, &len) == DERAS_OK);
    proto_server_msg m;
    proto_error e2;
    CHECK(proto_decode_server(d2, buf, len, &m, &e2) == DERAS_OK);
    CHECK(m.type == PROTO_ERROR && m.code == err->code);
    CHECK(!strcmp(m.message, err->message) && !strcmp(m.id, err->id));
}

static bool same_bytes(const void *a, size_t na, const void *b, size_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, na));
}

static void check_same_request(const proto_request *a, const proto_request *b)
{
    CHECK(!strcmp(a->id, b->id));
    CHECK((a->prompt == NULL) == (b->prompt == NULL));
    if (a->prompt)
        CHECK(same_bytes(a->prompt, a->prompt_len, b->prompt, b->prompt_len));
    CHECK((a->prompt_ids == NULL) == (b->prompt_ids == NULL));
    CHECK(a->n_prompt_ids == b->n_prompt_ids);
    if (a->prompt_ids)
        CHECK(!memcmp(a->prompt_ids, b->prompt_ids, (size_t)a->n_prompt_ids * sizeof(int32_t)));
    CHECK(fuzz_same_params(&a->params, &b->params));
    CHECK(a->stream == b->stream && a->add_special_tokens == b->add_special_tokens &&
          a->has_seed == b->has_seed);
    CHECK(!a->has_seed || a->params.seed == b->params.seed);
    CHECK(a->n_stops == b->n_stops);
    for (int i = 0; i < a->n_stops; i++)
        CHECK(same_bytes(a->stops[i], a->stop_lens[i], b->stops[i], b->stop_lens[i]));
    CHECK(a->deadline_ms == b->deadline_ms);
}

static void client_side(const uint8_t *data, size_t size)
{
    proto_client_msg m, m2;
    proto_error err;
    int rc = proto_decode_client(d1, data, size, &m, &err);
    if (rc != DERAS_OK) {
        check_failure(rc, &err);
        return;
    }
    const void *buf;
    size_t len;
    if (m.type == PROTO_REQUEST) {
        CHECK(proto_encode_request(enc, &m.req, &buf, &len) == DERAS_OK);
    } else if (m.type == PROTO_CANCEL) {
        CHECK(proto_encode_cancel(enc, m.cancel_id, &buf, &len) == DERAS_OK);
    } else {
        CHECK(m.type == PROTO_PING);
        return;
    }
    CHECK(proto_decode_client(d2, buf, len, &m2, &err) == DERAS_OK);
    CHECK(m2.type == m.type);
    if (m.type == PROTO_REQUEST)
        check_same_request(&m.req, &m2.req);
    else
        CHECK(!strcmp(m.cancel_id, m2.cancel_id));
}

static void server_side(const uint8_t *data, size_t size)
{
    proto_server_msg m, m2;
    proto_error err;
    int rc = proto_decode_server(d1, data, size, &m, &err);
    if (rc != DERAS_OK) {
        CHECK(rc == DERAS_EFORMAT && err.code > PE_NONE && err.code < PE_N_CODES);
        CHECK(valid_text(err.message, sizeof err.message));
        return;
    }
    const void *buf = NULL;
    size_t len = 0;
    switch (m.type) {
    case PROTO_CHUNK:
        CHECK(proto_encode_chunk(enc, m.id, m.index, m.token_ids, m.n_token_ids, m.text,
                                 m.text_len, NULL, &buf, &len) == DERAS_OK);
        break;
    case PROTO_FINAL:
        CHECK(proto_encode_final(enc, m.id, m.index, m.finish, m.abort_reason, &m.usage,
                                 m.text, m.text_len, m.token_ids, m.n_token_ids, NULL, &buf,
                                 &len) == DERAS_OK);
        break;
    case PROTO_ERROR:
        CHECK(proto_encode_error(enc, m.id, m.code, m.message, &buf, &len) == DERAS_OK);
        break;
    case PROTO_PONG:
        CHECK(proto_encode_pong(enc, m.workers, m.n_workers, &buf, &len) == DERAS_OK);
        break;
    default:
        abort();
    }
    CHECK(proto_decode_server(d2, buf, len, &m2, &err) == DERAS_OK);
    CHECK(m2.type == m.type && !strcmp(m.id, m2.id) && m.index == m2.index);
    CHECK(m.n_token_ids == m2.n_token_ids && (m.token_ids == NULL) == (m2.token_ids == NULL));
    if (m.n_token_ids)
        CHECK(!memcmp(m.token_ids, m2.token_ids, (size_t)m.n_token_ids * sizeof(int32_t)));
    CHECK((m.text == NULL) == (m2.text == NULL));
    if (m.text)
        CHECK(same_bytes(m.text, m.text_len, m2.text, m2.text_len));
    if (m.type == PROTO_FINAL) {
        CHECK(m.finish == m2.finish);
        CHECK((m.abort_reason == NULL) == (m2.abort_reason == NULL));
        CHECK(!m.abort_reason || !strcmp(m.abort_reason, m2.abort_reason));
        CHECK(m.usage.prompt_tokens == m2.usage.prompt_tokens &&
              m.usage.completion_tokens == m2.usage.completion_tokens &&
              m.usage.queue_ms == m2.usage.queue_ms && m.usage.ttft_ms == m2.usage.ttft_ms &&
              m.usage.total_ms == m2.usage.total_ms);
    }
    if (m.type == PROTO_ERROR) {
        /* a message is cut to 1024 bytes (at a character boundary) and at a NUL */
        size_t n1 = strlen(m.message), n2 = strlen(m2.message);
        CHECK(m.code == m2.code && n2 <= n1 && n2 <= 1024 && !memcmp(m.message, m2.message, n2));
        CHECK(n1 > 1024 || n1 == n2);
    }
    if (m.type == PROTO_PONG) {
        CHECK(m.n_workers == m2.n_workers);
        for (int i = 0; i < m.n_workers; i++) {
            const proto_worker_status *a = &m.workers[i], *b = &m2.workers[i];
            CHECK(!strcmp(a->name, b->name) && !strcmp(a->state, b->state));
            CHECK(a->running == b->running && a->waiting == b->waiting &&
                  a->kv_blocks_free == b->kv_blocks_free &&
                  a->kv_blocks_total == b->kv_blocks_total && a->served == b->served);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!d1) {
        CHECK(proto_decoder_new(NULL, &d1) == DERAS_OK);
        CHECK(proto_decoder_new(NULL, &d2) == DERAS_OK);
        CHECK(proto_encoder_new(&enc) == DERAS_OK && proto_encoder_new(&err_enc) == DERAS_OK);
    }
    client_side(data, size);
    server_side(data, size);
    return 0;
}
