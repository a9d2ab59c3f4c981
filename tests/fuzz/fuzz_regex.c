/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_regex.c - libFuzzer target for the regex translator (common/grammar/regex.h).
 *
 * The first byte picks the JSON-string mode; the rest is the regular expression.
 * Invariants, any broken one aborts:
 *  - the status is 0 or a documented one; on failure *out is NULL;
 *  - what translates is valid GBNF: it compiles, or fails only on a limit (DERAS_ERANGE) or
 *    a class that matches nothing (DERAS_EUNSUPPORTED, non-productive), never on syntax;
 *  - random sentences of the compiled grammar are recognized by it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/regex.h"
#include "grammar_gen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool json = data[0] & 1;
    grammar_limits lim;
    grammar_limits_default(&lim);
    lim.max_repeat = 64;
    lim.max_nesting = 32;
    lim.max_elements = 1 << 15;
    char *expr = (char *)1;
    size_t n = 0;
    int st = regex_to_gbnf((const char *)data + 1, size - 1, &lim, json, &expr, &n);
    if (st != 0 && st != DERAS_EFORMAT && st != DERAS_EUNSUPPORTED && st != DERAS_ERANGE)
        abort();
    if (st) {
        if (expr)
            abort();
        return 0;
    }
    char *text = malloc(n + 16);
    if (!text)
        abort();
    int len = snprintf(text, n + 16, "root ::= %s\n", expr);
    free(expr);
    lim.max_source = (size_t)len;
    grammar_t *g = NULL;
    st = grammar_from_gbnf(text, (size_t)len, &lim, &g);
    if (st && st != DERAS_ERANGE && st != DERAS_EUNSUPPORTED) {
        fprintf(stderr, "translation does not compile (%s): %s\n%s\n", deras_status_name(st),
                deras_errmsg(), text);
        abort();
    }
    free(text);
    uint64_t rng = size;
    char buf[2048];
    for (int i = 0; g && i < 8; i++) {
        long sl = gg_sentence(g, &rng, 8, buf, sizeof buf);
        bool prefix, complete;
        if (sl >= 0 && (grammar_match_bytes(g, buf, (size_t)sl, &prefix, &complete) == 0) &&
            !complete)
            abort();
    }
    grammar_destroy(&g);
    return 0;
}
