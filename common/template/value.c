/* SPDX-License-Identifier: Apache-2.0 */
/* value.c - see value.h: allocation charged to the render, reference counts, strings,
 * lists, dicts (insertion-ordered, with an open-addressing index once they pass 8 keys),
 * Python's ==, < and truth, and the conversion of the JSON context.
 *
 * Hashes follow Python's equality: 1, 1.0 and True hash alike, so dict keys that Python
 * would merge merge here too. The walks (==, <, free, from_json) recurse, bounded by the
 * nesting depth every container records when it is built (max_depth).
 */
#include "value.h"

#include "common/base/status.h"
#include "render.h"
#include "unicode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- memory --- */

void *tv_alloc(struct rx *rx, size_t n)
{
    if (rx) {
        if (n > rx->lim.max_memory || rx->mem_live > rx->lim.max_memory - n) {
            deras_fail(DERAS_ENOMEM, "memory budget of %zu bytes exhausted", rx->lim.max_memory);
            return NULL;
        }
        rx->mem_live += n;
    }
    void *p = malloc(n ? n : 1);
    if (!p) {
        if (rx)
            rx->mem_live -= n;
        deras_fail(DERAS_ENOMEM, "out of memory");
    }
    return p;
}

void *tv_realloc(struct rx *rx, void *p, size_t old_n, size_t new_n)
{
    if (rx && new_n > old_n) {
        size_t more = new_n - old_n;
        if (more > rx->lim.max_memory || rx->mem_live > rx->lim.max_memory - more) {
            deras_fail(DERAS_ENOMEM, "memory budget of %zu bytes exhausted", rx->lim.max_memory);
            return NULL;
        }
    }
    void *q = realloc(p, new_n ? new_n : 1);
    if (!q) {
        deras_fail(DERAS_ENOMEM, "out of memory");
        return NULL;
    }
    if (rx)
        rx->mem_live = rx->mem_live - old_n + new_n;
    return q;
}

void tv_free(struct rx *rx, void *p, size_t n)
{
    if (!p)
        return;
    if (rx)
        rx->mem_live -= n;
    free(p);
}

/* --- references --- */

tv tv_ref(tv v)
{
    if (tv_is_heap(&v) && v.u.obj->refs != TV_IMMORTAL)
        v.u.obj->refs++;
    return v;
}

static void free_list(struct rx *rx, struct tlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        tv_release(rx, &l->v[i]);
    tv_free(rx, l->v, l->cap * sizeof(tv));
    tv_free(rx, l, sizeof *l);
}

static void free_dict(struct rx *rx, struct tdict *d)
{
    for (size_t i = 0; i < d->n; i++) {
        tv_release(rx, &d->k[i]);
        tv_release(rx, &d->v[i]);
    }
    tv_free(rx, d->k, d->cap * sizeof(tv));
    tv_free(rx, d->v, d->cap * sizeof(tv));
    tv_free(rx, d->idx, d->idx_cap * sizeof(uint32_t));
    tv_free(rx, d, sizeof *d);
}

void tv_release(struct rx *rx, tv *v)
{
    if (tv_is_heap(v) && v->u.obj->refs != TV_IMMORTAL && --v->u.obj->refs == 0) {
        switch (v->type) {
        case TV_STR: tv_free(rx, v->u.s, sizeof(struct tstr) + v->u.s->len + 1); break;
        case TV_LIST:
        case TV_TUPLE: free_list(rx, v->u.l); break;
        case TV_DICT:
        case TV_NS: free_dict(rx, v->u.d); break;
        case TV_METHOD:
            tv_release(rx, &v->u.m->self);
            tv_free(rx, v->u.m, sizeof *v->u.m);
            break;
        case TV_LOOP: {
            struct tloop *lp = v->u.loop;
            tv_free(rx, lp->verdict, lp->n_verdict);
            tv_release(rx, &lp->seq);
            tv_release(rx, &lp->prev);
            tv_free(rx, lp, sizeof *lp);
            break;
        }
        }
    }
    v->type = TV_EMPTY;
}

/* --- strings --- */

