/* SPDX-License-Identifier: Apache-2.0 */
/* exec.c - statements: output, if, for (with Jinja2's loop object), set (names, tuples,
 * namespace attributes, blocks), macros and their calls, filter blocks, break/continue;
 * and the frames variables live in.
 *
 * Scoping is Jinja2's: `if` shares its frame; each loop iteration, macro call and block
 * body gets a frame of its own (see render.h). A loop's filter (`for x in y if c`) is
 * evaluated lazily item by item, as Jinja2's generator does, so loop.last, loop.nextitem
 * and loop.length look ahead only when a template asks. Cost: one step per statement and
 * loop iteration (plus what the expressions cost); each macro call nests one level of
 * max_depth.
 */
#include "render.h"

#include "common/base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int rx_fail(struct rx *rx, const struct node *at, int code, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rx->located = true;
    return deras_fail(code, "template line %d: %s", at ? at->line : 0, msg);
}

int rx_step(struct rx *rx, uint64_t n)
{
    rx->steps += n;
    if (rx->steps > rx->lim.max_steps)
        return deras_fail(DERAS_ETIMEOUT, "step budget of %llu exhausted",
                          (unsigned long long)rx->lim.max_steps);
    return 0;
}

int rx_track_ns(struct rx *rx, const tv *ns)
{
    if (rx->n_ns == rx->cap_ns) {
        size_t cap = rx->cap_ns ? rx->cap_ns * 2 : 8;
        tv *v = tv_realloc(rx, rx->nss, rx->cap_ns * sizeof *v, cap * sizeof *v);
        if (!v)
            return DERAS_ENOMEM;
        rx->nss = v;
        rx->cap_ns = cap;
    }
    rx->nss[rx->n_ns++] = tv_ref(*ns);
    return 0;
}

/* --- frames --- */

const tv *frame_get(const struct frame *f, int sym)
{
    for (; f; f = f->parent) {
        if (f->dense) {
            if (sym >= 0 && sym < f->n_dense && f->dense[sym].type != TV_EMPTY)
                return &f->dense[sym];
            continue;
        }
        for (int i = 0; i < f->n; i++)
            if (f->vars[i].sym == sym)
                return &f->vars[i].v;
    }
    return NULL;
}

int frame_set(struct rx *rx, struct frame *f, int sym, tv v)
{
    if (f->dense) {
        tv_release(rx, &f->dense[sym]);
        f->dense[sym] = v;
        return 0;
    }
    for (int i = 0; i < f->n; i++)
        if (f->vars[i].sym == sym) {
            tv_release(rx, &f->vars[i].v);
            f->vars[i].v = v;
            return 0;
        }
    if (f->n == f->cap) {
        int cap = f->cap ? f->cap * 2 : 4;
        struct fvar *nv = tv_realloc(rx, f->vars, (size_t)f->cap * sizeof *nv, (size_t)cap * sizeof *nv);
        if (!nv) {
            tv_release(rx, &v);
            return DERAS_ENOMEM;
        }
        f->vars = nv;
        f->cap = cap;
    }
    f->vars[f->n].sym = sym;
    f->vars[f->n].v = v;
    f->n++;
    return 0;
}

/* Release the variables, keep the storage (a loop reuses its frame). */
static void frame_reset(struct rx *rx, struct frame *f)
{
    for (int i = 0; i < f->n; i++)
        tv_release(rx, &f->vars[i].v);
    f->n = 0;
}

void frame_clear(struct rx *rx, struct frame *f)
{
    frame_reset(rx, f);
    tv_free(rx, f->vars, (size_t)f->cap * sizeof *f->vars);
    f->vars = NULL;
    f->cap = 0;
}

/* --- assignment --- */

static int assign(struct rx *rx, struct frame *f, const struct node *target, tv v)
{
    int st = 0;
    if (target->kind == N_NAME)
        return frame_set(rx, f, target->sym, v);
    if (target->kind == N_NSREF) {
        const tv *ns = frame_get(f, target->a->sym);
        if (!ns || ns->type != TV_NS) {
            tv_release(rx, &v);
            return rx_fail(rx, target, DERAS_EFORMAT, "cannot assign attribute on non-namespace object");
        }
        tv ref = tv_ref(*ns); /* the set may drop the frame's reference */
        st = tv_dict_set(rx, &ref, tv_ref(target->val), v);
        tv_release(rx, &ref);
        return st;
    }
    tv items; /* a tuple of names: unpack */
    if ((st = tv_iterate(rx, &v, &items))) {
        tv_release(rx, &v);
        return st;
    }
    tv_release(rx, &v);
    size_t n = items.u.l->n;
    if (n != (size_t)target->n_kids)
        st = rx_fail(rx, target, DERAS_EFORMAT, n > (size_t)target->n_kids
                         ? "too many values to unpack (expected %d)"
                         : "not enough values to unpack (expected %d)", target->n_kids);
    for (int i = 0; i < target->n_kids && !st; i++)
        st = frame_set(rx, f, target->kids[i]->sym, tv_ref(items.u.l->v[i]));
    tv_release(rx, &items);
    return st;
}

