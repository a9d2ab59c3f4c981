/* filters.c - Jinja2's filters as jinja2/filters.py (3.1) defines them, with
 * transformers' tojson (json.dumps, ensure_ascii=False by default, indent / separators /
 * sort_keys). Filters that return generators in Jinja2 (map, select, reject, selectattr,
 * rejectattr, unique, items, reverse of a list) return a list marked as a generator, so
 * truth, printing and length behave as there. Sorting filters (sort, dictsort, min, max,
 * unique) compare strings case-insensitively unless case_sensitive, as Jinja2 does.
 * Cost: one step per element (n log n for sorts) and per 64 bytes produced.
 */
#include "builtins.h"
#include "render.h"
#include "unicode.h"

#include "common/base/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The bound argument i, or NULL when not given. */
static inline const tv_t *given(const tv_t *slot, int i)
{
    return slot[i].type != TV_EMPTY ? &slot[i] : NULL;
}
#define ARG(i) given(slot, i)

static int bind(const args_t *a, tv_t *slot, const char *fname, int n, ...)
{
    const char *params[8];
    __builtin_va_list ap;
    __builtin_va_start(ap, n);
    for (int i = 0; i < n; i++)
        params[i] = __builtin_va_arg(ap, const char *);
    __builtin_va_end(ap);
    return args_bind(a, params, n, slot, fname);
}

int args_bind(const args_t *a, const char *const *params, int n_params, tv_t *slots,
              const char *what)
{
    for (int i = 0; i < n_params; i++)
        slots[i] = (tv_t){0};
    if (a->n_pos > n_params)
        return deras_fail(DERAS_EFORMAT, "%s() takes at most %d argument(s) (%d given)", what,
                          n_params, a->n_pos);
    for (int i = 0; i < a->n_pos; i++)
        slots[i] = a->pos[i];
    for (int k = 0; k < a->n_kw; k++) {
        int i = 0;
        while (i < n_params && strcmp(params[i], a->kw_names[k]))
            i++;
        if (i == n_params)
            return deras_fail(DERAS_EFORMAT, "%s() got an unexpected keyword argument '%s'",
                              what, a->kw_names[k]);
        if (slots[i].type != TV_EMPTY)
            return deras_fail(DERAS_EFORMAT, "%s() got multiple values for argument '%s'",
                              what, params[i]);
        slots[i] = a->kw[k];
    }
    return 0;
}

int tv_length(const tv_t *v, size_t *n)
{
    switch (v->type) {
    case TV_STR: *n = v->u.s->ascii ? tv_sn(v) : uni_count(tv_sp(v), tv_sn(v)); return 0;
    case TV_LIST:
    case TV_TUPLE:
        if (v->u.l->view != VIEW_GEN) {
            *n = v->u.l->n;
            return 0;
        }
        break;
    case TV_DICT: *n = v->u.d->n; return 0;
    case TV_UNDEF: *n = 0; return 0;
    default: break;
    }
    return deras_fail(DERAS_EFORMAT, "object of type '%s' has no len()", tv_typename(v));
}

/* An empty list marked as a generator (or a plain list). */
static int new_list(rx_t *rx, bool gen, tv_t *out)
{
    int st = tv_list_new(rx, TV_LIST, 0, out);
    if (!st && gen)
        out->u.l->view = VIEW_GEN;
    return st;
}

static bool is_true(const tv_t *v) { return v && tv_truthy(v); }

/* Jinja2's ignore_case: strings lowered, anything else as it is. */
static int fold(rx_t *rx, const tv_t *v, bool lower, tv_t *out)
{
    if (lower && v->type == TV_STR)
        return str_case(rx, v, CASE_LOWER, out);
    *out = tv_ref(*v);
    return 0;
}