int tv_str(struct rx *rx, const char *p, size_t n, tv *out)
{
    if (rx && n > rx->lim.max_output)
        return deras_fail(DERAS_ERANGE, "a string of %zu bytes passes max_output (%zu)", n,
                          rx->lim.max_output);
    struct tstr *s = tv_alloc(rx, sizeof *s + n + 1);
    if (!s)
        return DERAS_ENOMEM;
    s->refs = 1;
    s->len = n;
    bool ascii = true;
    for (size_t i = 0; i < n; i++)
        ascii &= (unsigned char)p[i] < 0x80;
    s->ascii = ascii;
    if (n)
        memcpy(s->p, p, n);
    s->p[n] = 0;
    *out = (tv){.type = TV_STR, .u.s = s};
    return 0;
}

/* --- lists --- */

static int depth_of(const tv *v)
{
    switch (v->type) {
    case TV_LIST:
    case TV_TUPLE: return v->u.l->depth;
    case TV_DICT: return v->u.d->depth;
    case TV_NS:
    case TV_METHOD:
    case TV_LOOP: return 1;
    default: return 0;
    }
}

static int check_depth(struct rx *rx, int d)
{
    if (rx && d > rx->lim.max_depth)
        return deras_fail(DERAS_EUNSUPPORTED, "values nested deeper than max_depth (%d)",
                          rx->lim.max_depth);
    return 0;
}

int tv_list_new(struct rx *rx, int type, size_t cap, tv *out)
{
    struct tlist *l = tv_alloc(rx, sizeof *l);
    if (!l)
        return DERAS_ENOMEM;
    *l = (struct tlist){.refs = 1, .depth = 1};
    if (cap) {
        l->v = tv_alloc(rx, cap * sizeof(tv));
        if (!l->v) {
            tv_free(rx, l, sizeof *l);
            return DERAS_ENOMEM;
        }
        l->cap = cap;
    }
    *out = (tv){.type = (uint8_t)type, .u.l = l};
    return 0;
}

int tv_list_push(struct rx *rx, tv *list, tv item)
{
    struct tlist *l = list->u.l;
    int d = depth_of(&item) + 1;
    int st = check_depth(rx, d);
    if (st) {
        tv_release(rx, &item);
        return st;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tv *v = tv_realloc(rx, l->v, l->cap * sizeof(tv), cap * sizeof(tv));
        if (!v) {
            tv_release(rx, &item);
            return DERAS_ENOMEM;
        }
        l->v = v;
        l->cap = cap;
    }
    if (d > l->depth)
        l->depth = (uint16_t)d;
    l->v[l->n++] = item;
    return 0;
}

/* --- dicts --- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* Python-consistent hash; false for unhashable values (list, dict). */
static bool hash_of(const tv *k, uint64_t *h)
{
    switch (k->type) {
    case TV_STR: {
        uint64_t x = 1469598103934665603ULL;
        for (size_t i = 0; i < k->u.s->len; i++)
            x = (x ^ (unsigned char)k->u.s->p[i]) * 1099511628211ULL;
        *h = x;
        return true;
    }
    case TV_INT: *h = mix((uint64_t)k->u.i); return true;
    case TV_BOOL: *h = mix((uint64_t)k->u.b); return true;
    case TV_FLOAT: {
        double f = k->u.f;
        if (f == floor(f) && fabs(f) < 9.2e18) {
            *h = mix((uint64_t)(int64_t)f);
        } else {
            uint64_t bits;
            memcpy(&bits, &f, sizeof bits);
            *h = mix(bits);
        }
        return true;
    }
    case TV_TUPLE: {
        uint64_t x = 0x345678;
        for (size_t i = 0; i < k->u.l->n; i++) {
            uint64_t e;
            if (!hash_of(&k->u.l->v[i], &e))
                return false;
            x = mix(x ^ e) + i;
        }
        *h = x;
        return true;
    }
    case TV_LIST:
    case TV_DICT: return false;
    case TV_MACRO: *h = mix((uint64_t)(uintptr_t)k->u.macro); return true;
    case TV_NS:
    case TV_METHOD:
    case TV_LOOP: *h = mix((uint64_t)(uintptr_t)k->u.obj); return true;
    default: *h = mix(k->type); return true;
    }
}

int tv_dict_new(struct rx *rx, int type, size_t cap, tv *out)
{
    struct tdict *d = tv_alloc(rx, sizeof *d);
    if (!d)
        return DERAS_ENOMEM;
    *d = (struct tdict){.refs = 1, .depth = 1};
    *out = (tv){.type = (uint8_t)type, .u.d = d};
    if (cap) { /* the known size (a JSON object, a literal): no regrowth */
        d->k = tv_alloc(rx, cap * sizeof(tv));
        d->v = d->k ? tv_alloc(rx, cap * sizeof(tv)) : NULL;
        if (!d->v) {
            tv_free(rx, d->k, d->k ? cap * sizeof(tv) : 0);
            tv_free(rx, d, sizeof *d);
            *out = (tv){0};
            return DERAS_ENOMEM;
        }
        d->cap = cap;
    }
    return 0;
}

