/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_tool_calls.c - libFuzzer target for the tool-call parser (router/tool_calls.h).
 *
 * The first byte picks the style, the second where to cut; the rest is a model's reply.
 * Parsed whole, in two pieces at the cut, and a byte at a time, the content must be the
 * same bytes and the calls the same JSON (names and arguments; every call object must
 * parse, its arguments must be JSON text of an object). Whatever is not a call is content:
 * with no call found, the content is the reply itself, byte for byte.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "router/tool_calls.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            abort();                                                                         \
    } while (0)

typedef struct run {
    oai_buf content, calls;
    int n_calls;
} run;

static void parse(tool_style st, const char *s, size_t n, size_t cut, int mode, run *out)
{
    tool_parser p = {0};
    tool_parser_start(&p, st, 7);
    memset(out, 0, sizeof *out);
    if (mode == 0) {
        tool_parser_feed(&p, s, n, false, &out->content, &out->calls);
    } else if (mode == 1) {
        tool_parser_feed(&p, s, cut, true, &out->content, &out->calls);
        tool_parser_feed(&p, s + cut, n - cut, true, &out->content, &out->calls);
    } else {
        for (size_t i = 0; i < n; i++)
            tool_parser_feed(&p, s + i, 1, true, &out->content, &out->calls);
    }
    tool_parser_finish(&p, mode != 0, &out->content, &out->calls);
    out->n_calls = p.n_calls;
    tool_parser_free(&p);
}

/* [[name, arguments], ...] of a run's calls. */
static json_t *pairs(const run *r)
{
    char *text = malloc(r->calls.n + 3);
    CHECK(text);
    text[0] = '[';
    if (r->calls.n)
        memcpy(text + 1, r->calls.p, r->calls.n);
    memcpy(text + 1 + r->calls.n, "]", 2);
    json_t *a = json_loads(text, 0, NULL);
    free(text);
    CHECK(json_is_array(a) && (int)json_array_size(a) == r->n_calls);
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(a, i, c) {
        json_t *fn = json_object_get(c, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        CHECK(json_is_string(json_object_get(fn, "name")) && args);
        json_t *parsed = json_loads(args, 0, NULL);
        CHECK(json_is_object(parsed));
        json_decref(parsed);
        json_array_append_new(out, json_pack("[OO]", json_object_get(fn, "name"),
                                             json_object_get(fn, "arguments")));
    }
    json_decref(a);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    tool_style st = (tool_style)(data[0] % 3);
    const char *s = (const char *)data + 2;
    size_t n = size - 2, cut = n ? data[1] % (n + 1) : 0;
    run r[3];
    for (int mode = 0; mode < 3; mode++)
        parse(st, s, n, cut, mode, &r[mode]);
    json_t *want = pairs(&r[0]);
    for (int mode = 1; mode < 3; mode++) {
        CHECK(r[mode].content.n == r[0].content.n);
        CHECK(!r[0].content.n || !memcmp(r[mode].content.p, r[0].content.p, r[0].content.n));
        json_t *got = pairs(&r[mode]);
        CHECK(json_equal(got, want));
        json_decref(got);
    }
    if (r[0].n_calls == 0)
        CHECK(r[0].content.n == n && (!n || !memcmp(r[0].content.p, s, n)));
    json_decref(want);
    for (int mode = 0; mode < 3; mode++) {
        oai_buf_free(&r[mode].content);
        oai_buf_free(&r[mode].calls);
    }
    return 0;
}
