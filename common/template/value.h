/* SPDX-License-Identifier: Apache-2.0 */
/* value.h - the values a template computes with: Python's None, bool, int, float, str,
 * list, tuple and dict, Jinja2's Undefined, namespace, macros and loop objects, and the
 * string builder everything prints into.
 *
 * A value (tv) is 16 bytes passed by value; strings, lists, dicts and the rest live on
 * the heap with a reference count. Lists, tuples and dicts never change after they are
 * built (the sandbox forbids append/pop/update), so sharing them is safe; namespaces are
 * the one mutable kind, and the render breaks their cycles when it ends (render.h).
 * Objects made at compile time (string constants) are immortal: their count is never
 * touched, so one compiled template can be rendered by several threads at once.
 *
 * Every allocation during a render is charged to the render (struct rx): live bytes against
 * max_memory (DERAS_ENOMEM), a string's length against max_output (DERAS_ERANGE), and a
 * container's nesting against max_depth (DERAS_EUNSUPPORTED), so no walk over a value
 * (repr, tojson, ==, free) can recurse deeper than that. A value-returning function
 * returns a status and, on success, a value the caller owns (release it).
 */
#ifndef DERAS_TEMPLATE_VALUE_H
#define DERAS_TEMPLATE_VALUE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rx; /* a render in progress (render.h); NULL at compile time */
struct node;

enum tv_type {
    TV_EMPTY = 0, /* an unbound variable slot; never seen by a template */
    TV_UNDEF,     /* jinja2.Undefined: falsy, prints as "", iterates as empty */
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST,
    TV_TUPLE,
    TV_DICT,
    TV_NS,     /* namespace(): a dict whose attributes can be set */
    TV_MACRO,  /* a {% macro %}: u.macro is its node */
    TV_FUNC,   /* a global function (range, namespace, ...): sub is its id */
    TV_METHOD, /* a bound method (x.items without the call) */
    TV_LOOP,   /* the `loop` object of a for loop */
};

/* Why a value is undefined (for messages, and for the sandbox's unsafe attributes). */
enum { UNDEF_NAME, UNDEF_ATTR, UNDEF_UNSAFE, UNDEF_OTHER };

/* What a list stands for when it is not a plain list: Python's range, dict views and the
 * generators that filters such as map and select return print and compare differently,
 * have no JSON form, and (generators) are always true and have no length. */
enum { VIEW_NONE, VIEW_RANGE, VIEW_ITEMS, VIEW_KEYS, VIEW_VALUES, VIEW_GEN };

typedef struct tv {
    uint8_t type;
    uint8_t markup; /* TV_STR: a markupsafe.Markup (from |safe): `+` escapes the other side */
    uint8_t sub;    /* TV_UNDEF: UNDEF_*; TV_FUNC: function id */
    union {
        int64_t i;
        double f;
        bool b;
        struct tstr *s;
        struct tlist *l;
        struct tdict *d;
        struct tmethod *m;
        struct tloop *loop;
        struct tobj *obj;
        const struct node *macro;
        const char *name; /* TV_UNDEF: the variable or attribute, for messages (or NULL) */
    } u;
} tv;

#define TV_IMMORTAL UINT32_MAX

struct tobj {
    uint32_t refs;
};

struct tstr {
    uint32_t refs;
    bool ascii; /* every byte one code point: O(1) indexing */
    size_t len;
    char p[]; /* len bytes, then a NUL */
};

struct tlist { /* TV_LIST and TV_TUPLE */
    uint32_t refs;
    uint8_t view;  /* VIEW_* */
    uint16_t depth;
    size_t n, cap;
    tv *v;
    int64_t r_start, r_stop, r_step; /* VIEW_RANGE: the range() arguments, for its repr */
};

struct tdict { /* TV_DICT and TV_NS: insertion-ordered, hashed from 9 keys on */
    uint32_t refs;
    uint16_t depth;
    size_t n, cap;
    tv *k, *v;
    uint32_t *idx; /* open addressing over entry index + 1; NULL while small */
    size_t idx_cap;
};

struct tmethod {
    uint32_t refs;
    uint16_t id; /* method id (builtins.h) */
    tv self;
};

/* --- scalars (no allocation) --- */
static inline tv tv_none(void) { return (tv){.type = TV_NONE}; }
static inline tv tv_bool(bool b) { return (tv){.type = TV_BOOL, .u.b = b}; }
static inline tv tv_int(int64_t i) { return (tv){.type = TV_INT, .u.i = i}; }
static inline tv tv_float(double f) { return (tv){.type = TV_FLOAT, .u.f = f}; }
static inline tv tv_undef(const char *name, int why)
{
    return (tv){.type = TV_UNDEF, .sub = (uint8_t)why, .u.name = name};
}
static inline bool tv_is_heap(const tv *v)
{
    return v->type == TV_STR || v->type == TV_LIST || v->type == TV_TUPLE ||
           v->type == TV_DICT || v->type == TV_NS || v->type == TV_METHOD || v->type == TV_LOOP;
}
static inline bool tv_is_seq(const tv *v) { return v->type == TV_LIST || v->type == TV_TUPLE; }
static inline bool tv_is_num(const tv *v)
{
    return v->type == TV_INT || v->type == TV_FLOAT || v->type == TV_BOOL;
}

