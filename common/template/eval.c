/* SPDX-License-Identifier: Apache-2.0 */
/* eval.c - expressions: names, constants, attribute and item access with the sandbox's
 * lookup rules, calls, filters, tests, Python's operators and comparisons, literals.
 *
 * Lookup follows jinja2.sandbox: obj.name tries the Python attribute (a method of str,
 * dict or list; a namespace's attribute; a loop's field) and then obj['name']; obj[key]
 * tries the item and then, for a string key, the attribute. What neither finds is
 * Undefined; only an Undefined's own attribute or item raises. A method that would mutate
 * a list or dict is an "unsafe" Undefined whose call fails as the immutable sandbox's
 * SecurityError. Every evaluation costs one step; operations on strings and lists also
 * pay one step per element and per STEP_COPY or STEP_SCAN bytes they touch (render.h).
 */
#include "builtins.h"
#include "render.h"
#include "unicode.h"

#include "common/base/status.h"

#include <math.h>
#include <string.h>

#define MAX_ARGS TMPL_MAX_ARGS

int undef_error(const tv *u)
{
    const char *name = u->u.name ? u->u.name : "value";
    switch (u->sub) {
    case UNDEF_UNSAFE:
        return deras_fail(DERAS_EFORMAT, "access to attribute '%s' is unsafe (the sandbox "
                          "forbids changing a list or dict)", name);
    case UNDEF_ATTR: return deras_fail(DERAS_EFORMAT, "attribute or item '%s' is undefined", name);
    case UNDEF_NAME: return deras_fail(DERAS_EFORMAT, "'%s' is undefined", name);
    default: return deras_fail(DERAS_EFORMAT, "an undefined value was used");
    }
}

static int bound_method(struct rx *rx, int id, const tv *self, tv *out)
{
    struct tmethod *m = tv_alloc(rx, sizeof *m);
    if (!m)
        return DERAS_ENOMEM;
    m->refs = 1;
    m->id = (uint16_t)id;
    m->self = tv_ref(*self);
    *out = (tv){.type = TV_METHOD, .u.m = m};
    return 0;
}

/* The Python attribute `name` of obj: 1 found (in *out), 0 not an attribute. */
static int py_attr(struct rx *rx, const tv *obj, const char *name, tv *out)
{
    if (obj->type == TV_LOOP) {
        if (!strcmp(name, "cycle")) {
            int st = bound_method(rx, M_CYCLE, obj, out);
            return st ? st : 1;
        }
        int st = loop_attr(rx, obj->u.loop, name, out);
        return st < 0 ? st : st == 0;
    }
    if (obj->type == TV_NS) {
        const tv *v = tv_dict_get_str(obj, name, strlen(name));
        if (!v)
            return 0;
        *out = tv_ref(*v);
        return 1;
    }
    int id = method_find(name);
    bool unsafe;
    int type = obj->type == TV_LIST && obj->u.l->view ? -1 : obj->type;
    if (id < 0 || !method_of(id, type, &unsafe))
        return 0;
    if (unsafe) {
        *out = tv_undef(name, UNDEF_UNSAFE);
        return 1;
    }
    int st = bound_method(rx, id, obj, out);
    return st ? st : 1;
}

static int item(struct rx *rx, const tv *obj, const tv *key, tv *out);

int tv_getattr(struct rx *rx, const tv *obj, const char *name, tv *out)
{
    if (obj->type == TV_UNDEF)
        return undef_error(obj);
    int r = py_attr(rx, obj, name, out);
    if (r < 0)
        return r;
    if (r == 1)
        return 0;
    if (obj->type == TV_DICT) {
        const tv *v = tv_dict_get_str(obj, name, strlen(name));
        if (v) {
            *out = tv_ref(*v);
            return 0;
        }
    }
    *out = tv_undef(name, UNDEF_ATTR);
    return 0;
}

/* Python index semantics for a sequence of length n: *at in [0, n), or false. */
static bool seq_index(const tv *key, size_t n, size_t *at)
{
    int64_t i;
    if (key->type == TV_INT)
        i = key->u.i;
    else if (key->type == TV_BOOL)
        i = key->u.b;
    else
        return false;
    if (i < 0)
        i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n)
        return false;
    *at = (size_t)i;
    return true;
}