static const tv *dict_find(const struct tdict *d, const tv *key, size_t *pos)
{
    if (!d->idx) {
        for (size_t i = 0; i < d->n; i++)
            if (tv_eq(&d->k[i], key)) {
                *pos = i;
                return &d->v[i];
            }
        return NULL;
    }
    uint64_t h;
    if (!hash_of(key, &h))
        return NULL;
    size_t mask = d->idx_cap - 1;
    for (size_t j = h & mask; d->idx[j]; j = (j + 1) & mask) {
        size_t i = d->idx[j] - 1;
        if (tv_eq(&d->k[i], key)) {
            *pos = i;
            return &d->v[i];
        }
    }
    return NULL;
}

static int reindex(struct rx *rx, struct tdict *d, size_t cap)
{
    uint32_t *idx = tv_alloc(rx, cap * sizeof *idx);
    if (!idx)
        return DERAS_ENOMEM;
    memset(idx, 0, cap * sizeof *idx);
    for (size_t i = 0; i < d->n; i++) {
        uint64_t h;
        hash_of(&d->k[i], &h);
        size_t j = h & (cap - 1);
        while (idx[j])
            j = (j + 1) & (cap - 1);
        idx[j] = (uint32_t)(i + 1);
    }
    tv_free(rx, d->idx, d->idx_cap * sizeof *d->idx);
    d->idx = idx;
    d->idx_cap = cap;
    return 0;
}

int tv_dict_set(struct rx *rx, tv *dict, tv k, tv v)
{
    struct tdict *d = dict->u.d;
    uint64_t h;
    int st = 0;
    if (!hash_of(&k, &h)) {
        st = deras_fail(DERAS_EFORMAT, "unhashable type: '%s'", tv_typename(&k));
        goto fail;
    }
    int dep = depth_of(&v) + 1;
    if (depth_of(&k) + 1 > dep)
        dep = depth_of(&k) + 1;
    if (dict->type == TV_DICT && (st = check_depth(rx, dep)))
        goto fail;
    size_t pos;
    if (dict_find(d, &k, &pos)) {
        tv_release(rx, &k); /* Python keeps the first key object */
        tv_release(rx, &d->v[pos]);
        d->v[pos] = v;
    } else {
        if (d->n == d->cap) {
            size_t cap = d->cap ? d->cap * 2 : 4;
            tv *nk = tv_alloc(rx, cap * sizeof(tv));
            tv *nv = nk ? tv_alloc(rx, cap * sizeof(tv)) : NULL;
            if (!nv) {
                tv_free(rx, nk, cap * sizeof(tv));
                st = DERAS_ENOMEM;
                goto fail;
            }
            if (d->n) {
                memcpy(nk, d->k, d->n * sizeof(tv));
                memcpy(nv, d->v, d->n * sizeof(tv));
            }
            tv_free(rx, d->k, d->cap * sizeof(tv));
            tv_free(rx, d->v, d->cap * sizeof(tv));
            d->k = nk;
            d->v = nv;
            d->cap = cap;
        }
        d->k[d->n] = k;
        d->v[d->n] = v;
        d->n++;
        if (d->n > 8 && d->n * 2 > d->idx_cap) {
            if ((st = reindex(rx, d, d->idx_cap ? d->idx_cap * 2 : 32)))
                return st; /* the entry is in; only the index is missing */
        } else if (d->idx) {
            size_t j = h & (d->idx_cap - 1);
            while (d->idx[j])
                j = (j + 1) & (d->idx_cap - 1);
            d->idx[j] = (uint32_t)d->n;
        }
    }
    if (dep > d->depth)
        d->depth = (uint16_t)dep;
    return 0;
fail:
    tv_release(rx, &k);
    tv_release(rx, &v);
    return st;
}

void tv_dict_clear(struct rx *rx, tv *dict)
{
    struct tdict *d = dict->u.d;
    size_t n = d->n;
    d->n = 0; /* first: a release below may reach this dict again through a cycle */
    for (size_t i = 0; i < n; i++) {
        tv_release(rx, &d->k[i]);
        tv_release(rx, &d->v[i]);
    }
    if (d->idx)
        memset(d->idx, 0, d->idx_cap * sizeof *d->idx);
}