/* --- loops --- */

static int bind_target(struct rx *rx, struct frame *f, const struct node *target, const tv *item)
{
    return assign(rx, f, target, tv_ref(*item));
}

/* Whether item i passes the loop's filter (evaluated once, when first needed). */
static int passes(struct tloop *lp, size_t i, bool *ok)
{
    if (!lp->verdict) {
        *ok = true;
        return 0;
    }
    if (lp->verdict[i] == 0) {
        struct rx *rx = lp->rx;
        if (!rx)
            return deras_fail(DERAS_EUNSUPPORTED, "a loop's look-ahead after the loop ended");
        struct frame tf = {.parent = lp->frame};
        tv c;
        int st = bind_target(rx, &tf, lp->node->a, &lp->seq.u.l->v[i]);
        if (!st)
            st = eval(rx, &tf, lp->node->c, &c);
        frame_clear(rx, &tf);
        if (st)
            return st;
        lp->verdict[i] = tv_truthy(&c) ? 1 : -1;
        tv_release(rx, &c);
    }
    *ok = lp->verdict[i] > 0;
    return 0;
}

/* Index of the first passing item at or after `from`, or seq length. */
static int next_pass(struct tloop *lp, size_t from, size_t *at)
{
    size_t n = lp->seq.u.l->n;
    for (; from < n; from++) {
        bool ok;
        int st = passes(lp, from, &ok);
        if (st)
            return st;
        if (ok)
            break;
    }
    *at = from;
    return 0;
}

int loop_attr(struct rx *rx, struct tloop *lp, const char *name, tv *out)
{
    size_t n = lp->seq.u.l->n, at;
    int st;
    if (!strcmp(name, "index0") || !strcmp(name, "index")) {
        *out = tv_int((int64_t)lp->index0 + (name[5] == 0));
    } else if (!strcmp(name, "first")) {
        *out = tv_bool(lp->index0 == 0);
    } else if (!strcmp(name, "last") || !strcmp(name, "nextitem")) {
        if ((st = next_pass(lp, lp->pos + 1, &at)))
            return st;
        if (name[0] == 'l')
            *out = tv_bool(at >= n);
        else
            *out = at < n ? tv_ref(lp->seq.u.l->v[at]) : tv_undef("nextitem", UNDEF_ATTR);
    } else if (!strcmp(name, "previtem")) {
        *out = lp->has_prev ? tv_ref(lp->prev) : tv_undef("previtem", UNDEF_ATTR);
    } else if (!strcmp(name, "length") || !strcmp(name, "revindex") || !strcmp(name, "revindex0")) {
        size_t len = lp->index0 + 1;
        for (size_t i = lp->pos + 1; i < n; i++) {
            bool ok;
            if ((st = passes(lp, i, &ok)))
                return st;
            len += ok;
        }
        if ((st = rx_step(rx, n - lp->pos)))
            return st;
        *out = tv_int((int64_t)(name[0] == 'l' ? len
                                : len - lp->index0 - (name[8] == '0' ? 1 : 0)));
    } else if (!strcmp(name, "depth") || !strcmp(name, "depth0")) {
        *out = tv_int(name[5] == '0' ? 0 : 1);
    } else {
        return 1; /* not a loop attribute */
    }
    return 0;
}

int loop_cycle(struct rx *rx, struct tloop *lp, const struct args *a, tv *out)
{
    (void)rx;
    if (a->n_kw)
        return deras_fail(DERAS_EFORMAT, "cycle() takes no keyword arguments");
    if (a->n_pos == 0)
        return deras_fail(DERAS_EFORMAT, "no items for cycling given");
    *out = tv_ref(a->pos[lp->index0 % (size_t)a->n_pos]);
    return 0;
}