/* obj[key]: 1 found, 0 not (Python raised a LookupError or TypeError). */
static int item(struct rx *rx, const tv *obj, const tv *key, tv *out)
{
    size_t at;
    switch (obj->type) {
    case TV_DICT: {
        const tv *v = tv_dict_get(obj, key);
        if (!v)
            return 0;
        *out = tv_ref(*v);
        return 1;
    }
    case TV_LIST:
    case TV_TUPLE:
        if (obj->u.l->view > VIEW_RANGE || !seq_index(key, obj->u.l->n, &at))
            return 0;
        *out = tv_ref(obj->u.l->v[at]);
        return 1;
    case TV_STR: {
        const struct tstr *s = obj->u.s;
        size_t n = s->ascii ? s->len : uni_count(s->p, s->len);
        if (!seq_index(key, n, &at))
            return 0;
        int st = s->ascii ? 0 : rx_step(rx, 1 + s->len / STEP_SCAN);
        if (st)
            return st;
        size_t b = uni_offset(s->p, s->len, at, s->ascii);
        uint32_t cp;
        size_t len = uni_decode(s->p, s->len, b, &cp);
        st = tv_str(rx, s->p + b, len, out);
        out->markup = obj->markup;
        return st ? st : 1;
    }
    default: return 0;
    }
}

int tv_getitem(struct rx *rx, const tv *obj, const tv *key, tv *out)
{
    if (obj->type == TV_UNDEF)
        return undef_error(obj);
    int r = item(rx, obj, key, out);
    if (r != 0)
        return r < 0 ? r : 0;
    if (key->type == TV_STR) {
        r = py_attr(rx, obj, key->u.s->p, out);
        if (r != 0)
            return r < 0 ? r : 0;
    }
    *out = tv_undef(NULL, UNDEF_OTHER);
    return 0;
}

/* Python's slice.indices(): start, stop and the count. */
static int slice_indices(const tv *sv[3], size_t len, int64_t *start, int64_t *step,
                         size_t *count, bool *bad)
{
    int64_t v[3];
    bool given[3];
    for (int i = 0; i < 3; i++) {
        given[i] = sv[i] && sv[i]->type != TV_NONE;
        if (!given[i])
            continue;
        if (sv[i]->type == TV_INT)
            v[i] = sv[i]->u.i;
        else if (sv[i]->type == TV_BOOL)
            v[i] = sv[i]->u.b;
        else {
            *bad = true; /* TypeError: Jinja2's getitem turns it into Undefined */
            return 0;
        }
    }
    int64_t st = given[2] ? v[2] : 1, n = (int64_t)len;
    if (st == 0)
        return deras_fail(DERAS_EFORMAT, "slice step cannot be zero");
    int64_t lo = 0, hi = 0;
    for (int i = 0; i < 2; i++) {
        int64_t x;
        if (!given[i]) {
            x = i == 0 ? (st > 0 ? 0 : n - 1) : (st > 0 ? n : -1);
        } else {
            x = v[i];
            if (x < 0) {
                x += n;
                if (x < 0)
                    x = st < 0 ? -1 : 0;
            } else if (x >= n) {
                x = st < 0 ? n - 1 : n;
            }
        }
        if (i == 0)
            lo = x;
        else
            hi = x;
    }
    if (st < 0)
        *count = hi < lo ? (size_t)((lo - hi - 1) / (-st) + 1) : 0;
    else
        *count = lo < hi ? (size_t)((hi - lo - 1) / st + 1) : 0;
    *start = lo;
    *step = st;
    return 0;
}

