/* SPDX-License-Identifier: Apache-2.0 */
/* glower.c - the code-point grammar (gbuild.h) and its lowering to bytes.
 *
 * Classes are kept as sorted, merged code-point ranges without the surrogates (which
 * UTF-8 cannot encode). Lowering turns each class into UTF-8 byte-range sequences, the
 * classic split (as in RE2 and Rust's utf8-ranges): a range is cut at the encoding-length
 * boundaries and then wherever its ends are not aligned on a continuation byte, until each
 * piece is a product of byte ranges. Pieces with equal length and equal trailing ranges are
 * merged on their lead byte. Then:
 *   - all pieces one byte long (an ASCII class): one GE_BYTES element;
 *   - a single piece (a non-ASCII literal character): its bytes inline;
 *   - otherwise a helper rule per occurrence, one alternative per piece (at most ~10 for
 *     a negated class), never shared, so its caller stays known (token_grammar.h).
 * Costs: O(items + ranges log ranges); every element is counted against max_elements.
 */
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"
#include "common/grammar/grammar_internal.h"

int gb_push(gb_vec *a, int32_t x)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 16;
        int32_t *v = realloc(a->v, (size_t)cap * sizeof(int32_t));
        if (!v)
            return deras_fail(DERAS_ENOMEM, "grammar: out of memory");
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return DERAS_OK;
}

void gb_vec_free(gb_vec *a)
{
    free(a->v);
    *a = (gb_vec){0};
}

void gb_init(gbuild *b, const grammar_limits *lim)
{
    *b = (gbuild){.lim = *lim};
}

void gb_free(gbuild *b)
{
    for (int r = 0; r < b->n_rules; r++) {
        free(b->rules[r].name);
        gb_vec_free(&b->rules[r].items);
    }
    free(b->rules);
    gb_vec_free(&b->ranges);
    gb_vec_free(&b->cls);
    b->rules = NULL;
    b->n_rules = 0;
}

static int new_rule(gbuild *b, int *id)
{
    if (b->n_rules >= b->lim.max_rules)
        return deras_fail(DERAS_ERANGE, "grammar: more than max_rules %d rules", b->lim.max_rules);
    if (b->n_rules == b->cap_rules) {
        int cap = b->cap_rules ? b->cap_rules * 2 : 32;
        gb_rule *r = realloc(b->rules, (size_t)cap * sizeof *r);
        if (!r)
            return deras_fail(DERAS_ENOMEM, "grammar: out of memory");
        b->rules = r;
        b->cap_rules = cap;
    }
    b->rules[b->n_rules] = (gb_rule){0};
    *id = b->n_rules++;
    return DERAS_OK;
}

int gb_named(gbuild *b, const char *name, size_t len, int line, int *id)
{
    for (int r = 0; r < b->n_rules; r++) /* O(rules) per name: names are few */
        if (b->rules[r].name && strlen(b->rules[r].name) == len &&
            memcmp(b->rules[r].name, name, len) == 0) {
            *id = r;
            return DERAS_OK;
        }
    int rc = new_rule(b, id);
    if (rc)
        return rc;
    char *s = malloc(len + 1);
    if (!s)
        return deras_fail(DERAS_ENOMEM, "grammar: out of memory");
    memcpy(s, name, len);
    s[len] = 0;
    b->rules[*id].name = s;
    b->rules[*id].line = line;
    return DERAS_OK;
}

int gb_helper(gbuild *b, int *id)
{
    return new_rule(b, id);
}

int gb_item(gbuild *b, int r, int kind, int32_t arg)
{
    if (kind != GB_ALT && ++b->n_items > b->lim.max_elements)
        return deras_fail(DERAS_ERANGE, "grammar: more than max_elements %d elements",
                          b->lim.max_elements);
    int rc = gb_push(&b->rules[r].items, kind);
    return rc ? rc : gb_push(&b->rules[r].items, arg);
}

static int cmp_range(const void *a, const void *b)
{
    uint32_t x = ((const uint32_t *)a)[0], y = ((const uint32_t *)b)[0];
    return x < y ? -1 : x > y;
}

/* Append [lo, hi] minus the surrogates to the class ranges. */
static int add_range(gbuild *b, uint32_t lo, uint32_t hi, int *n)
{
    if (lo <= 0xDFFF && hi >= 0xD800) {
        int rc = DERAS_OK;
        if (lo < 0xD800)
            rc = add_range(b, lo, 0xD7FF, n);
        if (!rc && hi > 0xDFFF)
            rc = add_range(b, 0xE000, hi, n);
        return rc;
    }
    int rc = gb_push(&b->ranges, (int32_t)lo);
    if (!rc && !(rc = gb_push(&b->ranges, (int32_t)hi)))
        (*n)++;
    return rc;
}