static int exec_for(struct rx *rx, struct frame *f, const struct node *n)
{
    tv it, seq, loopv = {0};
    int st = eval(rx, f, n->b, &it);
    if (st)
        return st;
    st = tv_iterate(rx, &it, &seq);
    tv_release(rx, &it);
    if (st)
        return rx->located ? st : rx_fail(rx, n, st, "%s", deras_errmsg());
    struct tloop *lp = tv_alloc(rx, sizeof *lp);
    if (!lp) {
        tv_release(rx, &seq);
        return DERAS_ENOMEM;
    }
    *lp = (struct tloop){.refs = 1, .seq = seq, .rx = rx, .frame = f, .node = n};
    loopv = (tv){.type = TV_LOOP, .u.loop = lp};
    size_t len = seq.u.l->n;
    if (n->c && len) {
        lp->verdict = tv_alloc(rx, len);
        if (!lp->verdict) {
            tv_release(rx, &loopv);
            return DERAS_ENOMEM;
        }
        lp->n_verdict = len;
        memset(lp->verdict, 0, len);
    }
    struct frame body = {.parent = f};
    bool any = false;
    size_t at = 0;
    int sym_loop = rx->t->sym_loop;
    while (!st) {
        if ((st = next_pass(lp, at, &at)) || at >= len)
            break;
        if ((st = rx_step(rx, 1)))
            break;
        lp->pos = at;
        any = true;
        const tv *item = &seq.u.l->v[at];
        if ((st = bind_target(rx, &body, n->a, item)))
            break;
        if (sym_loop >= 0 && (st = frame_set(rx, &body, sym_loop, tv_ref(loopv))))
            break;
        st = exec_body(rx, &body, n->d);
        frame_reset(rx, &body);
        if (st)
            break;
        tv_release(rx, &lp->prev);
        lp->prev = tv_ref(*item);
        lp->has_prev = true;
        lp->index0++;
        at++;
        int ctl = rx->ctl;
        rx->ctl = CTL_NONE;
        if (ctl == CTL_BREAK)
            break;
    }
    frame_clear(rx, &body);
    lp->rx = NULL; /* the loop object may outlive the loop: no more look-ahead */
    lp->frame = NULL;
    tv_release(rx, &loopv);
    if (!st && !any && n->n_kids) {
        struct frame eb = {.parent = f};
        st = exec_body(rx, &eb, n->kids[0]);
        frame_clear(rx, &eb);
    }
    return st;
}

/* --- blocks --- */

/* Render `body` in a frame of its own into a string. */
static int capture(struct rx *rx, struct frame *f, const struct node *body, tv *out)
{
    sbuf buf, *saved = rx->out;
    tsb_init(&buf, rx);
    struct frame inner = {.parent = f};
    rx->out = &buf;
    int st = exec_body(rx, &inner, body);
    rx->out = saved;
    frame_clear(rx, &inner);
    if (st) {
        tsb_free(&buf);
        return st;
    }
    return tsb_take(&buf, out);
}

static int exec_stmt(struct rx *rx, struct frame *f, const struct node *n)
{
    tv v, w;
    int st = rx_step(rx, 1);
    if (st)
        return st;
    switch (n->kind) {
    case N_DATA:
        if ((st = rx_step(rx, tv_sn(&n->val) / STEP_COPY)))
            return st;
        return tsb_put(rx->out, tv_sp(&n->val), tv_sn(&n->val));
    case N_OUTPUT:
        if ((st = eval(rx, f, n->a, &v)))
            return st;
        size_t before = rx->out->len;
        st = tv_print(rx->out, &v);
        tv_release(rx, &v);
        return st ? st : rx_step(rx, (rx->out->len - before) / STEP_COPY);
    case N_IF:
        for (;;) {
            if ((st = eval(rx, f, n->a, &v)))
                return st;
            bool t = tv_truthy(&v);
            tv_release(rx, &v);
            if (t)
                return exec_body(rx, f, n->b);
            if (!n->c)
                return 0;
            if (n->c->kind != N_IF)
                return exec_body(rx, f, n->c);
            n = n->c;
        }
    case N_FOR: return exec_for(rx, f, n);
    case N_SET:
        if ((st = eval(rx, f, n->b, &v)))
            return st;
        return assign(rx, f, n->a, v);
    case N_SETBLOCK:
        if ((st = capture(rx, f, n->b, &v)))
            return st;
        if (n->c) {
            struct frame inner = {.parent = f};
            st = eval_filters(rx, &inner, n->c, &v, &w);
            frame_clear(rx, &inner);
            tv_release(rx, &v);
            if (st)
                return st;
            v = w;
        }
        return assign(rx, f, n->a, v);
    case N_MACRO: return frame_set(rx, f, n->sym, (tv){.type = TV_MACRO, .u.macro = n});
    case N_FILTERBLK:
        if ((st = capture(rx, f, n->b, &v)))
            return st;
        st = eval_filters(rx, f, n->a, &v, &w);
        tv_release(rx, &v);
        if (st)
            return st;
        st = tv_print(rx->out, &w);
        tv_release(rx, &w);
        return st;
    case N_SCOPE: {
        struct frame inner = {.parent = f};
        st = exec_body(rx, &inner, n->b);
        frame_clear(rx, &inner);
        return st;
    }
    case N_BREAK: rx->ctl = CTL_BREAK; return 0;
    case N_CONTINUE: rx->ctl = CTL_CONTINUE; return 0;
    default: return rx_fail(rx, n, DERAS_EINTERNAL, "unexpected statement kind %d", n->kind);
    }
}