/* make_attrgetter: "a.b.0" looked up item by item with the environment's getitem. */
static int attr_get(rx_t *rx, const tv_t *item, const tv_t *attr, const tv_t *dflt, bool lower,
                    tv_t *out)
{
    tv_t cur = tv_ref(*item), next;
    int st = 0;
    if (attr->type != TV_STR) {
        st = tv_getitem(rx, &cur, attr, &next);
        tv_release(rx, &cur);
        cur = next;
    } else {
        const char *s = tv_sp(attr), *end = s + tv_sn(attr);
        while (!st && s <= end) {
            const char *dot = memchr(s, '.', (size_t)(end - s));
            size_t len = dot ? (size_t)(dot - s) : (size_t)(end - s);
            bool digits = len > 0;
            int64_t iv = 0;
            for (size_t i = 0; i < len && digits; i++) {
                digits = s[i] >= '0' && s[i] <= '9';
                iv = iv * 10 + (s[i] - '0');
            }
            tv_t key;
            if (digits)
                key = tv_int(iv);
            else if ((st = tv_str(rx, s, len, &key)))
                break;
            st = tv_getitem(rx, &cur, &key, &next);
            tv_release(rx, &key);
            tv_release(rx, &cur);
            if (st)
                return st;
            cur = next;
            if (dflt && cur.type == TV_UNDEF) {
                cur = tv_ref(*dflt);
            }
            if (!dot)
                break;
            s = dot + 1;
        }
    }
    if (st) {
        tv_release(rx, &cur);
        return st;
    }
    st = fold(rx, &cur, lower, out);
    tv_release(rx, &cur);
    return st;
}

/* --- sorting: keys computed once, then a stable merge sort of indices --- */

typedef struct sort_ctx {
    tv_t *keys;
    bool reverse;
} sort_ctx;

static int idx_lt(void *ctx, const void *a, const void *b, bool *lt)
{
    sort_ctx *c = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    return c->reverse ? tv_lt(&c->keys[j], &c->keys[i], lt) : tv_lt(&c->keys[i], &c->keys[j], lt);
}