int gb_class(gbuild *b, const uint32_t *ranges, int n, bool negate, int *id)
{
    if (n < 0)
        n = 0;
    uint32_t *r = malloc(((size_t)n + 1) * 2 * sizeof(uint32_t));
    if (!r)
        return deras_fail(DERAS_ENOMEM, "grammar: out of memory");
    if (n > 0)
        memcpy(r, ranges, (size_t)n * 2 * sizeof(uint32_t));
    qsort(r, (size_t)n, 2 * sizeof(uint32_t), cmp_range);
    int m = 0; /* merged */
    for (int i = 0; i < n; i++) {
        if (m > 0 && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1])
                r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    int first = b->ranges.n / 2, count = 0, rc = DERAS_OK;
    if (negate) {
        uint32_t next = 0;
        for (int i = 0; i < m && !rc; i++) {
            if (r[2 * i] > next)
                rc = add_range(b, next, r[2 * i] - 1, &count);
            next = r[2 * i + 1] + 1;
        }
        if (!rc && next <= GB_MAX_CP)
            rc = add_range(b, next, GB_MAX_CP, &count);
    } else {
        for (int i = 0; i < m && !rc; i++)
            rc = add_range(b, r[2 * i], r[2 * i + 1], &count);
    }
    free(r);
    if (!rc && !(rc = gb_push(&b->cls, first)))
        rc = gb_push(&b->cls, count);
    *id = b->cls.n / 2 - 1;
    return rc;
}

/* ---- UTF-8 byte-range sequences ---- */

typedef struct u8seq {
    uint8_t len, lo[4], hi[4];
} u8seq;

typedef struct seqs {
    u8seq *v;
    int n, cap;
} seqs;

static int seq_push(seqs *s, const u8seq *q)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        u8seq *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v)
            return deras_fail(DERAS_ENOMEM, "grammar: out of memory");
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = *q;
    return DERAS_OK;
}

/* [lo, hi], all of one encoded length n, as products of byte ranges. */
static int split_same(uint32_t lo, uint32_t hi, int n, seqs *out)
{
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                int rc = split_same(lo, lo | m, n, out);
                return rc ? rc : split_same((lo | m) + 1, hi, n, out);
            }
            if ((hi & m) != m) {
                int rc = split_same(lo, (hi & ~m) - 1, n, out);
                return rc ? rc : split_same(hi & ~m, hi, n, out);
            }
        }
    }
    char a[4], z[4];
    utf8_encode(lo, a);
    utf8_encode(hi, z);
    u8seq q = {.len = (uint8_t)n};
    for (int k = 0; k < n; k++) {
        q.lo[k] = (uint8_t)a[k];
        q.hi[k] = (uint8_t)z[k];
    }
    return seq_push(out, &q);
}

static int split_range(uint32_t lo, uint32_t hi, seqs *out)
{
    static const uint32_t top[4] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int n = 1; n <= 4; n++) {
        uint32_t a = n == 1 ? 0 : top[n - 2] + 1, b = top[n - 1];
        uint32_t l = lo > a ? lo : a, h = hi < b ? hi : b;
        if (l <= h) {
            int rc = split_same(l, h, n, out);
            if (rc)
                return rc;
        }
    }
    return DERAS_OK;
}

/* Order by length, then the trailing ranges, then the lead: equal tails end up adjacent. */
static int cmp_seq(const void *pa, const void *pb)
{
    const u8seq *a = pa, *b = pb;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    for (int k = 1; k < a->len; k++) {
        if (a->lo[k] != b->lo[k])
            return a->lo[k] < b->lo[k] ? -1 : 1;
        if (a->hi[k] != b->hi[k])
            return a->hi[k] < b->hi[k] ? -1 : 1;
    }
    return a->lo[0] < b->lo[0] ? -1 : a->lo[0] > b->lo[0];
}

static void set_range(uint32_t w[8], unsigned lo, unsigned hi)
{
    for (unsigned c = lo; c <= hi; c++)
        w[c >> 5] |= 1u << (c & 31);
}

/* ---- lowering ---- */