static int eval_slice(struct rx *rx, struct frame *f, const tv *obj, const struct node *sl, tv *out)
{
    tv parts[3] = {{0}, {0}, {0}};
    const tv *pp[3] = {NULL, NULL, NULL};
    const struct node *pn[3] = {sl->a, sl->b, sl->c};
    int st = 0;
    for (int i = 0; i < 3 && !st; i++)
        if (pn[i] && !(st = eval(rx, f, pn[i], &parts[i])))
            pp[i] = &parts[i];
    if (st)
        goto done;
    /* Slices bypass the sandbox's getitem in Jinja2: what Python cannot slice raises. */
    if (obj->type == TV_UNDEF) {
        st = undef_error(obj);
        goto done;
    }
    bool seq = (obj->type == TV_LIST && obj->u.l->view <= VIEW_RANGE) || obj->type == TV_TUPLE;
    if (!seq && obj->type != TV_STR && sl->op == 1) { /* a folded constant: Undefined */
        *out = tv_undef(NULL, UNDEF_OTHER);
        goto done;
    }
    if (!seq && obj->type != TV_STR) {
        st = deras_fail(DERAS_EFORMAT, obj->type == TV_DICT ? "unhashable type: 'slice'"
                        : "'%s' object is not subscriptable", tv_typename(obj));
        goto done;
    }
    const struct tstr *s = obj->type == TV_STR ? obj->u.s : NULL;
    size_t n = s ? (s->ascii ? s->len : uni_count(s->p, s->len)) : obj->u.l->n;
    int64_t start = 0, step = 1;
    size_t count = 0;
    bool bad = false;
    if ((st = slice_indices(pp, n, &start, &step, &count, &bad)))
        goto done;
    if (bad) {
        if (sl->op == 1)
            *out = tv_undef(NULL, UNDEF_OTHER);
        else
            st = deras_fail(DERAS_EFORMAT, "slice indices must be integers or None");
        goto done;
    }
    if ((st = rx_step(rx, 1 + count + (s ? s->len / STEP_SCAN : 0))))
        goto done;
    if (s) {
        sbuf b;
        tsb_init(&b, rx);
        size_t *offs = NULL; /* byte offset of every code point, for non-ASCII */
        if (!s->ascii) {
            offs = tv_alloc(rx, (n + 1) * sizeof *offs);
            if (!offs) {
                st = DERAS_ENOMEM;
                goto done;
            }
            size_t k = 0;
            for (size_t i = 0; i < s->len; i++)
                if (((unsigned char)s->p[i] & 0xC0) != 0x80)
                    offs[k++] = i;
            offs[n] = s->len;
        }
        for (size_t k = 0; k < count && !st; k++) {
            size_t i = (size_t)(start + (int64_t)k * step);
            size_t b0 = offs ? offs[i] : i, b1 = offs ? offs[i + 1] : i + 1;
            st = tsb_put(&b, s->p + b0, b1 - b0);
        }
        tv_free(rx, offs, offs ? (n + 1) * sizeof *offs : 0);
        if (!st)
            st = tsb_take(&b, out);
        else
            tsb_free(&b);
        if (!st)
            out->markup = obj->markup;
        goto done;
    }
    if ((st = tv_list_new(rx, obj->type, count, out)))
        goto done;
    for (size_t k = 0; k < count && !st; k++)
        st = tv_list_push(rx, out, tv_ref(obj->u.l->v[start + (int64_t)k * step]));
    if (!st && obj->u.l->view == VIEW_RANGE) {
        const struct tlist *r = obj->u.l;
        struct tlist *l = out->u.l;
        l->view = VIEW_RANGE;
        l->r_step = r->r_step * step;
        l->r_start = r->r_start + start * r->r_step;
        l->r_stop = l->r_start + (int64_t)count * l->r_step;
        if (count == 0)
            l->r_stop = l->r_start;
    }
    if (st)
        tv_release(rx, out);
done:
    for (int i = 0; i < 3; i++)
        tv_release(rx, &parts[i]);
    return st;
}

/* Evaluate call arguments: kids[from..] are positional values, then N_KEYWORD. */
static int eval_args(struct rx *rx, struct frame *f, const struct node *n, int from,
                     struct args *a, tv *pos, tv *kw, const char **names)
{
    *a = (struct args){.pos = pos, .kw = kw, .kw_names = names};
    for (int i = from; i < n->n_kids; i++) {
        const struct node *k = n->kids[i];
        int st;
        if (k->kind == N_KEYWORD) {
            names[a->n_kw] = k->name;
            st = eval(rx, f, k->a, &kw[a->n_kw]);
            if (!st)
                a->n_kw++;
        } else {
            st = eval(rx, f, k, &pos[a->n_pos]);
            if (!st)
                a->n_pos++;
        }
        if (st)
            return st;
    }
    return 0;
}

