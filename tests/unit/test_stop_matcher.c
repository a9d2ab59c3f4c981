/* SPDX-License-Identifier: Apache-2.0 */
/* test_stop_matcher.c - stop strings over streamed text: nothing of a stop string is ever
 * released, nothing else is ever lost, whatever the split into pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/tokenizer/stop_matcher.h"
#include "test_util.h"

/* Stream `text` in pieces of the given sizes (cycled); return the released text and the
 * stop index. */
static char *stream(stop_matcher_t *m, const char *text, const int *sizes, int n_sizes, int *stop)
{
    size_t cap = stop_matcher_out_cap(m), len = strlen(text), pos = 0, n_total = 0, n_out;
    char *out = malloc(cap), *all = calloc(len + cap + 1, 1);
    stop_matcher_reset(m);
    *stop = -1;
    for (int k = 0; pos < len && *stop < 0; k++) {
        size_t piece = (size_t)sizes[k % n_sizes];
        piece = piece > len - pos ? len - pos : piece;
        assert_int_equal(stop_matcher_push(m, text + pos, piece, out, cap, &n_out, stop), DERAS_OK);
        memcpy(all + n_total, out, n_out);
        n_total += n_out;
        pos += piece;
    }
    if (*stop < 0) {
        assert_int_equal(stop_matcher_flush(m, out, cap, &n_out), DERAS_OK);
        memcpy(all + n_total, out, n_out);
    }
    free(out);
    return all;
}

static void stops_at_earliest_stop_for_every_split(void **state)
{
    (void)state;
    const char *stops[] = {"###", "\nUser:", "end"};
    stop_matcher_t *m;
    assert_int_equal(stop_matcher_new(stops, 3, &m), DERAS_OK);
    const int splits[][3] = {{1, 1, 1}, {2, 3, 1}, {5, 5, 5}, {1, 7, 2}, {100, 100, 100}};
    struct {
        const char *text, *want;
        int stop;
    } cases[] = {
        {"Hello ## world ### more", "Hello ## world ", 0},
        {"The answer.\nUser: next", "The answer.", 1},
        {"no stop here, en", "no stop here, en", -1},
        {"weekend", "week", 2},
        {"#\nUse ### x", "#\nUse ", 0},
        {"", "", -1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
            int stop;
            char *got = stream(m, cases[c].text, splits[s], 3, &stop);
            if (strcmp(got, cases[c].want) || stop != cases[c].stop)
                fail_msg("text '%s' split %zu: got '%s' stop %d, expected '%s' stop %d",
                         cases[c].text, s, got, stop, cases[c].want, cases[c].stop);
            free(got);
        }
    stop_matcher_destroy(&m);
    assert_null(m);
}

static void holds_back_only_possible_stop_prefixes(void **state)
{
    (void)state;
    const char *stops[] = {"STOP"};
    stop_matcher_t *m;
    assert_int_equal(stop_matcher_new(stops, 1, &m), DERAS_OK);
    char out[2048];
    size_t n;
    int stop;
    assert_int_equal(stop_matcher_push(m, "abcST", 5, out, sizeof out, &n, &stop), DERAS_OK);
    assert_int_equal(n, 3); /* "ST" held */
    assert_memory_equal(out, "abc", 3);
    assert_int_equal(stop_matcher_push(m, "Ox", 2, out, sizeof out, &n, &stop), DERAS_OK);
    assert_int_equal(n, 4); /* "STOx" cannot become STOP: released */
    assert_memory_equal(out, "STOx", 4);
    assert_int_equal(stop_matcher_push(m, "STOP!", 5, out, sizeof out, &n, &stop), DERAS_OK);
    assert_int_equal(stop, 0);
    assert_int_equal(n, 0);
    assert_int_equal(stop_matcher_push(m, "x", 1, out, sizeof out, &n, &stop), DERAS_ECLOSED);
    stop_matcher_destroy(&m);
}

static void rejects_empty_stop_strings(void **state)
{
    (void)state;
    const char *stops[] = {"ok", ""};
    stop_matcher_t *m = NULL;
    assert_int_equal(stop_matcher_new(stops, 2, &m), DERAS_EINVAL);
    assert_null(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stops_at_earliest_stop_for_every_split),
        cmocka_unit_test(holds_back_only_possible_stop_prefixes),
        cmocka_unit_test(rejects_empty_stop_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
