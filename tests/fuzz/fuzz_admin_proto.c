/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_admin_proto.c - libFuzzer target for the admin protocol's requests.
 *
 * Arbitrary bytes go through admin_decode_request, as the router decodes what arrives on
 * its admin socket. A failure must be DERAS_EFORMAT with a code in the enum and a valid
 * UTF-8 message; a success must re-encode (admin_encode_request) to a frame that decodes
 * to the same request. The seed corpus (corpus/fuzz_admin_proto) holds a valid frame of
 * every request, written by make_proto_corpus.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire/admin_proto.h"
#include "common/base/status.h"
#include "common/base/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static admin_codec_t *c1, *c2;

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            abort();                                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!c1) {
        CHECK(admin_codec_new(&c1) == DERAS_OK && admin_codec_new(&c2) == DERAS_OK);
    }
    admin_request q, back;
    proto_error err;
    int rc = admin_decode_request(c1, data, size, &q, &err);
    if (rc != DERAS_OK) {
        CHECK(rc == DERAS_EFORMAT);
        CHECK(err.code > PE_NONE && err.code < PE_N_CODES);
        size_t n = strlen(err.message);
        CHECK(n > 0 && n < sizeof err.message && utf8_valid_prefix(err.message, n) == n);
        return 0;
    }
    const void *buf;
    size_t len;
    CHECK(admin_encode_request(c2, &q, &buf, &len) == DERAS_OK);
    CHECK(admin_decode_request(c1, buf, len, &back, &err) == DERAS_OK);
    CHECK(back.type == q.type && !strcmp(back.worker, q.worker) && back.all == q.all &&
          back.timeout_ms == q.timeout_ms && back.wait == q.wait);
    return 0;
}