static void free_args(struct rx *rx, struct args *a)
{
    for (int i = 0; i < a->n_pos; i++)
        tv_release(rx, &a->pos[i]);
    for (int i = 0; i < a->n_kw; i++)
        tv_release(rx, &a->kw[i]);
}

int call_value(struct rx *rx, const struct node *site, const tv *callee, const struct args *a,
               tv *out)
{
    switch (callee->type) {
    case TV_MACRO: return call_macro(rx, site, callee->u.macro, a, out);
    case TV_FUNC: return global_call(rx, callee->sub, a, out);
    case TV_METHOD:
        if (callee->u.m->id == M_CYCLE && callee->u.m->self.type == TV_LOOP)
            return loop_cycle(rx, callee->u.m->self.u.loop, a, out);
        return method_call(rx, callee->u.m->id, &callee->u.m->self, a, out);
    case TV_UNDEF: return undef_error(callee);
    default: return deras_fail(DERAS_EFORMAT, "'%s' object is not callable", tv_typename(callee));
    }
}

static int eval_call(struct rx *rx, struct frame *f, const struct node *n, tv *out)
{
    tv pos[MAX_ARGS], kw[MAX_ARGS], callee = {0}, obj = {0};
    const char *names[MAX_ARGS];
    struct args a = {0};
    int st;
    if (n->a->kind == N_GETATTR) { /* a method call: no bound method object needed */
        if ((st = eval(rx, f, n->a->a, &obj)))
            return st;
        if ((st = tv_getattr(rx, &obj, n->a->name, &callee)))
            goto done;
    } else if ((st = eval(rx, f, n->a, &callee))) {
        return st;
    }
    if (!(st = eval_args(rx, f, n, 0, &a, pos, kw, names)))
        st = call_value(rx, n, &callee, &a, out);
done:
    free_args(rx, &a);
    tv_release(rx, &callee);
    tv_release(rx, &obj);
    return st;
}

int eval_filters(struct rx *rx, struct frame *f, const struct node *n, const tv *input, tv *out)
{
    tv val, pos[MAX_ARGS], kw[MAX_ARGS];
    const char *names[MAX_ARGS];
    struct args a = {0};
    int st = n->a ? (n->a->kind == N_FILTER ? eval_filters(rx, f, n->a, input, &val)
                                         : eval(rx, f, n->a, &val))
                  : (val = tv_ref(*input), 0);
    if (st)
        return st;
    if (n->op < 0) {
        st = rx_fail(rx, n, DERAS_EFORMAT, "no filter named '%s' found", n->name);
    } else if (!(st = rx_step(rx, 1)) && !(st = eval_args(rx, f, n, 0, &a, pos, kw, names))) {
        st = filter_call(rx, f, n->op, &val, &a, out);
    }
    free_args(rx, &a);
    tv_release(rx, &val);
    return st;
}

static int eval_test(struct rx *rx, struct frame *f, const struct node *n, tv *out)
{
    tv val, pos[MAX_ARGS], kw[MAX_ARGS];
    const char *names[MAX_ARGS];
    struct args a = {0};
    int st = eval(rx, f, n->a, &val);
    if (st)
        return st;
    bool r = false;
    if (n->op < 0)
        st = rx_fail(rx, n, DERAS_EFORMAT, "no test named '%s' found", n->name);
    else if (!(st = eval_args(rx, f, n, 0, &a, pos, kw, names)))
        st = test_call(rx, n->op, &val, &a, &r);
    free_args(rx, &a);
    tv_release(rx, &val);
    if (!st)
        *out = tv_bool(r);
    return st;
}

static int compare(struct rx *rx, int op, const tv *a, const tv *b, bool *res)
{
    bool lt = false;
    int st = 0;
    switch (op) {
    case CMP_EQ: *res = tv_eq(a, b); return 0;
    case CMP_NE: *res = !tv_eq(a, b); return 0;
    case CMP_IN: return contains(rx, b, a, res);
    case CMP_NOTIN:
        st = contains(rx, b, a, res);
        *res = !*res;
        return st;
    }
    if (a->type == TV_UNDEF || b->type == TV_UNDEF)
        return undef_error(a->type == TV_UNDEF ? a : b);
    if (tv_is_seq(a) || tv_is_seq(b))
        if ((st = rx_step(rx, 1 + (tv_is_seq(a) ? a->u.l->n : 0))))
            return st;
    if (op == CMP_LT)
        return tv_lt(a, b, res);
    if (op == CMP_GT)
        return tv_lt(b, a, res);
    if ((st = tv_lt(op == CMP_LE ? a : b, op == CMP_LE ? b : a, &lt)))
        return st;
    *res = lt || tv_eq(a, b);
    return 0;
}

