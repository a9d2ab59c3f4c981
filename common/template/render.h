/* SPDX-License-Identifier: Apache-2.0 */
/* render.h - a render in progress, shared by the evaluator (eval.c, ops.c), the statements
 * (exec.c), the builtins (filters.c, filters_seq.c, tests.c, strings.c, methods.c,
 * globals.c) and the printers (pyfmt.c).
 *
 * A render owns everything it allocates: the values (charged against max_memory), the
 * frames, the output. Variables live in frames: the top frame has one slot per symbol (the
 * context, the globals, top-level {% set %}); a for-loop iteration, a macro call and the
 * body of a block {% set %}, {% filter %} or {% generation %} each get a frame of their own
 * whose parent is the frame they run in (a macro's parent is the top frame), so a {% set %}
 * inside them does not leak, as in Jinja2. Namespaces made during the render are listed
 * so the end of the render can empty them, which breaks any cycle through them.
 */
#ifndef DERAS_TEMPLATE_RENDER_H
#define DERAS_TEMPLATE_RENDER_H

#include <time.h>

#include "ast.h"
#include "template.h"
#include "value.h"

struct frame {
    struct frame *parent;
    tv *dense; /* the top frame: dense[sym] */
    int n_dense;
    struct fvar { int sym; tv v; } *vars; /* other frames: a short list */
    int n, cap;
};

/* The compiled template (template.c owns it). */
struct tmpl {
    struct arena arena;
    symtab syms;
    struct node *root;
    tmpl_limits lim;
    int sym_loop, sym_varargs, sym_kwargs; /* -1 when the template never names them */
};

enum { CTL_NONE, CTL_BREAK, CTL_CONTINUE };

struct rx {
    const struct tmpl *t;
    tmpl_limits lim;
    uint64_t steps;
    size_t mem_live;
    int depth;  /* macro calls in progress */
    int vdepth; /* recursion of value walks (repr, tojson, ==) */
    int cdepth; /* evaluations and bodies in progress: the C stack in use */
    struct frame *top;
    sbuf *out;
    int ctl;
    bool located; /* the current failure's message already names its line */
    tv *nss;
    size_t n_ns, cap_ns;
    time_t now;
};

/* The `loop` of a for loop. Items are evaluated against the loop's filter lazily, as
 * Jinja2 does, so loop.last and loop.length look ahead only when asked. */
struct tloop {
    uint32_t refs;
    tv seq;            /* the list iterated */
    size_t pos;        /* index in seq of the current item */
    size_t index0;
    int8_t *verdict;   /* per item of seq: 0 not evaluated, 1 passes the filter, -1 not */
    size_t n_verdict;
    struct rx *rx;       /* while the loop runs (NULL after): to evaluate the filter */
    struct frame *frame; /* the frame the loop runs in */
    const struct node *node;
    tv prev;
    bool has_prev;
};

/* Bytes of work one step stands for: copying (memcpy, memmem) is about 4 times cheaper
 * per byte than work that decodes each character (case mapping, escaping, splitting);
 * both make 10^7 steps about a second of work. */
#define STEP_COPY 256
#define STEP_SCAN 64

/* Evaluations and statement bodies in progress may reach this many per max_depth level:
 * the bound on the C stack a render uses (each is well under 1 KiB of stack). */
#define CDEPTH_PER_LEVEL 4

