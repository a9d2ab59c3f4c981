/* SPDX-License-Identifier: Apache-2.0 */
/* test_http_client.c - the tools' HTTP client parsers: the response parser
 * (tools/http_response.c) on streams split at every byte, every framing, and hostile
 * answers; the chunk scanner (tools/oai_chunk.c) on the router's own chunks, against
 * jansson on the same text, and on malformed JSON; --http URLs (tools/http_conn.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "tools/http_conn.h"
#include "tools/http_response.h"
#include "tools/oai_chunk.h"

static const char sse[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    "19\r\ndata: {\"a\":1}\n\ndata: {\"b\"\r\n"
    "6\r\n:22}\n\n\r\n"
    "e;ext=1\r\ndata: [DONE]\n\n\r\n"
    "0\r\nX-Trailer: t\r\n\r\n";
static const char sse_body[] = "data: {\"a\":1}\n\ndata: {\"b\":22}\n\ndata: [DONE]\n\n";

/* Feed text in pieces of `step` bytes (0: at once); the final status and the body. */
static int feed_all(const char *text, size_t n, size_t step, http_resp *r)
{
    http_resp_begin(r);
    int rc = HTTP_RESP_MORE;
    for (size_t i = 0; i < n && rc == HTTP_RESP_MORE;) {
        size_t k = step && step < n - i ? step : n - i;
        rc = http_resp_feed(r, text + i, k);
        i += k;
    }
    return rc;
}

static void chunked_stream_at_every_split(void **s)
{
    (void)s;
    http_resp r = {0};
    for (size_t step = 0; step < 9; step++) {
        assert_int_equal(feed_all(sse, strlen(sse), step, &r), HTTP_RESP_DONE);
        assert_int_equal(r.status, 200);
        assert_true(r.keep_alive);
        size_t n;
        const char *b = http_resp_body(&r, &n);
        assert_int_equal(n, strlen(sse_body));
        assert_memory_equal(b, sse_body, n);
    }
    /* every two-piece split: what the parser sees across reads must not matter */
    for (size_t cut = 1; cut < strlen(sse); cut++) {
        http_resp_begin(&r);
        int rc = http_resp_feed(&r, sse, cut);
        assert_true(rc == HTTP_RESP_MORE || (rc == HTTP_RESP_DONE && cut == strlen(sse)));
        assert_int_equal(http_resp_feed(&r, sse + cut, strlen(sse) - cut), HTTP_RESP_DONE);
        size_t n;
        const char *b = http_resp_body(&r, &n);
        assert_int_equal(n, strlen(sse_body));
        assert_memory_equal(b, sse_body, n);
    }
    /* consuming from the front while more arrives */
    http_resp_begin(&r);
    assert_int_equal(http_resp_feed(&r, sse, 120), HTTP_RESP_MORE);
    size_t n;
    http_resp_body(&r, &n);
    http_resp_consume(&r, 15);
    assert_int_equal(http_resp_feed(&r, sse + 120, strlen(sse) - 120), HTTP_RESP_DONE);
    const char *b = http_resp_body(&r, &n);
    assert_int_equal(n, strlen(sse_body) - 15);
    assert_memory_equal(b, sse_body + 15, n);
    http_resp_free(&r);
}

static void lengths_closes_and_continues(void **s)
{
    (void)s;
    http_resp r = {0};
    const char *len = "HTTP/1.1 400 Bad Request\r\ncontent-length: 5\r\n\r\nhelloEXTRA";
    assert_int_equal(feed_all(len, strlen(len), 3, &r), HTTP_RESP_DONE);
    assert_int_equal(r.status, 400);
    size_t n;
    assert_memory_equal(http_resp_body(&r, &n), "hello", 5);
    assert_int_equal(n, 5);
    /* a body delimited by the close, in HTTP/1.0: done at EOF, not reusable */
    const char *close = "HTTP/1.0 200 OK\r\n\r\nabc";
    assert_int_equal(feed_all(close, strlen(close), 0, &r), HTTP_RESP_MORE);
    assert_int_equal(http_resp_eof(&r), HTTP_RESP_DONE);
    assert_false(r.keep_alive);
    http_resp_body(&r, &n);
    assert_int_equal(n, 3);
    /* Connection: close, an empty body, a status line without a reason phrase */
    const char *empty = "HTTP/1.1 204\r\nConnection: close\r\n\r\n";
    assert_int_equal(feed_all(empty, strlen(empty), 1, &r), HTTP_RESP_DONE);
    assert_int_equal(r.status, 204);
    assert_false(r.keep_alive);
    /* 100 Continue, then the answer */
    const char *cont = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 413 Too Large\r\nContent-Length: 2"
                       "\r\n\r\n{}";
    assert_int_equal(feed_all(cont, strlen(cont), 0, &r), HTTP_RESP_DONE);
    assert_int_equal(r.status, 413);
    http_resp_free(&r);
}