static int eval_compare(struct rx *rx, struct frame *f, const struct node *n, tv *out)
{
    tv left, right = {0};
    int st = eval(rx, f, n->a, &left);
    bool res = true;
    for (int i = 0; i < n->n_kids && !st && res; i++) {
        if ((st = eval(rx, f, n->kids[i]->a, &right)))
            break;
        st = compare(rx, n->kids[i]->op, &left, &right, &res);
        tv_release(rx, &left);
        left = right;
    }
    tv_release(rx, &left);
    if (!st)
        *out = tv_bool(res);
    return st;
}

static int eval_unary(struct rx *rx, const struct node *n, tv *v, tv *out)
{
    if (v->type == TV_UNDEF)
        return undef_error(v);
    if (v->type == TV_BOOL)
        *v = tv_int(v->u.b);
    if (v->type == TV_INT) {
        if (n->kind == N_NEG && v->u.i == INT64_MIN)
            return deras_fail(DERAS_EUNSUPPORTED, "integer overflow (no big integers)");
        *out = tv_int(n->kind == N_NEG ? -v->u.i : v->u.i);
        return 0;
    }
    if (v->type == TV_FLOAT) {
        *out = tv_float(n->kind == N_NEG ? -v->u.f : v->u.f);
        return 0;
    }
    (void)rx;
    return deras_fail(DERAS_EFORMAT, "bad operand type for unary %c: '%s'",
                      n->kind == N_NEG ? '-' : '+', tv_typename(v));
}

static int eval_literal(struct rx *rx, struct frame *f, const struct node *n, tv *out)
{
    int st;
    if (n->kind == N_DICT) {
        if ((st = tv_dict_new(rx, TV_DICT, (size_t)n->n_kids, out)))
            return st;
        for (int i = 0; i < n->n_kids && !st; i++) {
            tv k, v;
            if ((st = eval(rx, f, n->kids[i]->a, &k)))
                break;
            if ((st = eval(rx, f, n->kids[i]->b, &v))) {
                tv_release(rx, &k);
                break;
            }
            st = tv_dict_set(rx, out, k, v);
        }
    } else {
        if ((st = tv_list_new(rx, n->kind == N_LIST ? TV_LIST : TV_TUPLE, (size_t)n->n_kids, out)))
            return st;
        for (int i = 0; i < n->n_kids && !st; i++) {
            tv v;
            if (!(st = eval(rx, f, n->kids[i], &v)))
                st = tv_list_push(rx, out, v);
        }
    }
    if (st)
        tv_release(rx, out);
    return st;
}

/* a ~ b ~ c: every part as str first, then one buffer of the exact size (templates that
 * grow a string with `ns.s = ns.s ~ x` copy it once per step, not twice). */
static int eval_concat(struct rx *rx, struct frame *f, const struct node *n, tv *out)
{
    tv small[8], *parts = n->n_kids <= 8 ? small : tv_alloc(rx, (size_t)n->n_kids * sizeof *parts);
    if (!parts)
        return DERAS_ENOMEM;
    int st = 0, k = 0;
    size_t total = 0;
    for (; k < n->n_kids && !st; k++) {
        tv v;
        if ((st = eval(rx, f, n->kids[k], &v)))
            break;
        st = tv_to_str(rx, &v, &parts[k]);
        tv_release(rx, &v);
        if (st)
            break;
        total += tv_sn(&parts[k]);
    }
    sbuf b;
    tsb_init(&b, rx);
    if (!st && !(st = rx_step(rx, total / STEP_COPY)) && !(st = tsb_reserve(&b, total)))
        for (int i = 0; i < n->n_kids && !st; i++)
            st = tsb_put(&b, tv_sp(&parts[i]), tv_sn(&parts[i]));
    for (int i = 0; i < k && i < n->n_kids; i++)
        tv_release(rx, &parts[i]);
    if (parts != small)
        tv_free(rx, parts, (size_t)n->n_kids * sizeof *parts);
    return tsb_finish(&b, st, out);
}

