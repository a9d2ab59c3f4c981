/* SPDX-License-Identifier: Apache-2.0 */
/* constraint.c - structured output fields -> checked GBNF (see constraint.h). */
#include "router/constraint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/grammar.h"
#include "common/grammar/regex.h"
#include "common/schema/json_schema.h"

bool constraint_wanted(const proto_request *q)
{
    return q->json_schema || q->regex || q->grammar || q->json_object;
}

/* "root ::= " + the regex's expression. */
static int regex_grammar(const char *re, size_t n, char **out, size_t *len)
{
    char *expr;
    size_t elen;
    int rc = regex_to_gbnf(re, n, NULL, false, &expr, &elen);
    if (rc)
        return rc;
    static const char head[] = "root ::= ";
    char *g = malloc(sizeof head + elen + 1);
    if (!g) {
        free(expr);
        return deras_fail(DERAS_ENOMEM, "out of memory");
    }
    memcpy(g, head, sizeof head - 1);
    memcpy(g + sizeof head - 1, expr, elen);
    g[sizeof head - 1 + elen] = '\n';
    g[sizeof head + elen] = '\0';
    free(expr);
    *out = g;
    *len = sizeof head + elen;
    return DERAS_OK;
}

enum proto_error_code constraint_gbnf(const proto_request *q, char **gbnf, size_t *len, char *msg,
                                      size_t cap)
{
    *gbnf = NULL;
    *len = 0;
    if (!constraint_wanted(q))
        return PE_NONE;
    char *g = NULL;
    size_t n = 0;
    int rc;
    if (q->json_schema) {
        rc = jschema_to_gbnf_json(q->json_schema, NULL, &g, &n);
    } else if (q->regex) {
        rc = regex_grammar(q->regex, q->regex_len, &g, &n);
    } else if (q->json_object) {
        rc = jschema_json_object_gbnf(NULL, &g, &n);
    } else {
        rc = (g = malloc(q->grammar_len + 1)) ? DERAS_OK
                                             : deras_fail(DERAS_ENOMEM, "out of memory");
        if (g) {
            memcpy(g, q->grammar, q->grammar_len);
            g[q->grammar_len] = '\0';
            n = q->grammar_len;
        }
    }
    grammar_t *compiled = NULL;
    bool prefix, complete;
    if (!rc)
        rc = grammar_from_gbnf(g, n, NULL, &compiled);
    if (!rc) /* the start state under the matcher's budgets (a huge ambiguous alternation) */
        rc = grammar_match_bytes(compiled, "", 0, &prefix, &complete);
    grammar_destroy(&compiled);
    if (rc) {
        free(g);
        /* the compilers name their input ("json_schema: at /: keyword ...") */
        snprintf(msg, cap, "%s", deras_errmsg());
        return rc == DERAS_ENOMEM ? PE_INTERNAL : PE_INVALID_GRAMMAR;
    }
    *gbnf = g;
    *len = n;
    return PE_NONE;
}