/* text is refused (DERAS_EFORMAT), fed whole or a byte at a time; further feeding fails */
static void refused(const char *text, size_t n, bool at_eof)
{
    for (size_t step = 0; step < 2; step++) {
        http_resp r = {0};
        int rc = feed_all(text, n, step, &r);
        if (at_eof) {
            assert_int_equal(rc, HTTP_RESP_MORE);
            rc = http_resp_eof(&r);
        }
        if (rc != DERAS_EFORMAT)
            fail_msg("accepted (%d): %.60s", rc, text);
        assert_int_equal(http_resp_feed(&r, "x", 1), DERAS_EFORMAT);
        assert_false(r.keep_alive);
        http_resp_free(&r);
    }
}

static void hostile_responses(void **s)
{
    (void)s;
    const char *bad[] = {
        "HTTP/2 200 OK\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 abc\r\n\r\n",
        "SSH-2.0-OpenSSH\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        refused(bad[i], strlen(bad[i]), false);
    /* ends early: inside the head, inside a chunked body, short of its length */
    const char *early[] = {
        "HTTP/1.1 200 OK\r\nX: y",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
        "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab",
    };
    for (size_t i = 0; i < sizeof early / sizeof *early; i++)
        refused(early[i], strlen(early[i]), true);
    /* a head that never ends: refused past 64 KiB, not buffered without bound */
    size_t n = HTTP_RESP_MAX_HEAD + 4096;
    char *big = malloc(n);
    assert_non_null(big);
    memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
    memset(big + 20, 'a', n - 20);
    http_resp r = {0};
    http_resp_begin(&r);
    int rc = HTTP_RESP_MORE;
    for (size_t i = 0; i < n && rc == HTTP_RESP_MORE; i += 1000)
        rc = http_resp_feed(&r, big + i, n - i < 1000 ? n - i : 1000);
    assert_int_equal(rc, DERAS_EFORMAT);
    assert_true(r.head.cap <= 2 * HTTP_RESP_MAX_HEAD + 4096);
    http_resp_free(&r);
    /* NUL bytes in a head */
    memcpy(big, "HTTP/1.1 200 OK\r\n\0\0\0\r\n\r\n", 24);
    http_resp_begin(&r);
    assert_int_equal(http_resp_feed(&r, big, 24), HTTP_RESP_MORE);
    http_resp_free(&r);
    free(big);
}

/* The scanner agrees with jansson about what the bench reads. */
static void scans_like_jansson(const char *text)
{
    oai_chunk c;
    assert_int_equal(oai_chunk_scan(text, strlen(text), &c), DERAS_OK);
    json_t *o = json_loads(text, JSON_ALLOW_NUL, NULL);
    assert_non_null(o);
    const json_t *usage = json_object_get(o, "usage");
    const json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    assert_int_equal(c.error, json_object_get(o, "error") != NULL);
    assert_int_equal(c.usage, json_is_object(usage));
    assert_int_equal(c.choice, json_is_object(ch));
    if (json_is_integer(json_object_get(usage, "completion_tokens")))
        assert_int_equal(c.completion_tokens,
                         json_integer_value(json_object_get(usage, "completion_tokens")));
    const json_t *fr = json_object_get(ch, "finish_reason");
    assert_int_equal(c.finish != NULL, json_is_string(fr));
    if (c.finish)
        assert_memory_equal(c.finish, json_string_value(fr), c.finish_len);
    const json_t *text_v = json_object_get(ch, "text");
    if (!text_v)
        text_v = json_object_get(json_object_get(ch, "delta"), "content");
    assert_int_equal(c.text, json_string_length(text_v) > 0);
    json_decref(o);
}

static void chunk_scanner(void **s)
{
    (void)s;
    scans_like_jansson("{\"id\":\"cmpl-7\",\"object\":\"text_completion\",\"created\":1,\"model\":"
                       "\"m\",\"choices\":[{\"index\":0,\"text\":\"\\u0000 \\\"x\\\"\",\"logprobs"
                       "\":null,\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":36,"
                       "\"completion_tokens\":19,\"total_tokens\":55}}");
    scans_like_jansson("{\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":"
                       "\"assistant\",\"content\":\"\"},\"logprobs\":{\"content\":[{\"token\":"
                       "\"a\",\"logprob\":-1.5e-3,\"bytes\":[97]}]},\"finish_reason\":\"stop\"}]}");
    scans_like_jansson("{\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
                       "\"completion_tokens\":12,\"total_tokens\":15}}");
    scans_like_jansson(" {\"error\": {\"message\": \"m\", \"code\": \"busy\"}} \n");
    scans_like_jansson("{\"choices\":[5,{\"text\":\"x\"}],\"usage\":7}");
    scans_like_jansson("{\"choices\":[{\"finish_reason\":5,\"text\":[1]}],\"usage\":{"
                       "\"completion_tokens\":1.5}}");
    scans_like_jansson("{\"usage\":{\"completion_tokens\":1},\"usage\":{\"completion_tokens\":2}}");
    scans_like_jansson("{\"a\":[[[{\"b\":[true,false,null,-0,0.5e+2,\"\\ud83d\\ude00\"]}]]]}");

    const char *bad[] = {
        "", "[]", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{\"a\":01}", "{\"a\":-}",
        "{\"a\":1.}", "{\"a\":1e}", "{\"a\":tru}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}",
        "{\"a\":\"unterminated}", "{\"a\":\"\x01\"}", "{\"a\":1} x", "{\"a\":[1 2]}",
        "{'a':1}", "{\"a\":NaN}", "{\"a\":1}{}",
    };
    oai_chunk c;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (oai_chunk_scan(bad[i], strlen(bad[i]), &c) != DERAS_EFORMAT)
            fail_msg("accepted: %s", bad[i]);
        json_t *o = json_loads(bad[i], 0, NULL);
        assert_true(!json_is_object(o));
        json_decref(o);
    }
    /* nesting: deep enough is refused, not recursed without bound */
    char deep[2 * OAI_CHUNK_MAX_DEPTH + 16];
    size_t k = 0;
    deep[k++] = '{';
    memcpy(deep + k, "\"a\":", 4);
    k += 4;
    for (int i = 0; i < OAI_CHUNK_MAX_DEPTH; i++)
        deep[k++] = '[';
    for (int i = 0; i < OAI_CHUNK_MAX_DEPTH; i++)
        deep[k++] = ']';
    deep[k++] = '}';
    assert_int_equal(oai_chunk_scan(deep, k, &c), DERAS_EFORMAT);
    /* a truncation of a valid chunk at every length is refused */
    const char *ok = "{\"id\":\"x\",\"choices\":[{\"text\":\"a\\n\",\"finish_reason\":null}]}";
    for (size_t n = 0; n < strlen(ok); n++)
        assert_int_equal(oai_chunk_scan(ok, n, &c), DERAS_EFORMAT);
}

static void urls(void **s)
{
    (void)s;
    http_url u;
    assert_int_equal(http_url_parse("http://127.0.0.1:9400", &u), DERAS_OK);
    assert_string_equal(u.hostport, "127.0.0.1:9400");
    assert_string_equal(u.prefix, "");
    assert_int_equal(http_url_parse("http://localhost:8000/v1/", &u), DERAS_OK);
    assert_string_equal(u.hostport, "localhost:8000");
    assert_string_equal(u.prefix, "");
    assert_int_equal(http_url_parse("http://[::1]:9400/api/v1", &u), DERAS_OK);
    assert_string_equal(u.hostport, "[::1]:9400");
    assert_string_equal(u.host, "::1");
    assert_string_equal(u.prefix, "/api");
    assert_int_equal(http_url_parse("http://127.0.0.1", &u), DERAS_OK);
    assert_string_equal(u.hostport, "127.0.0.1:80");
    const char *bad[] = {
        "https://127.0.0.1:9400", "127.0.0.1:9400", "http://", "http://:9400",
        "http://127.0.0.1:", "http://127.0.0.1:0", "http://127.0.0.1:65536",
        "http://127.0.0.1:94x0", "http://127.0.0.1:123456", "http://[::1:9400",
        "http://no-such-host.invalid:9400",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (http_url_parse(bad[i], &u) != DERAS_EINVAL)
            fail_msg("accepted: %s", bad[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunked_stream_at_every_split),
        cmocka_unit_test(lengths_closes_and_continues),
        cmocka_unit_test(hostile_responses),
        cmocka_unit_test(chunk_scanner),
        cmocka_unit_test(urls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