static int eval_node(struct rx *rx, struct frame *f, const struct node *n, tv *out)
{
    tv a, b;
    int st;
    switch (n->kind) {
    case N_CONST: *out = tv_ref(n->val); return 0;
    case N_NAME: {
        const tv *v = frame_get(f, n->sym);
        *out = v ? tv_ref(*v) : tv_undef(n->name, UNDEF_NAME);
        return 0;
    }
    case N_GETATTR:
        if ((st = eval(rx, f, n->a, &a)))
            return st;
        st = tv_getattr(rx, &a, n->name, out);
        tv_release(rx, &a);
        return st;
    case N_GETITEM:
        if ((st = eval(rx, f, n->a, &a)))
            return st;
        if (n->b->kind == N_SLICE) {
            st = eval_slice(rx, f, &a, n->b, out);
        } else if (!(st = eval(rx, f, n->b, &b))) {
            st = tv_getitem(rx, &a, &b, out);
            tv_release(rx, &b);
        }
        tv_release(rx, &a);
        return st;
    case N_CALL: return eval_call(rx, f, n, out);
    case N_FILTER: return eval_filters(rx, f, n, NULL, out);
    case N_TEST: return eval_test(rx, f, n, out);
    case N_NOT:
        if ((st = eval(rx, f, n->a, &a)))
            return st;
        *out = tv_bool(!tv_truthy(&a));
        tv_release(rx, &a);
        return 0;
    case N_NEG:
    case N_POS:
        if ((st = eval(rx, f, n->a, &a)))
            return st;
        st = eval_unary(rx, n, &a, out);
        tv_release(rx, &a);
        return st;
    case N_BINOP:
        if ((st = eval(rx, f, n->a, &a)))
            return st;
        if (!(st = eval(rx, f, n->b, &b))) {
            st = binop(rx, n->op, &a, &b, out);
            tv_release(rx, &b);
        }
        tv_release(rx, &a);
        return st;
    case N_AND:
    case N_OR:
        if ((st = eval(rx, f, n->a, &a)))
            return st;
        if (tv_truthy(&a) == (n->kind == N_OR)) {
            *out = a;
            return 0;
        }
        tv_release(rx, &a);
        return eval(rx, f, n->b, out);
    case N_CONCAT: return eval_concat(rx, f, n, out);
    case N_COMPARE: return eval_compare(rx, f, n, out);
    case N_CONDEXPR:
        if ((st = eval(rx, f, n->a, &a)))
            return st;
        bool t = tv_truthy(&a);
        tv_release(rx, &a);
        if (t)
            return eval(rx, f, n->b, out);
        if (n->c)
            return eval(rx, f, n->c, out);
        *out = tv_undef(NULL, UNDEF_OTHER);
        return 0;
    case N_LIST:
    case N_TUPLE:
    case N_DICT: return eval_literal(rx, f, n, out);
    default: return deras_fail(DERAS_EINTERNAL, "unexpected node kind %d", n->kind);
    }
}

int eval(struct rx *rx, struct frame *f, const struct node *n, tv *out)
{
    *out = (tv){0}; /* a failed evaluation leaves nothing to release */
    int st = rx_step(rx, 1);
    if (!st) {
        if (++rx->cdepth > CDEPTH_PER_LEVEL * rx->lim.max_depth)
            st = deras_fail(DERAS_EUNSUPPORTED, "expressions and macro calls nested deeper "
                            "than max_depth (%d) allows", rx->lim.max_depth);
        else
            st = eval_node(rx, f, n, out);
        rx->cdepth--;
    }
    if (st && !rx->located) {
        deras_fail_ctx(st, "template line %d: ", n->line);
        rx->located = true;
    }
    return st;
}

int args_bind(const struct args *a, const char *const *params, int n_params, tv *slots,
              const char *what)
{
    for (int i = 0; i < n_params; i++)
        slots[i] = (tv){0};
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
