/* SPDX-License-Identifier: Apache-2.0 */
/* test_router_stream.c - one sample's text as the router relays it: token ids in, text
 * deltas out. Whatever the batching of tokens into chunks, the chunks concatenate to the
 * decoded text; no chunk ends inside a UTF-8 character; no byte of a stop string is ever
 * emitted and nothing after it either; held text comes out at a natural end; special
 * tokens add no text; a reused stream forgets its previous sample; with min_tokens, stop
 * strings count only in the text after the first min_tokens tokens.
 * Tokenizer: tests/data/tiny-chat (byte-level BPE, 1005 tokens, so non-ASCII characters
 * arrive as several byte tokens).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"
#include "router/stream.h"
#include "test_util.h"

static tokenizer_t *tok;

static int setup(void **s)
{
    (void)s;
    char *dir = test_data_path("tiny-chat");
    int rc = tokenizer_from_hf_dir(dir, &tok);
    if (rc)
        fprintf(stderr, "%s: %s\n", dir, deras_errmsg());
    free(dir);
    return rc ? -1 : 0;
}

static int teardown(void **s)
{
    (void)s;
    tokenizer_destroy(&tok);
    return 0;
}

static int encode(const char *text, int32_t *ids, int cap)
{
    size_t n;
    assert_int_equal(tokenizer_encode(tok, text, strlen(text), false, true, ids, (size_t)cap, &n),
                     DERAS_OK);
    return (int)n;
}

/* Push ids in batches of `batch` tokens, taking the pending text after each batch (one
 * chunk per STEP); finish at the end unless stopped. Returns the concatenated chunks;
 * every chunk must be valid UTF-8. */
static char *relay(stream_t *s, const int32_t *ids, int n, int batch, int *n_chunks)
{
    char *all = calloc(1, 65536);
    size_t at = 0;
    *n_chunks = 0;
    for (int i = 0; i < n && !stream_stopped(s);) {
        for (int b = 0; b < batch && i < n && !stream_stopped(s); b++, i++)
            assert_int_equal(stream_push(s, ids[i], NULL), DERAS_OK);
        size_t len;
        const char *t = stream_text(s, &len);
        if (utf8_valid_prefix(t, len) != len)
            fail_msg("chunk %d (batch %d) is not valid UTF-8: '%.*s'", *n_chunks, batch, (int)len, t);
        memcpy(all + at, t, len);
        at += len;
        stream_take(s);
        (*n_chunks)++;
    }
    assert_int_equal(stream_finish(s), DERAS_OK);
    size_t len;
    const char *t = stream_text(s, &len);
    memcpy(all + at, t, len);
    stream_take(s);
    return all;
}

static void chunks_concatenate_to_the_text_for_any_batching(void **state)
{
    (void)state;
    const char *text = "Hello, world! Caf\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82 done.";
    int32_t ids[256];
    int n = encode(text, ids, 256);
    stream_t *s = NULL;
    assert_int_equal(stream_new(tok, &s), DERAS_OK);
    assert_non_null(s);
    for (int batch = 1; batch <= 7; batch++) {
        assert_int_equal(stream_start(s, NULL, NULL, 0, false, 0), DERAS_OK);
        int chunks;
        char *got = relay(s, ids, n, batch, &chunks);
        if (strcmp(got, text))
            fail_msg("batch %d: expected '%s', got '%s'", batch, text, got);
        assert_int_equal(stream_n_tokens(s), n);
        assert_false(stream_stopped(s));
        free(got);
    }
    stream_destroy(&s);
}

static void one_pending_chunk_holds_every_token_of_a_step(void **state)
{
    (void)state;
    int32_t ids[64];
    int n = encode("one two three", ids, 64);
    stream_t *s = NULL;
    assert_int_equal(stream_new(tok, &s), DERAS_OK);
    assert_int_equal(stream_start(s, NULL, NULL, 0, true, 0), DERAS_OK);
    proto_logprob lp = {.logprob = -0.5f, .n_top = 1};
    for (int i = 0; i < n; i++) {
        lp.token_id = ids[i];
        lp.top_ids[0] = ids[i];
        assert_int_equal(stream_push(s, ids[i], &lp), DERAS_OK);
    }
    int n_ids;
    const int32_t *got = stream_ids(s, &n_ids);
    assert_int_equal(n_ids, n);
    assert_memory_equal(got, ids, (size_t)n * sizeof *ids);
    const proto_logprob *lps = stream_logprobs(s);
    assert_non_null(lps);
    for (int i = 0; i < n; i++)
        assert_int_equal(lps[i].token_id, ids[i]);
    size_t len;
    const char *t = stream_text(s, &len);
    assert_int_equal(len, strlen("one two three"));
    assert_memory_equal(t, "one two three", len);
    stream_take(s);
    assert_false(stream_has_pending(s));
    stream_destroy(&s);
}