const tv *tv_dict_get(const tv *dict, const tv *key)
{
    size_t pos;
    return dict_find(dict->u.d, key, &pos);
}

const tv *tv_dict_get_str(const tv *dict, const char *p, size_t n)
{
    _Alignas(struct tstr) char buf[sizeof(struct tstr) + 64]; /* short keys: no allocation */
    struct tstr *s = n < 64 ? (struct tstr *)buf : malloc(sizeof *s + n + 1);
    if (!s)
        return NULL;
    s->refs = TV_IMMORTAL;
    s->len = n;
    s->ascii = false; /* not used by lookups */
    memcpy(s->p, p, n);
    s->p[n] = 0;
    tv k = {.type = TV_STR, .u.s = s};
    const tv *r = tv_dict_get(dict, &k);
    if (n >= 64)
        free(s);
    return r;
}

/* --- Python semantics --- */

bool tv_truthy(const tv *v)
{
    switch (v->type) {
    case TV_EMPTY:
    case TV_UNDEF:
    case TV_NONE: return false;
    case TV_BOOL: return v->u.b;
    case TV_INT: return v->u.i != 0;
    case TV_FLOAT: return v->u.f != 0.0;
    case TV_STR: return v->u.s->len > 0;
    case TV_LIST:
    case TV_TUPLE: return v->u.l->n > 0 || v->u.l->view == VIEW_GEN;
    case TV_DICT: return v->u.d->n > 0;
    default: return true;
    }
}

/* Numeric value of an int, bool or float: as an int when exact. */
static bool as_int(const tv *v, int64_t *i)
{
    if (v->type == TV_INT) {
        *i = v->u.i;
        return true;
    }
    if (v->type == TV_BOOL) {
        *i = v->u.b;
        return true;
    }
    return false;
}

/* Python's exact int/float comparisons: -1, 0, 1, or 2 when unordered (NaN). */
static int num_cmp(const tv *a, const tv *b)
{
    int64_t x, y;
    bool ai = as_int(a, &x), bi = as_int(b, &y);
    if (ai && bi)
        return x < y ? -1 : x > y;
    long double fa = ai ? (long double)x : (long double)a->u.f;
    long double fb = bi ? (long double)y : (long double)b->u.f;
    if (isnan(fa) || isnan(fb))
        return 2;
    return fa < fb ? -1 : fa > fb;
}

bool tv_eq(const tv *a, const tv *b)
{
    if (tv_is_num(a) && tv_is_num(b))
        return num_cmp(a, b) == 0;
    if (a->type != b->type)
        return false;
    switch (a->type) {
    case TV_UNDEF:
    case TV_NONE:
    case TV_EMPTY: return true;
    case TV_STR:
        return a->u.s->len == b->u.s->len && memcmp(a->u.s->p, b->u.s->p, a->u.s->len) == 0;
    case TV_LIST:
    case TV_TUPLE: {
        const struct tlist *x = a->u.l, *y = b->u.l;
        if (x->view == VIEW_GEN || y->view == VIEW_GEN)
            return x == y;
        if ((x->view == VIEW_NONE) != (y->view == VIEW_NONE) || x->n != y->n)
            return false;
        for (size_t i = 0; i < x->n; i++)
            if (!tv_eq(&x->v[i], &y->v[i]))
                return false;
        return true;
    }
    case TV_DICT: {
        const struct tdict *x = a->u.d;
        if (x->n != b->u.d->n)
            return false;
        for (size_t i = 0; i < x->n; i++) {
            const tv *w = tv_dict_get(b, &x->k[i]);
            if (!w || !tv_eq(&x->v[i], w))
                return false;
        }
        return true;
    }
    case TV_MACRO: return a->u.macro == b->u.macro;
    case TV_FUNC: return a->sub == b->sub;
    case TV_METHOD:
        return a->u.m->id == b->u.m->id && a->u.m->self.type == b->u.m->self.type &&
               (!tv_is_heap(&a->u.m->self) || a->u.m->self.u.obj == b->u.m->self.u.obj);
    default: return a->u.obj == b->u.obj;
    }
}

