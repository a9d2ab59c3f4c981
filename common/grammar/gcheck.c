/* SPDX-License-Identifier: Apache-2.0 */
/* gcheck.c - the byte-level grammar's checks and specialization, then the frozen grammar_t.
 *
 * Checks, over the rules reachable from root:
 *   productive   every rule derives some finite byte string (else DERAS_EUNSUPPORTED: a
 *                stack could sit where nothing can ever complete it);
 *   left recursion  a rule reaching itself at the left of an alternative (through rules
 *                that can be empty) with a call that is not in tail position grows the
 *                stack without reading a byte: DERAS_EUNSUPPORTED naming it. Left cycles
 *                made only of tail calls (the regex (a*)*, A ::= B, B ::= A | "x") are
 *                kept: the closure's visited set (pda.c) ends them.
 * Specialization: rules not in a cycle with other rules (self tail recursion, as in x*, is
 * fine) that are referenced from several places get a copy per call site, callers before
 * callees, within an element budget (16x the lowered grammar + 64k, within max_elements):
 * a rule whose copies, with the copies of what it calls, do not fit stays shared and the
 * smaller ones after it go on. A rule with one call site has one return position, so the
 * mask cache can treat what lies under it as known (token_grammar.h). The language does
 * not change.
 * Costs: O(rules + elements) for the graph passes (Tarjan's SCCs, iterative), nullable
 * and productive fixpoints in SCC order, plus the copies made.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/grammar/grammar_internal.h"

typedef struct graph {
    int n;
    int32_t *first, *to, *pos; /* CSR: edges of rule r are first[r] .. first[r + 1] */
} graph;

static void graph_free(graph *g)
{
    free(g->first);
    free(g->to);
    free(g->pos);
    *g = (graph){0};
}

/* Edges r -> rule of each GE_REF in r (left_only: only those preceded by nullable refs). */
static int build_graph(const glow *w, const uint8_t *nullable, bool left_only, graph *g)
{
    int n = w->ralt.n / 2;
    g->n = n;
    g->first = calloc((size_t)n + 1, sizeof(int32_t));
    g->to = malloc((size_t)(w->el.n + 1) * sizeof(int32_t));
    g->pos = malloc((size_t)(w->el.n + 1) * sizeof(int32_t));
    if (!g->first || !g->to || !g->pos) {
        graph_free(g);
        return deras_fail(DERAS_ENOMEM, "grammar: out of memory");
    }
    int m = 0;
    for (int r = 0; r < n; r++) {
        g->first[r] = m;
        for (int a = 0; a < w->ralt.v[2 * r + 1]; a++) {
            for (int p = w->alt.v[w->ralt.v[2 * r] + a]; GE_KIND(w->el.v[p]) != GE_END; p++) {
                int e = w->el.v[p];
                if (GE_KIND(e) == GE_REF) {
                    g->to[m] = GE_ARG(e);
                    g->pos[m++] = p;
                }
                if (left_only && (GE_KIND(e) == GE_BYTES || !nullable[GE_ARG(e)]))
                    break;
            }
        }
    }
    g->first[n] = m;
    return DERAS_OK;
}

/* Tarjan's strongly connected components, iteratively. comp[r] = component id; ids come
 * out in reverse topological order (a component's callees before it). order[] lists the
 * rules component by component in that order. Returns the number of components. */
static int tarjan(const graph *g, int32_t *comp, int32_t *order)
{
    int n = g->n, idx = 0, n_comp = 0, sp = 0, cs = 0, n_order = 0;
    int32_t *index = malloc((size_t)n * sizeof(int32_t)), *low = malloc((size_t)n * sizeof(int32_t));
    int32_t *stack = malloc((size_t)n * sizeof(int32_t)), *call = malloc((size_t)n * sizeof(int32_t));
    int32_t *edge = malloc((size_t)n * sizeof(int32_t));
    uint8_t *on = calloc((size_t)n, 1);
    if (!index || !low || !stack || !call || !edge || !on) {
        n_comp = -1;
        goto done;
    }
    for (int r = 0; r < n; r++)
        index[r] = -1;
    for (int s = 0; s < n; s++) {
        if (index[s] >= 0)
            continue;
        call[cs] = s;
        edge[cs++] = g->first[s];
        index[s] = low[s] = idx++;
        stack[sp++] = s;
        on[s] = 1;
        while (cs > 0) {
            int v = call[cs - 1];
            if (edge[cs - 1] < g->first[v + 1]) {
                int u = g->to[edge[cs - 1]++];
                if (index[u] < 0) {
                    index[u] = low[u] = idx++;
                    stack[sp++] = u;
                    on[u] = 1;
                    call[cs] = u;
                    edge[cs++] = g->first[u];
                } else if (on[u] && index[u] < low[v]) {
                    low[v] = index[u];
                }
                continue;
            }
            if (low[v] == index[v]) {
                int u;
                do {
                    u = stack[--sp];
                    on[u] = 0;
                    comp[u] = n_comp;
                    order[n_order++] = u;
                } while (u != v);
                n_comp++;
            }
            cs--;
            if (cs > 0 && low[v] < low[call[cs - 1]])
                low[call[cs - 1]] = low[v];
        }
    }
done:
    free(index);
    free(low);
    free(stack);
    free(call);
    free(edge);
    free(on);
    return n_comp;
}