/* The text emitted so far must always be a prefix of the expected output. */
static void check_stop(stream_t *s, const char *text, const char *const *stops, int n_stops,
                       const char *want, int want_stop)
{
    int32_t ids[256];
    int n = encode(text, ids, 256);
    size_t lens[8];
    for (int i = 0; i < n_stops; i++)
        lens[i] = strlen(stops[i]);
    for (int batch = 1; batch <= 4; batch++) {
        assert_int_equal(stream_start(s, stops, lens, n_stops, false, 0), DERAS_OK);
        char out[1024] = "";
        size_t at = 0;
        for (int i = 0; i < n && !stream_stopped(s); i++) {
            assert_int_equal(stream_push(s, ids[i], NULL), DERAS_OK);
            if ((i + 1) % batch)
                continue;
            size_t len;
            const char *t = stream_text(s, &len);
            memcpy(out + at, t, len);
            at += len;
            stream_take(s);
            if (strncmp(out, want, at))
                fail_msg("'%s' with batch %d: emitted '%s', which is not a prefix of '%s'", text,
                         batch, out, want);
        }
        assert_int_equal(stream_finish(s), DERAS_OK);
        size_t len;
        const char *t = stream_text(s, &len);
        memcpy(out + at, t, len);
        out[at + len] = '\0';
        if (strcmp(out, want) || stream_stop_index(s) != want_stop)
            fail_msg("'%s' with batch %d: expected '%s' (stop %d), got '%s' (stop %d)", text, batch,
                     want, want_stop, out, stream_stop_index(s));
        assert_int_equal(stream_stopped(s), want_stop >= 0);
    }
}

static void stop_strings_are_never_emitted_even_in_part(void **state)
{
    (void)state;
    stream_t *s = NULL;
    assert_int_equal(stream_new(tok, &s), DERAS_OK);
    const char *stops[] = {"STOP", "\nUser:", "\xe4\xb8\x96"};
    check_stop(s, "Hello world. STOP and more text", stops, 3, "Hello world. ", 0);
    check_stop(s, "A reply.\nUser: next turn", stops, 3, "A reply.", 1);
    check_stop(s, "Say \xe4\xb8\x96\xe7\x95\x8c", stops, 3, "Say ", 2);
    /* a partial match held back is released at the natural end */
    check_stop(s, "ends with ST", stops, 3, "ends with ST", -1);
    check_stop(s, "STO STOP", stops, 3, "STO ", 0);
    stream_destroy(&s);
}