int tv_lt(const tv *a, const tv *b, bool *lt)
{
    if (tv_is_num(a) && tv_is_num(b)) {
        *lt = num_cmp(a, b) == -1;
        return 0;
    }
    if (a->type == TV_STR && b->type == TV_STR) {
        size_t n = a->u.s->len < b->u.s->len ? a->u.s->len : b->u.s->len;
        int c = memcmp(a->u.s->p, b->u.s->p, n);
        *lt = c < 0 || (c == 0 && a->u.s->len < b->u.s->len);
        return 0;
    }
    if (a->type == b->type && tv_is_seq(a)) {
        const struct tlist *x = a->u.l, *y = b->u.l;
        for (size_t i = 0; i < x->n && i < y->n; i++)
            if (!tv_eq(&x->v[i], &y->v[i]))
                return tv_lt(&x->v[i], &y->v[i], lt);
        *lt = x->n < y->n;
        return 0;
    }
    if (a->type == TV_UNDEF || b->type == TV_UNDEF) {
        const tv *u = a->type == TV_UNDEF ? a : b;
        if (u->u.name)
            return deras_fail(DERAS_EFORMAT, "'%s' is undefined", u->u.name);
        return deras_fail(DERAS_EFORMAT, "an undefined value cannot be compared");
    }
    return deras_fail(DERAS_EFORMAT, "'<' not supported between instances of '%s' and '%s'",
                      tv_typename(a), tv_typename(b));
}

const char *tv_typename(const tv *v)
{
    switch (v->type) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return v->markup ? "Markup" : "str";
    case TV_LIST:
        switch (v->u.l->view) {
        case VIEW_RANGE: return "range";
        case VIEW_ITEMS: return "dict_items";
        case VIEW_KEYS: return "dict_keys";
        case VIEW_VALUES: return "dict_values";
        case VIEW_GEN: return "generator";
        default: return "list";
        }
    case TV_TUPLE: return "tuple";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_MACRO: return "Macro";
    case TV_FUNC: return "function";
    case TV_METHOD: return "builtin_function_or_method";
    case TV_LOOP: return "LoopContext";
    default: return "?";
    }
}

static int from_json(struct rx *rx, const json_t *j, int depth, tv *out)
{
    int st;
    if (rx && depth > rx->lim.max_depth)
        return deras_fail(DERAS_EUNSUPPORTED, "context nested deeper than max_depth (%d)",
                          rx->lim.max_depth);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        if ((st = tv_dict_new(rx, TV_DICT, json_object_size(j), out)))
            return st;
        const char *key;
        size_t klen;
        json_t *val;
        json_object_keylen_foreach((json_t *)j, key, klen, val) {
            tv k, v;
            if ((st = tv_str(rx, key, klen, &k)))
                break;
            if ((st = from_json(rx, val, depth + 1, &v))) {
                tv_release(rx, &k);
                break;
            }
            if ((st = tv_dict_set(rx, out, k, v)))
                break;
        }
        break;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if ((st = tv_list_new(rx, TV_LIST, n, out)))
            return st;
        for (size_t i = 0; i < n && !st; i++) {
            tv v;
            if (!(st = from_json(rx, json_array_get(j, i), depth + 1, &v)))
                st = tv_list_push(rx, out, v);
        }
        break;
    }
    case JSON_STRING: return tv_str(rx, json_string_value(j), json_string_length(j), out);
    case JSON_INTEGER: *out = tv_int(json_integer_value(j)); return 0;
    case JSON_REAL: *out = tv_float(json_real_value(j)); return 0;
    case JSON_TRUE: *out = tv_bool(true); return 0;
    case JSON_FALSE: *out = tv_bool(false); return 0;
    default: *out = tv_none(); return 0;
    }
    if (st)
        tv_release(rx, out);
    return st;
}

int tv_from_json(struct rx *rx, const json_t *j, tv *out)
{
    return from_json(rx, j, 1, out);
}

/* --- sorting --- */

int tv_sort(void *base, size_t n, size_t size, tv_lt_fn lt, void *ctx)
{
    if (n < 2)
        return 0;
    char *a = base, *tmp = malloc(n * size);
    if (!tmp)
        return deras_fail(DERAS_ENOMEM, "out of memory");
    int st = 0;
    for (size_t w = 1; w < n && !st; w *= 2) {
        for (size_t lo = 0; lo < n - w && !st; lo += 2 * w) {
            size_t mid = lo + w, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = 0;
            while (i < mid && j < hi) {
                bool less;
                if ((st = lt(ctx, a + j * size, a + i * size, &less)))
                    break;
                if (less) /* take from the right only when strictly smaller: stable */
                    memcpy(tmp + (k++) * size, a + (j++) * size, size);
                else
                    memcpy(tmp + (k++) * size, a + (i++) * size, size);
            }
            if (st)
                break;
            memcpy(tmp + k * size, a + i * size, (mid - i) * size);
            k += mid - i;
            memcpy(tmp + k * size, a + j * size, (hi - j) * size);
            k += hi - j;
            memcpy(a + lo * size, tmp, k * size);
        }
    }
    free(tmp);
    return st;
}