/* --- failures: "template line N: ..." --- */
int rx_fail(struct rx *rx, const struct node *at, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Charge `n` steps; DERAS_ETIMEOUT past max_steps. */
int rx_step(struct rx *rx, uint64_t n);
/* Record a namespace so the end of the render empties it. */
int rx_track_ns(struct rx *rx, const tv *ns);

/* --- frames --- */
const tv *frame_get(const struct frame *f, int sym);
int frame_set(struct rx *rx, struct frame *f, int sym, tv v); /* takes ownership of v */
void frame_clear(struct rx *rx, struct frame *f);

/* --- evaluation (eval.c, ops.c) --- */
int eval(struct rx *rx, struct frame *f, const struct node *n, tv *out);
/* A filter chain (N_FILTER nodes) whose innermost operand is NULL applied to `input`. */
int eval_filters(struct rx *rx, struct frame *f, const struct node *chain, const tv *input,
                 tv *out);
/* The UndefinedError (or sandbox SecurityError) for using Undefined u. DERAS_EFORMAT. */
int undef_error(const tv *u);
/* obj.name and obj[key] with Jinja2's sandboxed lookup rules. */
int tv_getattr(struct rx *rx, const tv *obj, const char *name, tv *out);
int tv_getitem(struct rx *rx, const tv *obj, const tv *key, tv *out);
/* Call a macro, global function or bound method with evaluated arguments. */
struct args {
    tv *pos;
    int n_pos;
    const char **kw_names;
    tv *kw;
    int n_kw;
};
int call_value(struct rx *rx, const struct node *site, const tv *callee, const struct args *a,
               tv *out);
/* Bind arguments to named parameters (Python rules): slots[i] borrowed, TV_EMPTY when not
 * given. DERAS_EFORMAT for too many or unknown arguments, as Python's TypeError. */
int args_bind(const struct args *a, const char *const *params, int n_params, tv *slots,
              const char *what);
/* Python's `a + b` and friends (op: BIN_*). */
int binop(struct rx *rx, int op, const tv *a, const tv *b, tv *out);
/* Python's `x in seq`. */
int contains(struct rx *rx, const tv *seq, const tv *x, bool *in);
/* Materialise an iterable as a list (a list or tuple is shared): str -> characters,
 * dict -> keys, Undefined -> empty. DERAS_EFORMAT for what Python cannot iterate. */
int tv_iterate(struct rx *rx, const tv *v, tv *list);

/* --- statements (exec.c) --- */
int exec_body(struct rx *rx, struct frame *f, const struct node *body);
int call_macro(struct rx *rx, const struct node *site, const struct node *macro,
               const struct args *a, tv *out);
int loop_attr(struct rx *rx, struct tloop *lp, const char *name, tv *out);
int loop_cycle(struct rx *rx, struct tloop *lp, const struct args *a, tv *out);

/* --- printing (pyfmt.c) --- */
int tv_print(sbuf *b, const tv *v);              /* str(v) appended; Undefined prints "" */
int tv_repr(sbuf *b, const tv *v);               /* repr(v) appended */
int tv_to_str(struct rx *rx, const tv *v, tv *out); /* str(v) as a value (shared if a str) */
typedef struct json_opts {
    bool ensure_ascii, sort_keys;
    bool has_indent;
    const char *indent; /* the indent string */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
} json_opts;
int tv_tojson(sbuf *b, const tv *v, const json_opts *o); /* json.dumps */
int float_repr(char *buf, size_t cap, double f);              /* Python repr(float) */

/* --- builtins (filters.c, tests.c, methods.c, globals.c) --- */
/* Python's len(v); DERAS_EFORMAT for what has none (None, numbers, generators). */
int tv_length(const tv *v, size_t *n);
int filter_call(struct rx *rx, struct frame *f, int id, const tv *val, const struct args *a,
                tv *out);
int test_call(struct rx *rx, int id, const tv *val, const struct args *a, bool *res);
int method_call(struct rx *rx, int id, const tv *self, const struct args *a, tv *out);
int global_call(struct rx *rx, int id, const struct args *a, tv *out);
/* Markupsafe's escape of p[0..n) into b. */
int html_escape(sbuf *b, const char *p, size_t n);

/* --- string operations shared by filters and methods (strings.c) --- */
enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE, CASE_JINJA_TITLE };
/* s (a str) with its case mapped as str.upper/lower/capitalize/title or Jinja2's |title;
 * Markup stays Markup. */
int str_case(struct rx *rx, const tv *s, int mode, tv *out);
/* str.strip / lstrip (which 1) / rstrip (2) / strip (3) with chars NULL, None or a str. */
int str_strip(struct rx *rx, const tv *s, const tv *chars, int which, tv *out);
/* str.replace(old, new, count); count < 0: all. */
int str_replace(struct rx *rx, const tv *s, const tv *old, const tv *new_, int64_t count,
                tv *out);
/* str.split / rsplit (sep NULL: whitespace; maxsplit < 0: all). */
int str_split(struct rx *rx, const tv *s, const tv *sep, int64_t maxsplit, bool right, tv *out);
/* str.format with positional and keyword arguments. */
int str_format(struct rx *rx, const tv *s, const struct args *a, tv *out);
/* str.find / rfind: the code point index of sub, or -1. */
int str_find(struct rx *rx, const tv *s, const tv *sub, bool last, int64_t *at);
/* str.startswith / endswith with a str or a tuple of str. */
int str_affix(const tv *s, const tv *x, bool end, bool *res);
/* DERAS_EFORMAT unless v is a str (Python's TypeError for `what`). */
int str_require(const tv *v, const char *what);

#endif