int glow_set(glow *w, const uint32_t words[8], int *id)
{
    uint32_t h = 2166136261u;
    for (int k = 0; k < 8; k++)
        h = (h ^ words[k]) * 16777619u;
    int n_sets = w->set.n / 8;
    if (2 * (n_sets + 1) > w->set_hash.n) { /* grow and rehash at half full */
        int cap = w->set_hash.n ? w->set_hash.n * 2 : 64;
        int32_t *t = calloc((size_t)cap, sizeof(int32_t));
        if (!t)
            return deras_fail(DERAS_ENOMEM, "grammar: out of memory");
        for (int s = 0; s < n_sets; s++) {
            uint32_t g = 2166136261u;
            for (int k = 0; k < 8; k++)
                g = (g ^ (uint32_t)w->set.v[8 * s + k]) * 16777619u;
            uint32_t j = g & (uint32_t)(cap - 1);
            while (t[j])
                j = (j + 1) & (uint32_t)(cap - 1);
            t[j] = s + 1;
        }
        free(w->set_hash.v);
        w->set_hash = (gb_vec){.v = t, .n = cap, .cap = cap};
    }
    uint32_t mask = (uint32_t)w->set_hash.n - 1, j = h & mask;
    for (; w->set_hash.v[j]; j = (j + 1) & mask) {
        int s = w->set_hash.v[j] - 1;
        if (memcmp(w->set.v + 8 * s, words, 32) == 0) {
            *id = s;
            return DERAS_OK;
        }
    }
    for (int k = 0; k < 8; k++) {
        int rc = gb_push(&w->set, (int32_t)words[k]);
        if (rc)
            return rc;
    }
    w->set_hash.v[j] = n_sets + 1;
    *id = n_sets;
    return DERAS_OK;
}

static int emit(glow *w, int kind, int arg)
{
    if (w->el.n >= w->lim.max_elements)
        return deras_fail(DERAS_ERANGE, "grammar: more than max_elements %d byte-level elements",
                          w->lim.max_elements);
    return gb_push(&w->el, GE_MAKE(kind, arg));
}

static int emit_range(glow *w, unsigned lo, unsigned hi)
{
    uint32_t words[8] = {0};
    set_range(words, lo, hi);
    int id, rc = glow_set(w, words, &id);
    return rc ? rc : emit(w, GE_BYTES, id);
}

int glow_new_rule(glow *w, int *id)
{
    int r = w->ralt.n / 2;
    if (r >= w->lim.max_rules)
        return deras_fail(DERAS_ERANGE, "grammar: more than max_rules %d rules", w->lim.max_rules);
    if (r >= w->name_cap) {
        int cap = w->name_cap ? w->name_cap * 2 : 64;
        char **nm = realloc(w->name, (size_t)cap * sizeof *nm);
        if (!nm)
            return deras_fail(DERAS_ENOMEM, "grammar: out of memory");
        memset(nm + w->name_cap, 0, (size_t)(cap - w->name_cap) * sizeof *nm);
        w->name = nm;
        w->name_cap = cap;
    }
    int rc = gb_push(&w->ralt, 0);
    if (!rc)
        rc = gb_push(&w->ralt, 0);
    *id = r;
    return rc;
}

/* Class c's pieces, merged (see the header comment), into *s. */
static int class_pieces(const gbuild *b, int c, seqs *s)
{
    int first = b->cls.v[2 * c], count = b->cls.v[2 * c + 1];
    for (int i = 0; i < count; i++) {
        int rc = split_range((uint32_t)b->ranges.v[2 * (first + i)],
                             (uint32_t)b->ranges.v[2 * (first + i) + 1], s);
        if (rc)
            return rc;
    }
    if (s->n > 1)
        qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_seq);
    return DERAS_OK;
}

/* Whether pieces a and b differ only in their lead byte. */
static bool same_tail(const u8seq *a, const u8seq *b)
{
    if (a->len != b->len)
        return false;
    for (int k = 1; k < a->len; k++)
        if (a->lo[k] != b->lo[k] || a->hi[k] != b->hi[k])
            return false;
    return true;
}

/* One alternative per group of pieces with the same tail, into the current rule. */
static int emit_pieces(glow *w, const seqs *s)
{
    for (int i = 0; i < s->n;) {
        int j = i;
        uint32_t lead[8] = {0};
        while (j < s->n && same_tail(&s->v[i], &s->v[j])) {
            set_range(lead, s->v[j].lo[0], s->v[j].hi[0]);
            j++;
        }
        int id, rc = gb_push(&w->alt, w->el.n);
        if (rc || (rc = glow_set(w, lead, &id)) || (rc = emit(w, GE_BYTES, id)))
            return rc;
        for (int k = 1; k < s->v[i].len; k++)
            if ((rc = emit_range(w, s->v[i].lo[k], s->v[i].hi[k])))
                return rc;
        if ((rc = emit(w, GE_END, 0)))
            return rc;
        i = j;
    }
    return DERAS_OK;
}

