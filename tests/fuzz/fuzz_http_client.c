/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_http_client.c - libFuzzer target for the tools' HTTP client parsers
 * (tools/http_response.h, tools/oai_chunk.h): what `deras bench --http` reads from a
 * server it does not control.
 *
 * The first byte picks where the input is split in two reads (the parser must give the
 * same result however the bytes arrive: checked against one read of the whole), the rest
 * is a response. The decoded body never exceeds the bytes fed; every `data:` event of it
 * goes through the chunk scanner, which must agree with jansson: whatever jansson reads as
 * an object the scanner accepts, with the same usage and finish_reason (for events without
 * a raw NUL byte, which jansson skips between tokens and the scanner refuses). A bounded head
 * cap is checked too.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "tools/http_response.h"
#include "tools/oai_chunk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            abort();                                                                         \
    } while (0)

static void scan_event(const char *p, size_t n)
{
    oai_chunk c;
    int rc = oai_chunk_scan(p, n, &c);
    CHECK(rc == DERAS_OK || rc == DERAS_EFORMAT);
    json_t *o = json_loadb(p, n, JSON_ALLOW_NUL, NULL);
    /* A raw NUL byte outside a string is not JSON; jansson reads past one between tokens
     * (`"text":0\0,`), the scanner refuses it: agreement is asked only without raw NULs
     * (escaped \u0000 in strings is JSON, and both read it). */
    if (json_is_object(o) && !memchr(p, 0, n)) {
        CHECK(rc == DERAS_OK);
        const json_t *usage = json_object_get(o, "usage");
        const json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
        CHECK(c.error == (json_object_get(o, "error") != NULL));
        CHECK(c.usage == json_is_object(usage));
        CHECK(c.choice == json_is_object(ch));
        const json_t *ct = json_object_get(usage, "completion_tokens");
        if (json_is_integer(ct) && json_integer_value(ct) >= 0 &&
            json_integer_value(ct) < 100000000000000000LL)
            CHECK(c.completion_tokens == json_integer_value(ct));
        const json_t *fr = json_object_get(ch, "finish_reason");
        CHECK((c.finish != NULL) == json_is_string(fr));
    }
    if (rc == DERAS_OK && c.finish)
        CHECK(c.finish >= p && c.finish + c.finish_len <= p + n);
    json_decref(o);
}

static int run(http_resp *r, const char *p, size_t n, size_t cut)
{
    http_resp_begin(r);
    int rc = http_resp_feed(r, p, cut);
    if (rc == HTTP_RESP_MORE)
        rc = http_resp_feed(r, p + cut, n - cut);
    if (rc == HTTP_RESP_MORE)
        rc = http_resp_eof(r);
    CHECK(rc == HTTP_RESP_DONE || rc == DERAS_EFORMAT);
    CHECK(r->head.n <= 2 * HTTP_RESP_MAX_HEAD + n);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1, cut = n ? data[0] % (n + 1) : 0;
    http_resp a = {0}, b = {0};
    int ra = run(&a, p, n, n), rb = run(&b, p, n, cut);
    size_t na, nb;
    const char *ba = http_resp_body(&a, &na), *bb = http_resp_body(&b, &nb);
    CHECK(ra == rb);
    if (ra == HTTP_RESP_DONE) {
        CHECK(a.status == b.status && a.keep_alive == b.keep_alive);
        CHECK(na == nb && !memcmp(ba, bb, na) && na <= n);
        for (const char *e; (e = memmem(ba, na, "\n\n", 2)); na -= (size_t)(e + 2 - ba), ba = e + 2)
            if (e - ba >= 6 && !memcmp(ba, "data: ", 6))
                scan_event(ba + 6, (size_t)(e - ba - 6));
    }
    http_resp_free(&a);
    http_resp_free(&b);
    return 0;
}