/* --- references --- */
tv tv_ref(tv v);                   /* one more reference; returns v */
void tv_release(struct rx *rx, tv *v); /* drop one; frees at zero; sets *v to TV_EMPTY */

/* --- memory (charged to rx; rx NULL: plain malloc at compile time) --- */
void *tv_alloc(struct rx *rx, size_t n);     /* NULL + DERAS_ENOMEM message on failure */
void *tv_realloc(struct rx *rx, void *p, size_t old_n, size_t new_n);
void tv_free(struct rx *rx, void *p, size_t n);

/* --- strings --- */
/* A new string copying p[0..n). DERAS_ERANGE past max_output, DERAS_ENOMEM. O(n). */
int tv_str(struct rx *rx, const char *p, size_t n, tv *out);
static inline const char *tv_sp(const tv *v) { return v->u.s->p; }
static inline size_t tv_sn(const tv *v) { return v->u.s->len; }

/* --- lists, tuples --- */
int tv_list_new(struct rx *rx, int type, size_t cap, tv *out);
/* Append, taking ownership of `item` (released on failure too). Only for a list being
 * built (one reference). DERAS_EUNSUPPORTED when nesting passes max_depth. */
int tv_list_push(struct rx *rx, tv *list, tv item);

/* --- dicts and namespaces --- */
int tv_dict_new(struct rx *rx, int type, size_t cap, tv *out);
/* Insert or replace, taking ownership of k and v. DERAS_EFORMAT for an unhashable key
 * (list, dict), as Python's TypeError. O(1) on average. */
int tv_dict_set(struct rx *rx, tv *dict, tv k, tv v);
/* The value under `key` (borrowed), or NULL. O(1) on average; unhashable keys find
 * nothing. */
const tv *tv_dict_get(const tv *dict, const tv *key);
const tv *tv_dict_get_str(const tv *dict, const char *p, size_t n);
/* Remove every entry (a namespace at the end of a render: breaks cycles through it). */
void tv_dict_clear(struct rx *rx, tv *dict);

/* --- Python semantics --- */
bool tv_truthy(const tv *v);
/* Python ==: numbers by value (1 == 1.0 == True), containers element-wise, dicts by
 * content, Undefined == Undefined, namespaces by identity (so no cycle is walked). */
bool tv_eq(const tv *a, const tv *b);
/* Python <: numbers, strings (code point order), lists and tuples lexicographically.
 * *lt = a < b. DERAS_EFORMAT for unorderable types (TypeError), with a message. */
int tv_lt(const tv *a, const tv *b, bool *lt);
/* Python's type name of v, for messages ("str", "NoneType", "Undefined", ...). */
const char *tv_typename(const tv *v);
/* A JSON value as a template value: objects to dicts (in their order), arrays to lists,
 * integers to int, reals to float. O(size); DERAS_EUNSUPPORTED past max_depth. */
int tv_from_json(struct rx *rx, const json_t *j, tv *out);

/* Stable merge sort of n elements of `size` bytes by a "less than" that may fail (Python's
 * TypeError); the first failure stops the sort and is returned. O(n log n) comparisons,
 * n * size bytes of scratch. */
typedef int (*tv_lt_fn)(void *ctx, const void *a, const void *b, bool *lt);
int tv_sort(void *base, size_t n, size_t size, tv_lt_fn lt, void *ctx);

/* --- string builder: every printed byte is counted against max_output ---
 * The buffer keeps room for a string header in front, so tsb_take turns it into a string
 * value without copying the text. */
typedef struct sbuf {
    struct rx *rx;
    char *buf; /* the allocation: header room, then the text */
    char *p;   /* the text (buf + the header), NUL-terminated once anything was put */
    size_t len, cap;
} sbuf;

static inline void tsb_init(sbuf *b, struct rx *rx) { *b = (sbuf){.rx = rx}; }
int tsb_put(sbuf *b, const char *p, size_t n);   /* DERAS_ERANGE, DERAS_ENOMEM */
int tsb_reserve(sbuf *b, size_t n);              /* room for n more bytes, same errors */
int tsb_putc(sbuf *b, char c);
int tsb_puts(sbuf *b, const char *s);
int tsb_putcp(sbuf *b, uint32_t cp); /* one code point, UTF-8 encoded */
/* The built string as a value (no copy); the builder is empty afterwards. */
int tsb_take(sbuf *b, tv *out);
/* The end of building with status st: on failure (st != 0) frees the builder and returns
 * st, else tsb_take. Lets a builder's users keep one exit. */
int tsb_finish(sbuf *b, int st, tv *out);
/* The text as a plain malloc'd NUL-terminated block the caller frees (moved to the front of
 * the allocation, O(len)); the builder is empty afterwards. NULL when out of memory. */
char *tsb_detach(sbuf *b, size_t *len);
void tsb_free(sbuf *b);

#endif