typedef struct pending {
    int rule, cls;
} pending;

/* Class c at the current position: inline, or a reference to a helper queued in *q. */
static int lower_class(glow *w, const gbuild *b, int c, pending **q, int *nq, int *capq)
{
    seqs s = {0};
    int rc = class_pieces(b, c, &s);
    if (rc)
        goto done;
    bool ascii = s.n == 0 || s.v[s.n - 1].len == 1; /* sorted by length */
    if (ascii) {
        uint32_t words[8] = {0};
        for (int i = 0; i < s.n; i++)
            set_range(words, s.v[i].lo[0], s.v[i].hi[0]);
        int id;
        if (!(rc = glow_set(w, words, &id)))
            rc = emit(w, GE_BYTES, id);
    } else if (s.n == 1) {
        for (int k = 0; k < s.v[0].len && !rc; k++)
            rc = emit_range(w, s.v[0].lo[k], s.v[0].hi[k]);
    } else {
        int h;
        if ((rc = glow_new_rule(w, &h)))
            goto done;
        if (*nq == *capq) {
            int cap = *capq ? *capq * 2 : 16;
            pending *v = realloc(*q, (size_t)cap * sizeof *v);
            if (!v) {
                rc = deras_fail(DERAS_ENOMEM, "grammar: out of memory");
                goto done;
            }
            *q = v;
            *capq = cap;
        }
        (*q)[(*nq)++] = (pending){h, c};
        rc = emit(w, GE_REF, h);
    }
done:
    free(s.v);
    return rc;
}

static int lower_rule(glow *w, const gbuild *b, int r, pending **q, int *nq, int *capq)
{
    const gb_vec *it = &b->rules[r].items;
    w->ralt.v[2 * r] = w->alt.n;
    int n_alts = 1, rc = gb_push(&w->alt, w->el.n);
    for (int k = 0; k + 1 < it->n && !rc; k += 2) {
        int kind = it->v[k], arg = it->v[k + 1];
        if (kind == GB_ALT) {
            if (!(rc = emit(w, GE_END, 0)))
                rc = gb_push(&w->alt, w->el.n);
            n_alts++;
        } else if (kind == GB_REF) {
            rc = emit(w, GE_REF, arg);
        } else {
            rc = lower_class(w, b, arg, q, nq, capq);
        }
    }
    if (!rc)
        rc = emit(w, GE_END, 0);
    w->ralt.v[2 * r + 1] = n_alts;
    return rc;
}

void glow_free(glow *w)
{
    int n_rules = w->ralt.n / 2;
    for (int r = 0; r < n_rules && w->name; r++)
        free(w->name[r]);
    free(w->name);
    gb_vec_free(&w->el);
    gb_vec_free(&w->alt);
    gb_vec_free(&w->ralt);
    gb_vec_free(&w->set);
    gb_vec_free(&w->set_hash);
}

int gb_compile(gbuild *b, int root, grammar_t **out)
{
    glow w = {.lim = b->lim};
    pending *q = NULL;
    int nq = 0, capq = 0, rc = DERAS_OK;
    for (int r = 0; r < b->n_rules && !rc; r++) {
        int id;
        if (!(rc = glow_new_rule(&w, &id))) {
            w.name[id] = b->rules[r].name; /* moved */
            b->rules[r].name = NULL;
        }
    }
    for (int r = 0; r < b->n_rules && !rc; r++) {
        rc = lower_rule(&w, b, r, &q, &nq, &capq);
        for (int i = 0; i < nq && !rc; i++) { /* the class helpers this rule queued */
            seqs s = {0};
            w.ralt.v[2 * q[i].rule] = w.alt.n;
            if (!(rc = class_pieces(b, q[i].cls, &s)))
                rc = emit_pieces(&w, &s);
            w.ralt.v[2 * q[i].rule + 1] = w.alt.n - w.ralt.v[2 * q[i].rule];
            free(s.v);
        }
        nq = 0;
    }
    free(q);
    gb_free(b);
    if (rc) {
        glow_free(&w);
        return rc;
    }
    return glow_finish(&w, root, out);
}