static void pushes_after_a_stop_are_ignored(void **state)
{
    (void)state;
    stream_t *s = NULL;
    assert_int_equal(stream_new(tok, &s), DERAS_OK);
    const char *stops[] = {"!"};
    size_t lens[] = {1};
    int32_t ids[64];
    int n = encode("Hi! there", ids, 64);
    assert_int_equal(stream_start(s, stops, lens, 1, false, 0), DERAS_OK);
    int i = 0;
    while (!stream_stopped(s))
        assert_int_equal(stream_push(s, ids[i++], NULL), DERAS_OK);
    int counted = stream_n_tokens(s);
    for (; i < n; i++)
        assert_int_equal(stream_push(s, ids[i], NULL), DERAS_ECLOSED);
    assert_int_equal(stream_n_tokens(s), counted);
    size_t len;
    const char *t = stream_text(s, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(t, "Hi", 2);
    stream_destroy(&s);
}

/* min_tokens: a stop string in the text of the first min_tokens tokens does not count (the
 * text passes as it is); one after them does. */
static void stop_strings_wait_for_min_tokens(void **state)
{
    (void)state;
    stream_t *s = NULL;
    assert_int_equal(stream_new(tok, &s), DERAS_OK);
    const char *stops[] = {"!"};
    size_t lens[] = {1};
    int32_t ids[64];
    int n = encode("Hi! there! end", ids, 64);
    assert_int_equal(stream_start(s, stops, lens, 1, false, 0), DERAS_OK);
    int i = 0;
    while (!stream_stopped(s))
        assert_int_equal(stream_push(s, ids[i++], NULL), DERAS_OK);
    int first = stream_n_tokens(s); /* the token that completed the first "!" */
    for (int min_tokens = first; min_tokens <= first + 1; min_tokens++) {
        assert_int_equal(stream_start(s, stops, lens, 1, false, min_tokens), DERAS_OK);
        for (i = 0; i < n && !stream_stopped(s); i++)
            assert_int_equal(stream_push(s, ids[i], NULL), DERAS_OK);
        assert_true(stream_stopped(s));
        assert_true(stream_n_tokens(s) > first);
        size_t len;
        const char *t = stream_text(s, &len);
        assert_int_equal(len, strlen("Hi! there"));
        assert_memory_equal(t, "Hi! there", len);
    }
    /* a min_tokens beyond the output: no stop at all, everything is text */
    assert_int_equal(stream_start(s, stops, lens, 1, false, n), DERAS_OK);
    for (i = 0; i < n; i++)
        assert_int_equal(stream_push(s, ids[i], NULL), DERAS_OK);
    assert_int_equal(stream_finish(s), DERAS_OK);
    assert_false(stream_stopped(s));
    size_t len;
    const char *t = stream_text(s, &len);
    assert_int_equal(len, strlen("Hi! there! end"));
    assert_memory_equal(t, "Hi! there! end", len);
    stream_destroy(&s);
}

static void special_tokens_add_no_text(void **state)
{
    (void)state;
    stream_t *s = NULL;
    assert_int_equal(stream_new(tok, &s), DERAS_OK);
    assert_int_equal(stream_start(s, NULL, NULL, 0, false, 0), DERAS_OK);
    int32_t eos = tokenizer_eos(tok);
    assert_true(eos >= 0);
    int32_t ids[16];
    int n = encode("ok", ids, 16);
    for (int i = 0; i < n; i++)
        assert_int_equal(stream_push(s, ids[i], NULL), DERAS_OK);
    assert_int_equal(stream_push(s, eos, NULL), DERAS_OK);
    assert_int_equal(stream_push(s, 100000, NULL), DERAS_OK); /* outside the vocabulary */
    assert_int_equal(stream_finish(s), DERAS_OK);
    size_t len;
    const char *t = stream_text(s, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(t, "ok", 2);
    int n_ids;
    stream_ids(s, &n_ids);
    assert_int_equal(n_ids, n + 2);
    stream_destroy(&s);
}

static void a_restarted_stream_forgets_the_previous_sample(void **state)
{
    (void)state;
    stream_t *s = NULL;
    assert_int_equal(stream_new(tok, &s), DERAS_OK);
    const char *stops[] = {"x"};
    size_t lens[] = {1};
    int32_t ids[16];
    /* leave an incomplete character and a stop in the first sample */
    int n = encode("\xe4\xb8\x96", ids, 16);
    assert_true(n > 1);
    assert_int_equal(stream_start(s, stops, lens, 1, true, 0), DERAS_OK);
    assert_int_equal(stream_push(s, ids[0], NULL), DERAS_OK);
    assert_int_equal(stream_start(s, NULL, NULL, 0, false, 0), DERAS_OK);
    assert_false(stream_has_pending(s));
    assert_null(stream_logprobs(s));
    n = encode("x y", ids, 16);
    for (int i = 0; i < n; i++)
        assert_int_equal(stream_push(s, ids[i], NULL), DERAS_OK);
    assert_int_equal(stream_finish(s), DERAS_OK);
    size_t len;
    const char *t = stream_text(s, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(t, "x y", 3);
    assert_false(stream_stopped(s));
    stream_destroy(&s);
}

static void bad_stop_strings_are_refused(void **state)
{
    (void)state;
    stream_t *s = NULL;
    assert_int_equal(stream_new(tok, &s), DERAS_OK);
    const char *stops[] = {"a\0b"};
    size_t lens[] = {3};
    assert_int_equal(stream_start(s, stops, lens, 1, false, 0), DERAS_EINVAL);
    size_t zero[] = {0};
    assert_int_equal(stream_start(s, stops, zero, 1, false, 0), DERAS_EINVAL);
    stream_destroy(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chunks_concatenate_to_the_text_for_any_batching),
        cmocka_unit_test(one_pending_chunk_holds_every_token_of_a_step),
        cmocka_unit_test(stop_strings_are_never_emitted_even_in_part),
        cmocka_unit_test(pushes_after_a_stop_are_ignored),
        cmocka_unit_test(stop_strings_wait_for_min_tokens),
        cmocka_unit_test(special_tokens_add_no_text),
        cmocka_unit_test(a_restarted_stream_forgets_the_previous_sample),
        cmocka_unit_test(bad_stop_strings_are_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
