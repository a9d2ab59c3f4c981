/* SPDX-License-Identifier: Apache-2.0 */
/* template.c - the public door (template.h): compile = lex + parse into an arena;
 * render = bind the context's keys the template names, run the tree, hand back the
 * output; destroy = free the arena.
 *
 * A render allocates only through its struct rx (value.h), so when it ends, with the output
 * handed over, the live-bytes count must be back to zero; debug builds check this and fail
 * with DERAS_EINTERNAL otherwise, which makes any reference-count leak a test failure.
 */
#include "template.h"

#include "builtins.h"
#include "common/base/status.h"
#include "lexer.h"
#include "parser.h"
#include "render.h"

#include <stdlib.h>
#include <string.h>

tmpl_limits tmpl_limits_default(void)
{
    return (tmpl_limits){.max_output = 8u << 20, .max_steps = 10000000, .max_depth = 64,
                         .max_memory = 64u << 20};
}

tmpl_limits tmpl_limits_of(const tmpl_t *t) { return t->lim; }

int tmpl_compile(const char *source, size_t len, const tmpl_limits *lim, tmpl_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "template: tmpl_compile needs an out pointer");
    *out = NULL;
    if (!source && len)
        return deras_fail(DERAS_EINVAL, "template: no source");
    tmpl_t *t = calloc(1, sizeof *t);
    if (!t)
        return deras_fail(DERAS_ENOMEM, "template: out of memory");
    tmpl_limits d = tmpl_limits_default();
    t->lim = lim ? *lim : d;
    if (!t->lim.max_output)
        t->lim.max_output = d.max_output;
    if (!t->lim.max_steps)
        t->lim.max_steps = d.max_steps;
    if (t->lim.max_depth <= 0)
        t->lim.max_depth = d.max_depth;
    if (!t->lim.max_memory)
        t->lim.max_memory = d.max_memory;
    tokens tk;
    int st = lex(&t->arena, source ? source : "", len, &tk);
    if (!st) {
        st = parse_template(&t->arena, &t->syms, &tk, t->lim.max_depth, &t->root);
        tokens_free(&tk);
    }
    if (st) {
        tmpl_destroy(&t);
        return st;
    }
    t->sym_loop = sym_find(&t->syms, "loop");
    t->sym_varargs = sym_find(&t->syms, "varargs");
    t->sym_kwargs = sym_find(&t->syms, "kwargs");
    *out = t;
    return DERAS_OK;
}

/* The top frame: each symbol bound to the context's value, else to a global. */
static int bind_context(struct rx *rx, struct frame *top, const json_t *context)
{
    const symtab *syms = &rx->t->syms;
    top->n_dense = syms->n;
    top->dense = tv_alloc(rx, (size_t)(syms->n ? syms->n : 1) * sizeof(tv));
    if (!top->dense)
        return deras_fail_ctx(DERAS_ENOMEM, "template context: ");
    memset(top->dense, 0, (size_t)(syms->n ? syms->n : 1) * sizeof(tv));
    for (int i = 0; i < syms->n; i++) {
        const json_t *j = context ? json_object_get(context, syms->names[i]) : NULL;
        if (j) {
            int st = tv_from_json(rx, j, &top->dense[i]);
            if (st)
                return deras_fail_ctx(st, "template context '%s': ", syms->names[i]);
            continue;
        }
        bool ok;
        int g = global_find(syms->names[i], &ok);
        if (g >= 0 && ok)
            top->dense[i] = (tv){.type = TV_FUNC, .sub = (uint8_t)g};
    }
    return 0;
}

int tmpl_render(const tmpl_t *t, const json_t *context, char **out, size_t *out_len)
{
    if (out)
        *out = NULL;
    if (out_len)
        *out_len = 0;
    if (!t || !out || !out_len)
        return deras_fail(DERAS_EINVAL, "template: tmpl_render needs a template and outputs");
    if (context && !json_is_object(context))
        return deras_fail(DERAS_EINVAL, "template: the context must be a JSON object");
    struct rx rx = {.t = t, .lim = t->lim};
    struct frame top = {0};
    sbuf o;
    tsb_init(&o, &rx);
    rx.out = &o;
    rx.top = &top;
    int st = bind_context(&rx, &top, context);
    if (!st)
        st = exec_body(&rx, &top, t->root);
    for (int i = 0; i < top.n_dense; i++)
        tv_release(&rx, &top.dense[i]);
    tv_free(&rx, top.dense, (size_t)(top.n_dense ? top.n_dense : 1) * sizeof(tv));
    for (size_t i = 0; i < rx.n_ns; i++)
        tv_dict_clear(&rx, &rx.nss[i]);
    for (size_t i = 0; i < rx.n_ns; i++)
        tv_release(&rx, &rx.nss[i]);
    tv_free(&rx, rx.nss, rx.cap_ns * sizeof *rx.nss);
    char *text = st ? NULL : tsb_detach(&o, out_len);
    if (!st && !text)
        st = deras_fail(DERAS_ENOMEM, "template: out of memory");
    tsb_free(&o);
#ifndef NDEBUG
    if (!st && rx.mem_live != 0) {
        free(text);
        text = NULL;
        *out_len = 0;
        st = deras_fail(DERAS_EINTERNAL, "template: %zu bytes still live after the render",
                        rx.mem_live);
    }
#endif
    *out = text;
    return st;
}

void tmpl_destroy(tmpl_t **t)
{
    if (!t || !*t)
        return;
    sym_free(&(*t)->syms);
    arena_free(&(*t)->arena);
    free(*t);
    *t = NULL;
}