int exec_body(struct rx *rx, struct frame *f, const struct node *body)
{
    if (++rx->cdepth > CDEPTH_PER_LEVEL * rx->lim.max_depth) {
        rx->cdepth--;
        return rx_fail(rx, body, DERAS_EUNSUPPORTED, "statements and macro calls nested deeper "
                       "than max_depth (%d) allows", rx->lim.max_depth);
    }
    int st = 0;
    for (int i = 0; i < body->n_kids && !st; i++) {
        st = exec_stmt(rx, f, body->kids[i]);
        if (st && !rx->located) {
            deras_fail_ctx(st, "template line %d: ", body->kids[i]->line);
            rx->located = true;
        }
        if (rx->ctl != CTL_NONE)
            break;
    }
    rx->cdepth--;
    return st;
}

/* --- macros --- */

int call_macro(struct rx *rx, const struct node *site, const struct node *m, const struct args *a,
               tv *out)
{
    if (rx->depth >= rx->lim.max_depth)
        return rx_fail(rx, site, DERAS_EUNSUPPORTED, "macro calls nested deeper than max_depth (%d)",
                       rx->lim.max_depth);
    int n_params = m->n_kids, st = 0;
    if (a->n_pos > n_params && !(m->op & MACRO_VARARGS))
        return rx_fail(rx, site, DERAS_EFORMAT, "macro '%s' takes not more than %d argument(s)",
                       m->name, n_params);
    bool used[TMPL_MAX_ARGS] = {false};
    struct frame fr = {.parent = rx->top};
    for (int i = 0; i < n_params && !st; i++) {
        const struct node *p = m->kids[i];
        tv v = {0};
        if (i < a->n_pos) {
            v = tv_ref(a->pos[i]);
        } else {
            for (int k = 0; k < a->n_kw; k++)
                if (!used[k] && !strcmp(a->kw_names[k], p->name)) {
                    used[k] = true;
                    v = tv_ref(a->kw[k]);
                    break;
                }
        }
        if (v.type == TV_EMPTY) {
            if (p->a)
                st = eval(rx, &fr, p->a, &v);
            else
                v = tv_undef(p->name, UNDEF_NAME);
        }
        if (!st)
            st = frame_set(rx, &fr, p->sym, v);
    }
    tv extra = {0};
    for (int k = 0; k < a->n_kw && !st; k++) {
        if (used[k])
            continue;
        if (!(m->op & MACRO_KWARGS)) {
            st = rx_fail(rx, site, DERAS_EFORMAT, "macro '%s' takes no keyword argument '%s'",
                         m->name, a->kw_names[k]);
            break;
        }
        if (extra.type == TV_EMPTY && (st = tv_dict_new(rx, TV_DICT, 0, &extra)))
            break;
        tv key;
        if (!(st = tv_str(rx, a->kw_names[k], strlen(a->kw_names[k]), &key)))
            st = tv_dict_set(rx, &extra, key, tv_ref(a->kw[k]));
    }
    if (!st && (m->op & MACRO_KWARGS)) {
        if (extra.type == TV_EMPTY)
            st = tv_dict_new(rx, TV_DICT, 0, &extra);
        if (!st)
            st = frame_set(rx, &fr, rx->t->sym_kwargs, extra);
        extra = (tv){0};
    }
    if (!st && (m->op & MACRO_VARARGS)) {
        tv va;
        if (!(st = tv_list_new(rx, TV_TUPLE, 0, &va))) {
            for (int i = n_params; i < a->n_pos && !st; i++)
                st = tv_list_push(rx, &va, tv_ref(a->pos[i]));
            if (!st)
                st = frame_set(rx, &fr, rx->t->sym_varargs, va);
            else
                tv_release(rx, &va);
        }
    }
    tv_release(rx, &extra);
    if (!st) {
        sbuf buf, *saved = rx->out;
        tsb_init(&buf, rx);
        rx->out = &buf;
        rx->depth++;
        st = exec_body(rx, &fr, m->b);
        rx->depth--;
        rx->out = saved;
        if (!st)
            st = tsb_take(&buf, out);
        else
            tsb_free(&buf);
    }
    frame_clear(rx, &fr);
    return st;
}