/* --- string builder --- */

#define SB_HDR offsetof(struct tstr, p)

/* Room for n more bytes and the NUL: to exactly that size (`exact`, a caller that knows
 * its total) or by doubling (appends of unknown count, amortized O(1)). The output bound
 * is checked first. */
static int tsb_room(sbuf *b, size_t n, bool exact)
{
    if (b->rx && n > b->rx->lim.max_output - b->len)
        return deras_fail(DERAS_ERANGE, "output passes max_output (%zu bytes)",
                          b->rx->lim.max_output);
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap;
    if (exact) {
        cap = b->len + n + 1 > 64 ? b->len + n + 1 : 64;
    } else {
        cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
    }
    char *q = tv_realloc(b->rx, b->buf, b->buf ? SB_HDR + b->cap : 0, SB_HDR + cap);
    if (!q)
        return DERAS_ENOMEM;
    b->buf = q;
    b->p = q + SB_HDR;
    b->cap = cap;
    return 0;
}

int tsb_reserve(sbuf *b, size_t n) { return tsb_room(b, n, true); }

int tsb_put(sbuf *b, const char *p, size_t n)
{
    int st = tsb_room(b, n, false);
    if (st)
        return st;
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int tsb_putc(sbuf *b, char c) { return tsb_put(b, &c, 1); }
int tsb_puts(sbuf *b, const char *s) { return tsb_put(b, s, strlen(s)); }

int tsb_putcp(sbuf *b, uint32_t cp)
{
    char tmp[4];
    size_t k = 0;
    if (cp < 0x80) {
        tmp[k++] = (char)cp;
    } else if (cp < 0x800) {
        tmp[k++] = (char)(0xC0 | (cp >> 6));
        tmp[k++] = (char)(0x80 | (cp & 63));
    } else if (cp < 0x10000) {
        tmp[k++] = (char)(0xE0 | (cp >> 12));
        tmp[k++] = (char)(0x80 | ((cp >> 6) & 63));
        tmp[k++] = (char)(0x80 | (cp & 63));
    } else {
        tmp[k++] = (char)(0xF0 | (cp >> 18));
        tmp[k++] = (char)(0x80 | ((cp >> 12) & 63));
        tmp[k++] = (char)(0x80 | ((cp >> 6) & 63));
        tmp[k++] = (char)(0x80 | (cp & 63));
    }
    return tsb_put(b, tmp, k);
}

int tsb_finish(sbuf *b, int st, tv *out)
{
    if (st) {
        tsb_free(b);
        return st;
    }
    return tsb_take(b, out);
}

int tsb_take(sbuf *b, tv *out)
{
    if (!b->buf) {
        int st = tsb_put(b, "", 0);
        if (st)
            return st;
    }
    /* shrink to fit: the string's recorded size must be what was allocated */
    size_t want = SB_HDR + b->len + 1;
    char *q = tv_realloc(b->rx, b->buf, SB_HDR + b->cap, want);
    if (!q) {
        tsb_free(b);
        return DERAS_ENOMEM;
    }
    struct tstr *s = (struct tstr *)q;
    s->refs = 1;
    s->len = b->len;
    bool ascii = true;
    for (size_t i = 0; i < b->len && ascii; i++)
        ascii = (unsigned char)s->p[i] < 0x80;
    s->ascii = ascii;
    *out = (tv){.type = TV_STR, .u.s = s};
    *b = (sbuf){.rx = b->rx};
    return 0;
}

char *tsb_detach(sbuf *b, size_t *len)
{
    if (!b->buf && tsb_put(b, "", 0))
        return NULL;
    memmove(b->buf, b->p, b->len + 1);
    char *r = b->buf;
    *len = b->len;
    if (b->rx)
        b->rx->mem_live -= SB_HDR + b->cap;
    *b = (sbuf){.rx = b->rx};
    return r;
}

void tsb_free(sbuf *b)
{
    tv_free(b->rx, b->buf, b->buf ? SB_HDR + b->cap : 0);
    *b = (sbuf){.rx = b->rx};
}