static const char *rule_name(const glow *w, int r)
{
    return w->name[r] ? w->name[r] : "(a group, class or repetition)";
}

static bool set_empty(const glow *w, int s)
{
    for (int k = 0; k < 8; k++)
        if (w->set.v[8 * s + k])
            return false;
    return true;
}

/* nullable (kind 0) or productive (kind 1) per rule, to a fixpoint in SCC order. */
static void fixpoint(const glow *w, const int32_t *order, const int32_t *comp, int kind,
                     uint8_t *val)
{
    int n = w->ralt.n / 2;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && comp[order[j]] == comp[order[i]])
            j++;
        bool changed = true;
        while (changed) {
            changed = false;
            for (int k = i; k < j; k++) {
                int r = order[k];
                if (val[r])
                    continue;
                for (int a = 0; a < w->ralt.v[2 * r + 1] && !val[r]; a++) {
                    bool ok = true;
                    for (int p = w->alt.v[w->ralt.v[2 * r] + a]; ok && GE_KIND(w->el.v[p]) != GE_END;
                         p++) {
                        int e = w->el.v[p];
                        if (GE_KIND(e) == GE_BYTES)
                            ok = kind == 1 && !set_empty(w, GE_ARG(e));
                        else
                            ok = val[GE_ARG(e)];
                    }
                    if (ok)
                        val[r] = changed = 1;
                }
            }
        }
        i = j;
    }
}

static void mark_reachable(const glow *w, const graph *g, int root, uint8_t *reach, int32_t *stack)
{
    int sp = 0;
    memset(reach, 0, (size_t)g->n);
    reach[root] = 1;
    stack[sp++] = root;
    while (sp) {
        int r = stack[--sp];
        for (int e = g->first[r]; e < g->first[r + 1]; e++)
            if (!reach[g->to[e]]) {
                reach[g->to[e]] = 1;
                stack[sp++] = g->to[e];
            }
    }
    (void)w;
}

/* Copy rule r as a new rule (its self-references to the copy); *id the copy. */
static int clone_rule(glow *w, int r, int *id, gb_vec *sites)
{
    int c, rc = glow_new_rule(w, &c);
    if (rc)
        return rc;
    int first = w->ralt.v[2 * r], n_alt = w->ralt.v[2 * r + 1];
    w->ralt.v[2 * c] = w->alt.n;
    w->ralt.v[2 * c + 1] = n_alt;
    for (int a = 0; a < n_alt && !rc; a++) {
        rc = gb_push(&w->alt, w->el.n);
        for (int p = w->alt.v[first + a];; p++) {
            int e = w->el.v[p];
            if (GE_KIND(e) == GE_REF && GE_ARG(e) == r)
                e = GE_MAKE(GE_REF, c);
            else if (GE_KIND(e) == GE_REF && (rc = gb_push(&sites[GE_ARG(e)], w->el.n)))
                break;
            if (rc || (rc = gb_push(&w->el, e)) || GE_KIND(e) == GE_END)
                break;
        }
    }
    *id = c;
    return rc;
}

static int rule_size(const glow *w, int r)
{
    int first = w->ralt.v[2 * r], n_alt = w->ralt.v[2 * r + 1], size = 0;
    for (int a = 0; a < n_alt; a++) {
        int p = w->alt.v[first + a];
        while (GE_KIND(w->el.v[p]) != GE_END)
            p++;
        size += p - w->alt.v[first + a] + 1;
    }
    return size;
}