/* Sort `items` (a list, not shared) by `keys` in place. */
static int sort_by(rx_t *rx, tv_t *items, tv_t *keys, bool reverse)
{
    size_t n = items->u.l->n;
    int st = rx_step(rx, n * (1 + (n > 1 ? (uint64_t)log2((double)n) : 0)));
    if (st || n < 2)
        return st;
    size_t *order = tv_alloc(rx, n * sizeof *order);
    tv_t *tmp = order ? tv_alloc(rx, n * sizeof *tmp) : NULL;
    if (!tmp) {
        tv_free(rx, order, n * sizeof *order);
        return DERAS_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    sort_ctx c = {keys, reverse};
    if (!(st = tv_sort(order, n, sizeof *order, idx_lt, &c))) {
        for (size_t i = 0; i < n; i++)
            tmp[i] = items->u.l->v[order[i]];
        memcpy(items->u.l->v, tmp, n * sizeof *tmp);
    }
    tv_free(rx, tmp, n * sizeof *tmp);
    tv_free(rx, order, n * sizeof *order);
    return st;
}

static void free_keys(rx_t *rx, tv_t *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tv_release(rx, &keys[i]);
    tv_free(rx, keys, n * sizeof *keys);
}

/* A copy of `seq`'s items as a plain list, and each item's sort key. */
static int keyed(rx_t *rx, const tv_t *seq, const tv_t *attr, bool lower, bool pairs_by,
                 int pos, tv_t *list, tv_t **keys)
{
    tv_t it;
    int st = tv_iterate(rx, seq, &it);
    if (st)
        return st;
    size_t n = it.u.l->n;
    *keys = NULL;
    if ((st = tv_list_new(rx, TV_LIST, n, list))) {
        tv_release(rx, &it);
        return st;
    }
    if (n && !(*keys = tv_alloc(rx, n * sizeof **keys)))
        st = DERAS_ENOMEM;
    for (size_t i = 0; i < n && !st; i++) {
        const tv_t *x = &it.u.l->v[i];
        tv_t *k = &(*keys)[i];
        *k = (tv_t){0};
        if (pairs_by)
            st = fold(rx, &x->u.l->v[pos], lower, k);
        else if (attr)
            st = attr_get(rx, x, attr, NULL, lower, k);
        else
            st = fold(rx, x, lower, k);
        if (!st)
            st = tv_list_push(rx, list, tv_ref(*x));
        if (st)
            for (size_t j = i + 1; j < n; j++)
                (*keys)[j] = (tv_t){0};
    }
    tv_release(rx, &it);
    if (st) {
        if (*keys)
            free_keys(rx, *keys, n);
        *keys = NULL;
        tv_release(rx, list);
    }
    return st;
}

static int f_sort(rx_t *rx, const tv_t *v, const tv_t *reverse, const tv_t *cs, const tv_t *attr,
                  bool dict_pairs, int pos, tv_t *out)
{
    tv_t *keys;
    int st = keyed(rx, v, attr, !is_true(cs), dict_pairs, pos, out, &keys);
    if (st)
        return st;
    size_t n = out->u.l->n;
    st = sort_by(rx, out, keys, is_true(reverse));
    if (keys)
        free_keys(rx, keys, n);
    if (st)
        tv_release(rx, out);
    return st;
}

static int f_dictsort(rx_t *rx, const tv_t *v, tv_t *slot, tv_t *out)
{
    if (v->type != TV_DICT)
        return deras_fail(DERAS_EFORMAT, "dictsort needs a mapping, not %s", tv_typename(v));
    int pos = 0;
    if (ARG(1)) {
        if (slot[1].type == TV_STR && !strcmp(tv_sp(&slot[1]), "value"))
            pos = 1;
        else if (!(slot[1].type == TV_STR && !strcmp(tv_sp(&slot[1]), "key")))
            return deras_fail(DERAS_EFORMAT, "You can only sort by either \"key\" or \"value\"");
    }
    tv_t pairs;
    int st = tv_list_new(rx, TV_LIST, v->u.d->n, &pairs);
    for (size_t i = 0; i < v->u.d->n && !st; i++) {
        tv_t t;
        if ((st = tv_list_new(rx, TV_TUPLE, 2, &t)))
            break;
        if (!(st = tv_list_push(rx, &t, tv_ref(v->u.d->k[i]))) &&
            !(st = tv_list_push(rx, &t, tv_ref(v->u.d->v[i]))))
            st = tv_list_push(rx, &pairs, t);
        else
            tv_release(rx, &t);
    }
    if (!st)
        st = f_sort(rx, &pairs, ARG(2), ARG(0), NULL, true, pos, out);
    tv_release(rx, &pairs);
    return st;
}

static int f_minmax(rx_t *rx, const tv_t *v, const tv_t *cs, const tv_t *attr, bool max, tv_t *out)
{
    tv_t list, *keys;
    int st = keyed(rx, v, attr, !is_true(cs), false, 0, &list, &keys);
    if (st)
        return st;
    size_t n = list.u.l->n, best = 0;
    for (size_t i = 1; i < n && !st; i++) {
        bool lt = false;
        st = max ? tv_lt(&keys[best], &keys[i], &lt) : tv_lt(&keys[i], &keys[best], &lt);
        if (!st && lt)
            best = i;
    }
    if (!st)
        *out = n ? tv_ref(list.u.l->v[best]) : tv_undef(NULL, UNDEF_OTHER);
    if (keys)
        free_keys(rx, keys, n);
    tv_release(rx, &list);
    return st;
}

static int f_unique(rx_t *rx, const tv_t *v, const tv_t *cs, const tv_t *attr, tv_t *out)
{
    tv_t list, *keys, seen;
    int st = keyed(rx, v, attr, !is_true(cs), false, 0, &list, &keys);
    if (st)
        return st;
    size_t n = list.u.l->n;
    if (!(st = new_list(rx, true, out)) && !(st = tv_dict_new(rx, TV_DICT, n, &seen))) {
        for (size_t i = 0; i < n && !st; i++) {
            if (keys[i].type == TV_LIST || keys[i].type == TV_DICT) {
                st = deras_fail(DERAS_EFORMAT, "unhashable type: '%s'", tv_typename(&keys[i]));
                break;
            }
            if (tv_dict_get(&seen, &keys[i]))
                continue;
            if (!(st = tv_dict_set(rx, &seen, tv_ref(keys[i]), tv_none())))
                st = tv_list_push(rx, out, tv_ref(list.u.l->v[i]));
        }
        tv_release(rx, &seen);
        if (st)
            tv_release(rx, out);
    }
    if (keys)
        free_keys(rx, keys, n);
    tv_release(rx, &list);
    return st;
}

/* select / reject / selectattr / rejectattr. */
static int f_select(rx_t *rx, const tv_t *v, const args_t *a, bool attr, bool keep, tv_t *out)
{
    int off = attr ? 1 : 0, test = -1;
    if (attr && a->n_pos < 1)
        return deras_fail(DERAS_EFORMAT, "Missing parameter for attribute name");
    if (a->n_pos > off) {
        if (a->pos[off].type != TV_STR)
            return deras_fail(DERAS_EFORMAT, "a test name must be a string");
        if ((test = test_find(tv_sp(&a->pos[off]))) < 0)
            return deras_fail(DERAS_EFORMAT, "no test named '%s'", tv_sp(&a->pos[off]));
    }
    args_t targs = {.pos = a->pos + off + 1, .n_pos = a->n_pos > off ? a->n_pos - off - 1 : 0,
                    .kw_names = a->kw_names, .kw = a->kw, .n_kw = a->n_kw};
    tv_t it;
    int st = new_list(rx, true, out);
    if (st || !tv_truthy(v))
        return st;
    if ((st = tv_iterate(rx, v, &it))) {
        tv_release(rx, out);
        return st;
    }
    for (size_t i = 0; i < it.u.l->n && !st; i++) {
        tv_t x;
        bool r;
        if (attr)
            st = attr_get(rx, &it.u.l->v[i], &a->pos[0], NULL, false, &x);
        else
            x = tv_ref(it.u.l->v[i]);
        if (st)
            break;
        if (test >= 0)
            st = test_call(rx, test, &x, &targs, &r);
        else
            r = tv_truthy(&x);
        tv_release(rx, &x);
        if (!st && r == keep)
            st = tv_list_push(rx, out, tv_ref(it.u.l->v[i]));
        if (!st)
            st = rx_step(rx, 1);
    }
    tv_release(rx, &it);
    if (st)
        tv_release(rx, out);
    return st;
}

static int f_map(rx_t *rx, frame_t *f, const tv_t *v, const args_t *a, tv_t *out)
{
    const tv_t *attribute = NULL, *dflt = NULL;
    int filter = -1;
    args_t fargs = *a;
    if (a->n_pos == 0) {
        for (int k = 0; k < a->n_kw; k++) {
            if (!strcmp(a->kw_names[k], "attribute"))
                attribute = &a->kw[k];
            else if (!strcmp(a->kw_names[k], "default"))
                dflt = &a->kw[k];
            else
                return deras_fail(DERAS_EFORMAT, "Unexpected keyword argument '%s'", a->kw_names[k]);
        }
        if (!attribute)
            return deras_fail(DERAS_EFORMAT, "map requires a filter argument");
    } else {
        if (a->pos[0].type != TV_STR || (filter = filter_find(tv_sp(&a->pos[0]))) < 0)
            return deras_fail(DERAS_EFORMAT, "no filter named '%s'",
                              a->pos[0].type == TV_STR ? tv_sp(&a->pos[0]) : "?");
        if (!filter_supported(filter))
            return deras_fail(DERAS_EUNSUPPORTED, "filter '%s' is not supported", tv_sp(&a->pos[0]));
        fargs.pos++;
        fargs.n_pos--;
    }
    tv_t it;
    int st = new_list(rx, true, out);
    if (st || !tv_truthy(v))
        return st;
    if ((st = tv_iterate(rx, v, &it))) {
        tv_release(rx, out);
        return st;
    }
    for (size_t i = 0; i < it.u.l->n && !st; i++) {
        tv_t x;
        if (attribute)
            st = attr_get(rx, &it.u.l->v[i], attribute, dflt, false, &x);
        else
            st = filter_call(rx, f, filter, &it.u.l->v[i], &fargs, &x);
        if (!st)
            st = tv_list_push(rx, out, x);
    }
    tv_release(rx, &it);
    if (st)
        tv_release(rx, out);
    return st;
}

static int f_join(rx_t *rx, const tv_t *v, const tv_t *d, const tv_t *attr, tv_t *out)
{
    tv_t it;
    int st = tv_iterate(rx, v, &it);
    if (st)
        return st;
    sbuf_t b;
    sb_init(&b, rx);
    for (size_t i = 0; i < it.u.l->n && !st; i++) {
        if (i && d)
            st = tv_print(&b, d);
        if (st)
            break;
        if (attr) {
            tv_t x;
            if (!(st = attr_get(rx, &it.u.l->v[i], attr, NULL, false, &x))) {
                st = tv_print(&b, &x);
                tv_release(rx, &x);
            }
        } else {
            st = tv_print(&b, &it.u.l->v[i]);
        }
    }
    tv_release(rx, &it);
    if (!st)
        st = rx_step(rx, b.len / 64);
    if (st) {
        sb_free(&b);
        return st;
    }
    return sb_take(&b, out);
}

static int f_indent(rx_t *rx, const tv_t *s, const tv_t *width, bool first, bool blank, tv_t *out)
{
    if (s->type == TV_UNDEF)
        return undef_error(s);
    if (s->type != TV_STR)
        return deras_fail(DERAS_EFORMAT, "unsupported operand type(s) for +=: '%s' and 'str'",
                          tv_typename(s));
    sbuf_t ind, b;
    sb_init(&ind, rx);
    sb_init(&b, rx);
    int st = 0;
    if (!width)
        st = sb_put(&ind, "    ", 4);
    else if (width->type == TV_STR)
        st = sb_put(&ind, tv_sp(width), tv_sn(width));
    else if (width->type == TV_INT || width->type == TV_BOOL)
        for (int64_t i = 0; i < (width->type == TV_INT ? width->u.i : width->u.b) && !st; i++)
            st = sb_putc(&ind, ' ');
    else
        st = deras_fail(DERAS_EFORMAT, "indent width must be an int or a string");
    /* the lines of s + "\n" as str.splitlines gives them: s split at every line break
     * (\r\n counting once), the last piece included even when empty */
    const char *p = tv_sp(s);
    size_t n = tv_sn(s), i = 0, line = 0;
    if (!st && first)
        st = sb_put(&b, ind.p, ind.len);
    while (!st) {
        size_t start = i, brk = 0;
        uint32_t cp = 0;
        while (i < n) {
            brk = uni_decode(p, n, i, &cp);
            if (uni_islinebreak(cp))
                break;
            i += brk;
        }
        if (line++) {
            st = sb_putc(&b, '\n');
            if (!st && (blank || i > start))
                st = sb_put(&b, ind.p, ind.len);
        }
        if (!st)
            st = sb_put(&b, p + start, i - start);
        if (i >= n)
            break;
        i += cp == '\r' && i + 1 < n && p[i + 1] == '\n' ? 2 : brk;
    }
    sb_free(&ind);
    if (!st)
        st = rx_step(rx, b.len / 64 + line);
    if (st) {
        sb_free(&b);
        return st;
    }
    st = sb_take(&b, out);
    if (!st)
        out->markup = s->markup;
    return st;
}

/* Python's int(str) / float(str) for |int and |float: strict, surrounding whitespace and
 * digit underscores allowed. */
static bool parse_int(const char *s, size_t n, int base, int64_t *out)
{
    size_t a = uni_lspace(s, n), b = n - uni_rspace(s, n);
    if (a >= b || base < 2 || base > 36)
        return false;
    bool neg = false;
    if (s[a] == '+' || s[a] == '-')
        neg = s[a++] == '-';
    uint64_t v = 0;
    bool any = false, under = false;
    for (size_t i = a; i < b; i++) {
        int c = (unsigned char)s[i], d;
        if (c == '_' && any && !under) {
            under = true;
            continue;
        }
        d = c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'z' ? (c | 32) - 'a' + 10 : 99;
        if (d >= base || v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + (uint64_t)d;
        any = true;
        under = false;
    }
    if (!any || under || v > (uint64_t)INT64_MAX + neg)
        return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool parse_float(const char *s, size_t n, double *out)
{
    size_t a = uni_lspace(s, n), b = n - uni_rspace(s, n);
    char buf[128];
    size_t k = 0;
    if (a >= b || b - a >= sizeof buf)
        return false;
    for (size_t i = a; i < b; i++) {
        char c = s[i];
        if (c == '_') {
            if (i == a || i + 1 == b || !(s[i - 1] >= '0' && s[i - 1] <= '9') ||
                !(s[i + 1] >= '0' && s[i + 1] <= '9'))
                return false;
            continue;
        }
        if (!strchr("0123456789+-.eEinfINFatyTYA", c))
            return false;
        buf[k++] = c;
    }
    buf[k] = 0;
    if (!strncmp(buf, "0x", 2) || !strncmp(buf, "0X", 2) || strpbrk(buf, "xXpP"))
        return false;
    char *end;
    *out = strtod(buf, &end);
    return end == buf + k && k > 0;
}

static int f_int(rx_t *rx, const tv_t *v, const tv_t *dflt, const tv_t *base, tv_t *out)
{
    (void)rx;
    int64_t i;
    double f;
    if (v->type == TV_UNDEF)
        return undef_error(v);
    int b = base && base->type == TV_INT ? (int)base->u.i : 10;
    if (v->type == TV_INT || v->type == TV_BOOL) {
        *out = tv_int(v->type == TV_INT ? v->u.i : v->u.b);
        return 0;
    }
    bool have = false;
    if (v->type == TV_STR && parse_int(tv_sp(v), tv_sn(v), b, &i)) {
        *out = tv_int(i);
        return 0;
    }
    if (v->type == TV_FLOAT) {
        f = v->u.f;
        have = true;
    } else if (v->type == TV_STR) {
        have = parse_float(tv_sp(v), tv_sn(v), &f);
    }
    if (have && !isnan(f)) {
        if (isinf(f))
            return deras_fail(DERAS_EFORMAT, "cannot convert float infinity to integer");
        if (f >= 9.2233720368547758e18 || f < -9.2233720368547758e18)
            return deras_fail(DERAS_EUNSUPPORTED, "integer overflow (no big integers)");
        *out = tv_int((int64_t)f);
        return 0;
    }
    *out = dflt ? tv_ref(*dflt) : tv_int(0);
    return 0;
}

static int f_tojson(rx_t *rx, const tv_t *v, tv_t *slot, tv_t *out)
{
    json_opts o = {.ensure_ascii = is_true(ARG(0)), .sort_keys = is_true(ARG(3)),
                   .item_sep = ", ", .item_sep_len = 2, .key_sep = ": ", .key_sep_len = 2};
    char spaces[256];
    const tv_t *ind = ARG(1), *sep = ARG(2);
    if (ind && ind->type != TV_NONE) {
        o.has_indent = true;
        o.item_sep = ",";
        o.item_sep_len = 1;
        if (ind->type == TV_STR) {
            o.indent = tv_sp(ind);
            o.indent_len = tv_sn(ind);
        } else if (ind->type == TV_INT) {
            int64_t w = ind->u.i < 0 ? 0 : ind->u.i;
            if (w >= (int64_t)sizeof spaces)
                return deras_fail(DERAS_EUNSUPPORTED, "tojson indent past 255 is not supported");
            memset(spaces, ' ', (size_t)w);
            o.indent = spaces;
            o.indent_len = (size_t)w;
        } else {
            return deras_fail(DERAS_EFORMAT, "tojson indent must be an int or a string");
        }
    }
    if (sep && sep->type != TV_NONE) {
        if (!tv_is_seq(sep) || sep->u.l->n != 2 || sep->u.l->v[0].type != TV_STR ||
            sep->u.l->v[1].type != TV_STR)
            return deras_fail(DERAS_EFORMAT, "tojson separators must be two strings");
        o.item_sep = tv_sp(&sep->u.l->v[0]);
        o.item_sep_len = tv_sn(&sep->u.l->v[0]);
        o.key_sep = tv_sp(&sep->u.l->v[1]);
        o.key_sep_len = tv_sn(&sep->u.l->v[1]);
    }
    sbuf_t b;
    sb_init(&b, rx);
    int st = tv_tojson(&b, v, &o);
    if (!st)
        st = rx_step(rx, b.len / 64);
    if (st) {
        sb_free(&b);
        return st;
    }
    return sb_take(&b, out);
}

/* First or last item of an iterable; Undefined when empty. */
static int f_end(rx_t *rx, const tv_t *v, bool last, tv_t *out)
{
    tv_t it;
    int st = tv_iterate(rx, v, &it);
    if (st)
        return st;
    size_t n = it.u.l->n;
    *out = n ? tv_ref(it.u.l->v[last ? n - 1 : 0]) : tv_undef(NULL, UNDEF_OTHER);
    tv_release(rx, &it);
    return 0;
}

static int f_sum(rx_t *rx, const tv_t *v, const tv_t *attr, const tv_t *start, tv_t *out)
{
    tv_t it = {0}, acc = start ? tv_ref(*start) : tv_int(0);
    int st = tv_iterate(rx, v, &it);
    for (size_t i = 0; !st && i < it.u.l->n; i++) {
        tv_t x, r;
        if (attr)
            st = attr_get(rx, &it.u.l->v[i], attr, NULL, false, &x);
        else
            x = tv_ref(it.u.l->v[i]);
        if (!st && !(st = binop(rx, BIN_ADD, &acc, &x, &r))) {
            tv_release(rx, &acc);
            acc = r;
        }
        tv_release(rx, &x);
    }
    tv_release(rx, &it);
    if (st)
        tv_release(rx, &acc);
    else
        *out = acc;
    return st;
}

int filter_call(rx_t *rx, frame_t *f, int id, const tv_t *v, const args_t *a, tv_t *out)
{
    tv_t slot[8];
    int st;
    const char *name = filter_name(id);
    switch (id) {
    case F_TOJSON:
        if ((st = bind(a, slot, name, 4, "ensure_ascii", "indent", "separators", "sort_keys")))
            return st;
        return f_tojson(rx, v, slot, out);
    case F_LENGTH:
    case F_COUNT: {
        size_t n;
        if ((st = bind(a, slot, name, 0)) || (st = tv_length(v, &n)))
            return st;
        *out = tv_int((int64_t)n);
        return 0;
    }
    case F_TRIM:
        if ((st = bind(a, slot, name, 1, "chars")))
            return st;
        if (v->type != TV_STR) {
            tv_t s;
            if ((st = tv_to_str(rx, v, &s)))
                return st;
            st = str_strip(rx, &s, ARG(0), 3, out);
            tv_release(rx, &s);
            return st;
        }
        return str_strip(rx, v, ARG(0), 3, out);
    case F_STRING:
        if ((st = bind(a, slot, name, 0)))
            return st;
        if (v->type == TV_STR) {
            *out = tv_ref(*v);
            return 0;
        }
        return tv_to_str(rx, v, out);
    case F_SAFE:
    case F_E:
    case F_ESCAPE:
        if ((st = bind(a, slot, name, 0)))
            return st;
        if (id != F_SAFE && !(v->type == TV_STR && v->markup)) {
            sbuf_t b;
            tv_t s;
            sb_init(&b, rx);
            if ((st = tv_to_str(rx, v, &s)))
                return st;
            st = html_escape(&b, tv_sp(&s), tv_sn(&s));
            tv_release(rx, &s);
            if (st || (st = sb_take(&b, out))) {
                sb_free(&b);
                return st;
            }
        } else if ((st = v->type == TV_STR ? (*out = tv_ref(*v), 0) : tv_to_str(rx, v, out))) {
            return st;
        }
        out->markup = 1;
        return 0;
    case F_D:
    case F_DEFAULT:
        if ((st = bind(a, slot, name, 2, "default_value", "boolean")))
            return st;
        if (is_true(ARG(1)) ? !tv_truthy(v) : v->type == TV_UNDEF)
            return ARG(0) ? (*out = tv_ref(slot[0]), 0) : tv_str(rx, "", 0, out);
        *out = tv_ref(*v);
        return 0;
    case F_JOIN:
        if ((st = bind(a, slot, name, 2, "d", "attribute")))
            return st;
        return f_join(rx, v, ARG(0), ARG(1), out);
    case F_ITEMS:
        if ((st = bind(a, slot, name, 0)))
            return st;
        if (v->type == TV_UNDEF)
            return new_list(rx, true, out);
        if (v->type != TV_DICT)
            return deras_fail(DERAS_EFORMAT, "Can only get item pairs from a mapping.");
        if ((st = method_call(rx, M_ITEMS, v, &(args_t){0}, out)))
            return st;
        out->u.l->view = VIEW_GEN;
        return 0;
    case F_UPPER:
    case F_LOWER:
    case F_CAPITALIZE:
    case F_TITLE: {
        tv_t s;
        if ((st = bind(a, slot, name, 0)))
            return st;
        if ((st = v->type == TV_STR ? (s = tv_ref(*v), 0) : tv_to_str(rx, v, &s)))
            return st;
        st = str_case(rx, &s, id == F_UPPER ? CASE_UPPER : id == F_LOWER ? CASE_LOWER
                              : id == F_CAPITALIZE ? CASE_CAPITALIZE : CASE_JINJA_TITLE, out);
        tv_release(rx, &s);
        return st;
    }
    case F_REPLACE: {
        tv_t s, o, n;
        if ((st = bind(a, slot, name, 3, "old", "new", "count")))
            return st;
        if (!ARG(0) || !ARG(1))
            return deras_fail(DERAS_EFORMAT, "replace() missing required arguments");
        int64_t count = ARG(2) && slot[2].type == TV_INT ? slot[2].u.i : -1;
        if ((st = tv_to_str(rx, v, &s)))
            return st;
        if (!(st = tv_to_str(rx, &slot[0], &o))) {
            if (!(st = tv_to_str(rx, &slot[1], &n))) {
                st = str_replace(rx, &s, &o, &n, count, out);
                tv_release(rx, &n);
            }
            tv_release(rx, &o);
        }
        tv_release(rx, &s);
        if (!st)
            out->markup = 0;
        return st;
    }
    case F_DICTSORT:
        if ((st = bind(a, slot, name, 3, "case_sensitive", "by", "reverse")))
            return st;
        return f_dictsort(rx, v, slot, out);
    case F_SORT:
        if ((st = bind(a, slot, name, 3, "reverse", "case_sensitive", "attribute")))
            return st;
        return f_sort(rx, v, ARG(0), ARG(1), ARG(2), false, 0, out);
    case F_UNIQUE:
        if ((st = bind(a, slot, name, 2, "case_sensitive", "attribute")))
            return st;
        return f_unique(rx, v, ARG(0), ARG(1), out);
    case F_MIN:
    case F_MAX:
        if ((st = bind(a, slot, name, 2, "case_sensitive", "attribute")))
            return st;
        return f_minmax(rx, v, ARG(0), ARG(1), id == F_MAX, out);
    case F_LIST:
        if ((st = bind(a, slot, name, 0)) || (st = tv_iterate(rx, v, out)))
            return st;
        if (out->type == TV_LIST && !out->u.l->view)
            return 0;
        { /* a fresh plain list */
            tv_t l;
            if ((st = tv_list_new(rx, TV_LIST, out->u.l->n, &l)))
                goto list_fail;
            for (size_t i = 0; i < out->u.l->n && !st; i++)
                st = tv_list_push(rx, &l, tv_ref(out->u.l->v[i]));
            tv_release(rx, out);
            *out = l;
            if (st)
                tv_release(rx, out);
            return st;
        }
    list_fail:
        tv_release(rx, out);
        return st;
    case F_FIRST:
    case F_LAST:
        if ((st = bind(a, slot, name, 0)))
            return st;
        return f_end(rx, v, id == F_LAST, out);
    case F_REVERSE:
        if ((st = bind(a, slot, name, 0)))
            return st;
        if (v->type == TV_STR) {
            tv_t it;
            sbuf_t b;
            if ((st = tv_iterate(rx, v, &it)))
                return st;
            sb_init(&b, rx);
            for (size_t i = it.u.l->n; i-- > 0 && !st;)
                st = tv_print(&b, &it.u.l->v[i]);
            tv_release(rx, &it);
            if (!st && !(st = sb_take(&b, out)))
                out->markup = v->markup;
            else
                sb_free(&b);
            return st;
        } else {
            tv_t it;
            if ((st = tv_iterate(rx, v, &it)) || (st = new_list(rx, true, out)))
                return st;
            for (size_t i = it.u.l->n; i-- > 0 && !st;)
                st = tv_list_push(rx, out, tv_ref(it.u.l->v[i]));
            tv_release(rx, &it);
            if (st)
                tv_release(rx, out);
            return st;
        }
    case F_SELECT:
    case F_REJECT:
    case F_SELECTATTR:
    case F_REJECTATTR:
        return f_select(rx, v, a, id == F_SELECTATTR || id == F_REJECTATTR,
                        id == F_SELECT || id == F_SELECTATTR, out);
    case F_MAP: return f_map(rx, f, v, a, out);
    case F_INDENT:
        if ((st = bind(a, slot, name, 3, "width", "first", "blank")))
            return st;
        return f_indent(rx, v, ARG(0), is_true(ARG(1)), is_true(ARG(2)), out);
    case F_INT:
        if ((st = bind(a, slot, name, 2, "default", "base")))
            return st;
        return f_int(rx, v, ARG(0), ARG(1), out);
    case F_FLOAT: {
        double d;
        if ((st = bind(a, slot, name, 1, "default")))
            return st;
        if (v->type == TV_UNDEF)
            return undef_error(v);
        if (tv_is_num(v))
            *out = tv_float(v->type == TV_FLOAT ? v->u.f : v->type == TV_INT ? (double)v->u.i : v->u.b);
        else if (v->type == TV_STR && parse_float(tv_sp(v), tv_sn(v), &d))
            *out = tv_float(d);
        else
            *out = ARG(0) ? tv_ref(slot[0]) : tv_float(0.0);
        return 0;
    }
    case F_ABS:
        if ((st = bind(a, slot, name, 0)))
            return st;
        if (v->type == TV_FLOAT) {
            *out = tv_float(fabs(v->u.f));
            return 0;
        }
        if (v->type == TV_INT || v->type == TV_BOOL) {
            int64_t i = v->type == TV_INT ? v->u.i : v->u.b;
            if (i == INT64_MIN)
                return deras_fail(DERAS_EUNSUPPORTED, "integer overflow (no big integers)");
            *out = tv_int(i < 0 ? -i : i);
            return 0;
        }
        return v->type == TV_UNDEF ? undef_error(v)
                                   : deras_fail(DERAS_EFORMAT, "bad operand type for abs(): '%s'",
                                                tv_typename(v));
    case F_SUM:
        if ((st = bind(a, slot, name, 2, "attribute", "start")))
            return st;
        return f_sum(rx, v, ARG(0), ARG(1), out);
    default:
        return deras_fail(DERAS_EUNSUPPORTED, "filter '%s' is not supported", name);
    }
}
