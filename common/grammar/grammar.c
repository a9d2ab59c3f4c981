/* SPDX-License-Identifier: Apache-2.0 */
/* grammar.c - grammar_t's public calls beyond the GBNF parser (gbnf.c) and the compile
 * passes (glower.c, gcheck.c): limits, the regex door, information, a byte recognizer. */
#include "common/grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/grammar_internal.h"
#include "common/grammar/matcher.h"
#include "common/grammar/pda.h"
#include "common/grammar/regex.h"

void grammar_limits_default(grammar_limits *l)
{
    l->max_source = 256u << 10;
    l->max_nesting = 100;
    l->max_repeat = 4096;
    l->max_rules = 65536;
    l->max_elements = 1 << 20;
}

int grammar_from_regex(const char *re, size_t len, const grammar_limits *lim, grammar_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "grammar_from_regex: NULL out");
    *out = NULL;
    char *expr = NULL;
    size_t n = 0;
    int rc = regex_to_gbnf(re, len, lim, false, &expr, &n);
    if (rc)
        return rc;
    static const char head[] = "root ::= ";
    char *text = malloc(sizeof head + n);
    if (!text) {
        free(expr);
        return deras_fail(DERAS_ENOMEM, "regex: out of memory");
    }
    memcpy(text, head, sizeof head - 1);
    memcpy(text + sizeof head - 1, expr, n);
    free(expr);
    grammar_limits l;
    if (lim)
        l = *lim;
    else
        grammar_limits_default(&l);
    /* the translation is bounded by the regex's own limit; the text may be longer */
    l.max_source = sizeof head - 1 + n;
    rc = grammar_from_gbnf(text, sizeof head - 1 + n, &l, out);
    free(text);
    return rc;
}

void grammar_destroy(grammar_t **gp)
{
    if (!gp || !*gp)
        return;
    grammar_t *g = *gp;
    for (int r = 0; g->name && r < g->n_rules; r++)
        free(g->name[r]);
    free(g->name);
    free(g->el);
    free(g->rule_of);
    free(g->alt);
    free(g->ralt);
    free(g->set);
    free(g->nullable);
    free(g->reachable);
    free(g);
    *gp = NULL;
}

void grammar_get_info(const grammar_t *g, grammar_info *out)
{
    out->n_rules = g->n_rules;
    out->n_elements = g->n_el;
    out->n_terminals = g->n_terminals;
    out->n_bytesets = g->n_sets;
    out->bytes = g->bytes;
}

int grammar_match_bytes(const grammar_t *g, const char *bytes, size_t len, bool *prefix,
                        bool *complete)
{
    if (!g || (!bytes && len) || !prefix || !complete)
        return deras_fail(DERAS_EINVAL, "grammar_match_bytes: NULL argument");
    *prefix = *complete = false;
    gmatcher_opts o;
    gmatcher_opts_default(&o);
    pda p;
    int32_t *buf = malloc((size_t)o.max_stacks * 2 * sizeof(int32_t));
    int32_t *remap = malloc((size_t)o.max_nodes * sizeof(int32_t));
    int rc = pda_init(&p, g, o.max_nodes, o.max_stacks, o.max_depth, o.max_closure);
    if (!rc && (!buf || !remap))
        rc = deras_fail(DERAS_ENOMEM, "grammar: out of memory");
    if (rc)
        goto done;
    pda_out cur = {.top = buf}, next = {.top = buf + o.max_stacks};
    if ((rc = pda_start(&p, &cur)))
        goto done;
    for (size_t i = 0; i < len; i++) {
        if (cur.n == 0)
            goto done; /* dead: not even a prefix */
        if (p.len > p.cap / 2) {
            int32_t *lists[1] = {cur.top};
            int lens[1] = {cur.n};
            pda_compact(&p, lists, lens, 1, remap);
        }
        if ((rc = pda_step(&p, cur.top, cur.n, (unsigned char)bytes[i], &next)))
            goto done;
        pda_out t = cur;
        cur = next;
        next = t;
    }
    *prefix = cur.n > 0 || cur.accept;
    *complete = cur.accept;
done:
    pda_free(&p);
    free(buf);
    free(remap);
    return rc;
}