/* Copies per call site (header comment). sites[r]: positions of GE_REF r outside r. */
static int specialize(glow *w, int root, const int32_t *order, const int32_t *comp,
                      const graph *g, const uint8_t *reach)
{
    int n = w->ralt.n / 2, rc = DERAS_OK;
    long budget = 16L * w->el.n + (1 << 16);
    if (budget > w->lim.max_elements)
        budget = w->lim.max_elements;
    gb_vec *sites = calloc((size_t)n, sizeof *sites);
    uint8_t *single = calloc((size_t)n, 1); /* its component is itself alone */
    long *expand = malloc((size_t)(n ? n : 1) * sizeof *expand);
    if (!sites || !single || !expand) {
        rc = deras_fail(DERAS_ENOMEM, "grammar: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++)
        single[order[i]] = (i == 0 || comp[order[i - 1]] != comp[order[i]]) &&
                           (i + 1 == n || comp[order[i + 1]] != comp[order[i]]);
    for (int r = 0; r < n && !rc; r++)
        if (reach[r])
            for (int e = g->first[r]; e < g->first[r + 1] && !rc; e++)
                if (g->to[e] != r)
                    rc = gb_push(&sites[g->to[e]], g->pos[e]);
    /* expand[r]: the elements one more copy of r costs once the rules it calls are copied
     * along, as they will be (each copy of r is one more call site of each): its own size
     * plus its callees' expansions (recursive ones are never copied: a call into one is its
     * reference alone); callees come first in `order`; saturates above the budget. Deciding
     * by it rather than by r's own size keeps a rule called from many places whose copies
     * would exhaust the budget (an object under x{0,20}) shared, so that the small rules
     * under it (strings, numbers), where most tokens cross a rule's end, are still copied
     * per call site inside it. */
    for (int i = 0; i < n; i++) {
        int r = order[i];
        long size = rule_size(w, r);
        for (int e = g->first[r]; single[r] && e < g->first[r + 1] && size <= budget; e++)
            if (g->to[e] != r && single[g->to[e]])
                size += expand[g->to[e]];
        expand[r] = size <= budget ? size : budget + 1;
    }
    for (int i = n - 1; i >= 0 && !rc; i--) { /* callers first */
        int r = order[i];
        if (r == root || !reach[r] || !single[r] || sites[r].n < 2)
            continue;
        if (expand[r] > (budget - w->el.n) / (sites[r].n - 1))
            continue; /* too big for what is left: this one stays shared (still correct) */
        for (int s = 1; s < sites[r].n && !rc; s++) {
            int c = -1;
            rc = clone_rule(w, r, &c, sites);
            if (rc == DERAS_ERANGE) { /* out of rules: likewise */
                deras_errclear();
                rc = DERAS_OK;
                goto done;
            }
            w->el.v[sites[r].v[s]] = GE_MAKE(GE_REF, c);
        }
    }
done:
    for (int r = 0; sites && r < n; r++)
        gb_vec_free(&sites[r]);
    free(sites);
    free(single);
    free(expand);
    return rc;
}

static int freeze(glow *w, int root, const uint8_t *nullable0, int n_rules0, grammar_t **out)
{
    int n = w->ralt.n / 2;
    grammar_t *g = calloc(1, sizeof *g);
    if (!g)
        return deras_fail(DERAS_ENOMEM, "grammar: out of memory");
    g->n_el = w->el.n;
    g->n_alt = w->alt.n;
    g->n_rules = n;
    g->n_sets = w->set.n / 8;
    g->root = root;
    g->el = w->el.v;
    g->alt = w->alt.v;
    g->ralt = w->ralt.v;
    g->name = w->name;
    w->el = w->alt = w->ralt = (gb_vec){0};
    w->name = NULL;
    g->rule_of = malloc((size_t)g->n_el * sizeof(int32_t));
    g->set = malloc((size_t)(g->n_sets ? g->n_sets : 1) * 4 * sizeof(uint64_t));
    g->nullable = calloc((size_t)n, 1);
    g->reachable = calloc((size_t)n, 1);
    int32_t *stack = malloc((size_t)n * sizeof(int32_t));
    graph gr = {0};
    int rc = DERAS_OK;
    if (!g->rule_of || !g->set || !g->nullable || !g->reachable || !stack) {
        rc = deras_fail(DERAS_ENOMEM, "grammar: out of memory");
        goto done;
    }
    for (int s = 0; s < g->n_sets; s++)
        for (int k = 0; k < 4; k++)
            g->set[4 * s + k] = (uint64_t)(uint32_t)w->set.v[8 * s + 2 * k] |
                                (uint64_t)(uint32_t)w->set.v[8 * s + 2 * k + 1] << 32;
    for (int r = 0; r < n; r++)
        for (int a = 0; a < g->ralt[2 * r + 1]; a++)
            for (int p = g->alt[g->ralt[2 * r] + a];; p++) {
                g->rule_of[p] = r;
                if (GE_KIND(g->el[p]) == GE_END)
                    break;
            }
    /* copies are nullable as their originals: recompute over the final rules instead */
    glow tmp = {.el = {.v = g->el, .n = g->n_el}, .alt = {.v = g->alt, .n = g->n_alt},
                .ralt = {.v = g->ralt, .n = 2 * n}};
    if ((rc = build_graph(&tmp, NULL, false, &gr)))
        goto done;
    mark_reachable(&tmp, &gr, root, g->reachable, stack);
    memcpy(g->nullable, nullable0, (size_t)n_rules0);
    for (bool changed = true; changed;) { /* copies only: converges in a pass or two */
        changed = false;
        for (int r = n_rules0; r < n; r++) {
            if (g->nullable[r])
                continue;
            for (int a = 0; a < g->ralt[2 * r + 1] && !g->nullable[r]; a++) {
                bool ok = true;
                for (int p = g->alt[g->ralt[2 * r] + a]; ok && GE_KIND(g->el[p]) != GE_END; p++)
                    ok = GE_KIND(g->el[p]) == GE_REF && g->nullable[GE_ARG(g->el[p])];
                if (ok)
                    g->nullable[r] = changed = 1;
            }
        }
    }
    for (int p = 0; p < g->n_el; p++)
        if (GE_KIND(g->el[p]) == GE_BYTES && g->reachable[g->rule_of[p]])
            g->n_terminals++;
    g->bytes = sizeof *g + (size_t)g->n_el * 8 + (size_t)g->n_alt * 4 + (size_t)n * 10 +
               (size_t)g->n_sets * 32;
done:
    graph_free(&gr);
    free(stack);
    if (rc)
        grammar_destroy(&g);
    *out = g;
    return rc;
}

int glow_finish(glow *w, int root, grammar_t **out)
{
    int n = w->ralt.n / 2, rc = DERAS_OK;
    graph calls = {0}, left = {0};
    int32_t *comp = malloc((size_t)n * sizeof(int32_t)), *order = malloc((size_t)n * sizeof(int32_t));
    int32_t *lcomp = malloc((size_t)n * sizeof(int32_t)), *lorder = malloc((size_t)n * sizeof(int32_t));
    uint8_t *nullable = calloc((size_t)n, 1), *productive = calloc((size_t)n, 1);
    uint8_t *reach = calloc((size_t)n, 1);
    if (!comp || !order || !lcomp || !lorder || !nullable || !productive || !reach) {
        rc = deras_fail(DERAS_ENOMEM, "grammar: out of memory");
        goto done;
    }
    if ((rc = build_graph(w, NULL, false, &calls)))
        goto done;
    if (tarjan(&calls, comp, order) < 0) {
        rc = deras_fail(DERAS_ENOMEM, "grammar: out of memory");
        goto done;
    }
    fixpoint(w, order, comp, 0, nullable);
    fixpoint(w, order, comp, 1, productive);
    mark_reachable(w, &calls, root, reach, lorder);
    for (int r = 0; r < n; r++)
        if (reach[r] && !productive[r]) {
            rc = deras_fail(DERAS_EUNSUPPORTED, "grammar: rule %s can never be completed (every "
                            "alternative needs itself or matches nothing)", rule_name(w, r));
            goto done;
        }
    if ((rc = build_graph(w, nullable, true, &left)))
        goto done;
    if (tarjan(&left, lcomp, lorder) < 0) {
        rc = deras_fail(DERAS_ENOMEM, "grammar: out of memory");
        goto done;
    }
    for (int r = 0; r < n; r++) {
        if (!reach[r])
            continue;
        for (int e = left.first[r]; e < left.first[r + 1]; e++) {
            int s = left.to[e], p = left.pos[e];
            bool tail = GE_KIND(w->el.v[p + 1]) == GE_END;
            if (!tail && lcomp[s] == lcomp[r]) {
                rc = deras_fail(DERAS_EUNSUPPORTED, "grammar: left recursion through rule %s "
                                "(rewrite it right-recursive or with repetition)", rule_name(w, s));
                goto done;
            }
        }
    }
    if ((rc = specialize(w, root, order, comp, &calls, reach)))
        goto done;
    rc = freeze(w, root, nullable, n, out);
done:
    graph_free(&calls);
    graph_free(&left);
    free(comp);
    free(order);
    free(lcomp);
    free(lorder);
    free(nullable);
    free(productive);
    free(reach);
    glow_free(w);
    return rc;
}
