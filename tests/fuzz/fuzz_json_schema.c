/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_json_schema.c - libFuzzer target for the JSON Schema compiler (common/schema).
 *
 * The input is a schema as JSON text. Invariants, any broken one aborts:
 *  - the status is 0 or a documented one; on failure *out is NULL;
 *  - what compiles is valid GBNF: grammar_from_gbnf accepts it, or refuses only a limit
 *    (DERAS_ERANGE) or a schema whose recursion never ends (DERAS_EUNSUPPORTED);
 *  - random sentences of that grammar parse as JSON (jansson).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/base/status.h"
#include "common/schema/json_schema.h"
#include "grammar_gen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    jschema_opts o;
    jschema_opts_default(&o);
    o.max_output = 1 << 16;
    o.max_depth = 16;
    char *gbnf = (char *)1;
    size_t n = 0;
    int st = jschema_to_gbnf((const char *)data, size, &o, &gbnf, &n);
    if (st != 0 && st != DERAS_EFORMAT && st != DERAS_EUNSUPPORTED && st != DERAS_ERANGE &&
        st != DERAS_ENOTFOUND)
        abort();
    if (st) {
        if (gbnf)
            abort();
        return 0;
    }
    grammar_limits lim;
    grammar_limits_default(&lim);
    lim.max_elements = 1 << 17;
    grammar_t *g = NULL;
    st = grammar_from_gbnf(gbnf, n, &lim, &g);
    if (st && st != DERAS_ERANGE && st != DERAS_EUNSUPPORTED) {
        fprintf(stderr, "schema grammar does not compile (%s): %s\n%s\n", deras_status_name(st),
                deras_errmsg(), gbnf);
        abort();
    }
    free(gbnf);
    uint64_t rng = size;
    char buf[4096];
    for (int i = 0; g && i < 8; i++) {
        long sl = gg_sentence(g, &rng, 6, buf, sizeof buf);
        if (sl < 0)
            continue;
        json_t *j = json_loadb(buf, (size_t)sl, JSON_DECODE_ANY, NULL);
        if (!j) {
            fprintf(stderr, "not JSON: %s\n", buf);
            abort();
        }
        json_decref(j);
    }
    grammar_destroy(&g);
    return 0;
}
