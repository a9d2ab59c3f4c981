/* SPDX-License-Identifier: Apache-2.0 */
/* json_schema.c - JSON Schema to GBNF: the walk over schemas (json_schema.h has what is
 * supported; js_prims.c writes the leaves).
 *
 * Every schema node becomes a rule. Objects: the properties in schema order, each optional
 * one skippable, with the commas right: for n properties, A_i ("the rest from i, something
 * was written before": each optional property as ( ws "," ws kv )?, each required one
 * without the ?) and F_i ("the rest from i, nothing written yet": kv_i A_(i+1), or, when
 * property i is optional, F_(i+1)); extra properties (additionalProperties) after the
 * declared ones. Arrays: the prefix items by position, then the repeated items with
 * minItems / maxItems as a bounded repetition. $ref targets get one rule each (memoized
 * by target), so recursive schemas give recursive grammars. Nesting is bounded by
 * max_depth, the text by max_output. Costs: O(schema + output).
 */
#include "common/schema/json_schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/schema/js_internal.h"

void jschema_opts_default(jschema_opts *o)
{
    o->compact = false;
    o->max_indent = 20;
    o->allow_additional = false;
    o->max_digits = 18;
    o->max_depth = 64;
    o->max_output = 1u << 20;
}

int js_fail(js *c, int code, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return deras_fail(code, "json_schema: at %s: %s", c->ptr_len ? c->ptr : "/", msg);
}

int js_rule(js *c, int *id)
{
    if (c->n_rules >= 1 << 20)
        return js_fail(c, DERAS_ERANGE, "more than 2^20 rules");
    *id = c->n_rules++;
    return DERAS_OK;
}

int js_emit(js *c, int id, const sbuf *body)
{
    int rc = sb_printf(&c->out, "r%d ::= ", id);
    if (!rc)
        rc = body->n ? sb_put(&c->out, body->s, body->n) : sb_puts(&c->out, "\"\"");
    if (!rc)
        rc = sb_puts(&c->out, "\n");
    if (!rc && c->out.n > c->o.max_output)
        rc = js_fail(c, DERAS_ERANGE, "the grammar exceeds max_output %zu bytes", c->o.max_output);
    return rc;
}

const char *js_ws(const js *c)
{
    return c->o.compact ? " " : " ws ";
}

int js_need(js *c, unsigned prim)
{
    static const unsigned order[] = {JP_WS, JP_CHAR, JP_STRING, JP_INT, JP_NUMBER, JP_DATE,
                                     JP_TIME, JP_VALUE};
    if (prim & JP_VALUE)
        prim |= JP_STRING | JP_CHAR | JP_NUMBER | JP_INT;
    if (prim & JP_STRING)
        prim |= JP_CHAR;
    if (prim & JP_NUMBER)
        prim |= JP_INT;
    if (!c->o.compact)
        prim |= JP_WS;
    const char *w = js_ws(c);
    int rc = DERAS_OK;
    for (size_t i = 0; i < sizeof order / sizeof *order && !rc; i++) {
        unsigned p = order[i];
        if (!(prim & p) || (c->have & p))
            continue;
        c->have |= p;
        switch (p) {
        case JP_WS:
            rc = sb_printf(&c->out, "ws ::= ( \" \" | \"\\n\" [ \\t]{0,%d} )?\n", c->o.max_indent);
            break;
        case JP_CHAR:
            /* \u escapes name scalar values: a high surrogate only before a low one */
            rc = sb_puts(&c->out, "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" "
                         "( [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] "
                         "[0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F]{2} ) )\n");
            break;
        case JP_STRING:
            rc = sb_puts(&c->out, "jstring ::= \"\\\"\" jchar* \"\\\"\"\n");
            break;
        case JP_INT:
            rc = sb_printf(&c->out, "jint ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,%d} )\n",
                           c->o.max_digits - 1);
            break;
        case JP_NUMBER:
            rc = sb_printf(&c->out, "jnumber ::= jint ( \".\" [0-9]{1,%d} )? ( [eE] [-+]? "
                           "[0-9]{1,2} )?\n", c->o.max_digits);
            break;
        case JP_DATE:
            /* the Gregorian calendar: days per month, February 29 in leap years, no year 0 */
            rc = sb_puts(&c->out,
                         "jdate ::= jyear \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | "
                         "[12] [0-9] | \"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] "
                         "[0-9] | \"30\" ) | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | jleap "
                         "\"-02-29\"\n"
                         "jyear ::= [1-9] [0-9]{3} | \"0\" [1-9] [0-9]{2} | \"00\" [1-9] [0-9] | \"000\" [1-9]\n"
                         "jleap ::= [0-9]{2} ( \"0\" [48] | [2468] [048] | [13579] [26] ) | ( \"0\" [48] | "
                         "[2468] [048] | [13579] [26] ) \"00\"\n");
            break;
        case JP_TIME:
            rc = sb_puts(&c->out, "jtime ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" "
                         "[0-5] [0-9] ( \".\" [0-9]{1,9} )? ( \"Z\" | [+\\x2D] ( [01] [0-9] | "
                         "\"2\" [0-3] ) \":\" [0-5] [0-9] )\n");
            break;
        case JP_VALUE:
            rc = sb_printf(&c->out, "jvalue ::= jobject | jarray | jstring | jnumber | \"true\" | "
                           "\"false\" | \"null\"\n"
                           "jobject ::= \"{\"%s( jstring%s\":\"%sjvalue (%s\",\"%sjstring%s\":\"%s"
                           "jvalue )*%s)? \"}\"\n"
                           "jarray ::= \"[\"%s( jvalue (%s\",\"%sjvalue )*%s)? \"]\"\n",
                           w, w, w, w, w, w, w, w, w, w, w, w);
            break;
        }
    }
    return rc;
}

/* ---- the JSON pointer of messages ---- */

static size_t ptr_push(js *c, const char *seg)
{
    size_t at = c->ptr_len;
    int n = snprintf(c->ptr + at, sizeof c->ptr - at, "/%s", seg);
    if (n > 0)
        c->ptr_len = at + (size_t)n < sizeof c->ptr ? at + (size_t)n : sizeof c->ptr - 1;
    return at;
}

static void ptr_pop(js *c, size_t at)
{
    c->ptr_len = at;
    c->ptr[at] = 0;
}

/* ---- keywords ---- */

static const char *const SUPPORTED[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
    "oneOf", "allOf", "$ref", "items", "prefixItems", "minItems", "maxItems", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "additionalItems", "uniqueItems", NULL};
static const char *const REFUSED[] = {
    "multipleOf", "not", "if", "then", "else", "patternProperties", "propertyNames",
    "dependentRequired", "dependentSchemas", "dependencies", "contains", "minContains",
    "maxContains", "minProperties", "maxProperties", "unevaluatedProperties",
    "unevaluatedItems", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef",
    "$recursiveAnchor", "contentEncoding", "contentMediaType", "contentSchema", NULL};

static bool in(const char *const *set, const char *k)
{
    for (; *set; set++)
        if (!strcmp(*set, k))
            return true;
    return false;
}

/* Refused keywords name themselves; unknown ones (annotations, extensions) are ignored.
 * *n_valid: supported keywords present other than the combinators in `except`. */
static int check_keywords(js *c, const json_t *s, int *n_valid)
{
    const char *k;
    const json_t *v;
    *n_valid = 0;
    json_object_foreach((json_t *)s, k, v) {
        if (in(REFUSED, k) || (!strcmp(k, "uniqueItems") && json_is_true(v)))
            return js_fail(c, DERAS_EUNSUPPORTED, "keyword '%s' is not supported", k);
        if (!strcmp(k, "additionalItems") && !json_is_true(v))
            return js_fail(c, DERAS_EUNSUPPORTED, "keyword 'additionalItems' is not supported "
                           "(use prefixItems and items)");
        if (in(SUPPORTED, k) && strcmp(k, "anyOf") && strcmp(k, "oneOf") && strcmp(k, "allOf") &&
            strcmp(k, "$ref") && strcmp(k, "uniqueItems") && strcmp(k, "additionalItems"))
            (*n_valid)++;
    }
    return DERAS_OK;
}

static int gen(js *c, const json_t *s, int *id);

/* A new rule that is any JSON value. */
static int any_value(js *c, int *id)
{
    int rc = js_need(c, JP_VALUE);
    if (!rc)
        rc = js_rule(c, id);
    if (!rc)
        rc = sb_printf(&c->out, "r%d ::= jvalue\n", *id);
    return rc;
}

/* "#", "#/a/b/0" within the document; ~1 is '/', ~0 is '~'. */
static int resolve(js *c, const char *ref, const json_t **out)
{
    if (ref[0] != '#')
        return js_fail(c, DERAS_EUNSUPPORTED, "$ref '%.64s': only references within the schema "
                       "(\"#...\") are supported", ref);
    const json_t *cur = c->root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/')
            return js_fail(c, DERAS_EUNSUPPORTED, "$ref '%.64s': not a JSON pointer", ref);
        p++;
        char seg[256];
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1'))
                ch = *p++ == '0' ? '~' : '/';
            if (n + 1 >= sizeof seg)
                return js_fail(c, DERAS_ERANGE, "$ref '%.64s': a segment over 255 bytes", ref);
            seg[n++] = ch;
        }
        seg[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            char *end;
            long i = strtol(seg, &end, 10);
            cur = *end || !n ? NULL : json_array_get(cur, (size_t)i);
        } else {
            cur = NULL;
        }
        if (!cur)
            return js_fail(c, DERAS_ENOTFOUND, "$ref '%.64s' points at nothing", ref);
    }
    *out = cur;
    return DERAS_OK;
}

static int gen_ref(js *c, const json_t *ref, int *id)
{
    if (!json_is_string(ref))
        return js_fail(c, DERAS_EFORMAT, "'$ref' must be a string");
    const json_t *t = NULL;
    int rc = resolve(c, json_string_value(ref), &t);
    if (rc)
        return rc;
    for (int i = 0; i < c->n_refs; i++)
        if (c->ref_t[i] == t) {
            *id = c->ref_r[i];
            return DERAS_OK;
        }
    int r = -1;
    if ((rc = js_rule(c, &r)))
        return rc;
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? c->cap_refs * 2 : 16;
        const json_t **nt = realloc(c->ref_t, (size_t)cap * sizeof *nt);
        if (nt)
            c->ref_t = nt;
        int *nr = nt ? realloc(c->ref_r, (size_t)cap * sizeof *nr) : NULL;
        if (!nt || !nr)
            return deras_fail(DERAS_ENOMEM, "json_schema: out of memory");
        c->ref_r = nr;
        c->cap_refs = cap;
    }
    c->ref_t[c->n_refs] = t;
    c->ref_r[c->n_refs++] = r;
    int inner;
    size_t at = ptr_push(c, json_string_value(ref));
    if (!(rc = gen(c, t, &inner))) {
        sbuf b = {0};
        if (!(rc = sb_printf(&b, "r%d", inner)))
            rc = js_emit(c, r, &b);
        sb_free(&b);
    }
    ptr_pop(c, at);
    *id = r;
    return rc;
}

/* ---- objects ---- */

typedef struct prop {
    const char *key;
    int value;       /* rule */
    bool required;
} prop;

static bool is_required(const json_t *req, const char *key)
{
    size_t i;
    const json_t *v;
    json_array_foreach(req, i, v) {
        if (json_is_string(v) && !strcmp(json_string_value(v), key))
            return true;
    }
    return false;
}

static int kv(js *c, sbuf *b, const char *key, int value)
{
    json_t *k = json_string(key);
    char *lit = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
    json_decref(k);
    if (!lit)
        return deras_fail(DERAS_ENOMEM, "json_schema: out of memory");
    const char *w = js_ws(c);
    int rc = js_literal(b, lit, strlen(lit));
    free(lit);
    return rc ? rc : sb_printf(b, "%s\":\"%sr%d", w, w, value);
}

static int gen_object(js *c, const json_t *s, sbuf *body)
{
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *add = json_object_get(s, "additionalProperties");
    if ((props && !json_is_object(props)) || (req && !json_is_array(req)))
        return js_fail(c, DERAS_EFORMAT, "'properties' must be an object, 'required' an array");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return js_fail(c, DERAS_EFORMAT, "'additionalProperties' must be a boolean or a schema");
    size_t n = props ? json_object_size(props) : 0, n_req = req ? json_array_size(req) : 0;
    prop *p = calloc(n + n_req + 1, sizeof *p);
    int *A = calloc(n + n_req + 2, sizeof *A), *F = calloc(n + n_req + 2, sizeof *F);
    sbuf b = {0};
    int rc = DERAS_OK, extra = -1;
    if (!p || !A || !F) {
        rc = deras_fail(DERAS_ENOMEM, "json_schema: out of memory");
        goto done;
    }
    size_t m = 0;
    const char *key;
    const json_t *sub;
    size_t at = ptr_push(c, "properties");
    json_object_foreach((json_t *)props, key, sub) {
        size_t at2 = ptr_push(c, key);
        p[m] = (prop){.key = key, .required = req && is_required(req, key)};
        rc = gen(c, sub, &p[m++].value);
        ptr_pop(c, at2);
        if (rc)
            break;
    }
    ptr_pop(c, at);
    for (size_t i = 0; i < n_req && !rc; i++) { /* required but not described: any value */
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) {
            rc = js_fail(c, DERAS_EFORMAT, "'required' must list strings");
            break;
        }
        if (props && json_object_get(props, json_string_value(r)))
            continue;
        bool dup = false;
        for (size_t j = 0; j < m && !dup; j++)
            dup = !strcmp(p[j].key, json_string_value(r));
        if (dup)
            continue;
        p[m].key = json_string_value(r);
        p[m].required = true;
        rc = any_value(c, &p[m++].value);
    }
    /* absent additionalProperties: the option, but any object when no property is named */
    bool allow = add ? !json_is_false(add) : (c->o.allow_additional || !props);
    if (!rc && allow) {
        if (add && json_is_object(add)) {
            size_t at3 = ptr_push(c, "additionalProperties");
            rc = gen(c, add, &extra);
            ptr_pop(c, at3);
        } else {
            rc = any_value(c, &extra);
        }
    }
    if (!rc && allow)
        rc = js_need(c, JP_STRING);
    for (size_t i = 0; i <= m && !rc; i++)
        if (!(rc = js_rule(c, &A[i])))
            rc = js_rule(c, &F[i]);
    if (rc)
        goto done;
    const char *w = js_ws(c);
    /* A_m, F_m: the extra properties */
    if (allow)
        rc = sb_printf(&b, "(%s\",\"%sjstring%s\":\"%sr%d )*", w, w, w, w, extra);
    if (!rc)
        rc = js_emit(c, A[m], &b);
    b.n = 0;
    if (!rc && allow && !(rc = sb_printf(&b, "jstring%s\":\"%sr%d r%d", w, w, extra, A[m])))
        rc = js_emit(c, F[m], &b);
    for (size_t i = m; i-- > 0 && !rc;) {
        b.n = 0;
        rc = sb_printf(&b, "%s%s\",\"%s", p[i].required ? "" : "(", w, w);
        if (!rc && !(rc = kv(c, &b, p[i].key, p[i].value)))
            rc = sb_printf(&b, "%s r%d", p[i].required ? "" : " )?", A[i + 1]);
        if (!rc)
            rc = js_emit(c, A[i], &b);
        b.n = 0;
        if (!rc && !(rc = kv(c, &b, p[i].key, p[i].value)))
            rc = sb_printf(&b, " r%d", A[i + 1]);
        if (!rc && !p[i].required && (i + 1 < m || allow))
            rc = sb_printf(&b, " | r%d", F[i + 1]);
        if (!rc)
            rc = js_emit(c, F[i], &b);
    }
    bool any_required = false;
    for (size_t i = 0; i < m; i++)
        any_required |= p[i].required;
    if (rc)
        goto done;
    if (m == 0 && !allow)
        rc = sb_printf(body, "\"{\"%s\"}\"", w);
    else if (any_required)
        rc = sb_printf(body, "\"{\"%sr%d%s\"}\"", w, F[0], w);
    else
        rc = sb_printf(body, "\"{\"%s( r%d%s)? \"}\"", w, F[0], w);
done:
    sb_free(&b);
    free(p);
    free(A);
    free(F);
    return rc;
}

/* ---- arrays ---- */

static int count(js *c, const json_t *s, const char *kw, long long *v)
{
    const json_t *j = json_object_get(s, kw);
    *v = -1;
    if (!j)
        return DERAS_OK;
    if (!json_is_integer(j) || json_integer_value(j) < 0)
        return js_fail(c, DERAS_EFORMAT, "'%s' must be a non-negative integer", kw);
    *v = json_integer_value(j);
    return DERAS_OK;
}

static int gen_array(js *c, const json_t *s, sbuf *body)
{
    const json_t *items = json_object_get(s, "items"), *pre = json_object_get(s, "prefixItems");
    const json_t *rest = items;
    if (!pre && json_is_array(items)) { /* draft 4-2019 tuples: extra items are free */
        pre = items;
        rest = NULL;
    }
    if ((pre && !json_is_array(pre)) || (rest && !json_is_object(rest) && !json_is_boolean(rest)))
        return js_fail(c, DERAS_EFORMAT, "'items' must be a schema, 'prefixItems' an array");
    long long m, M, k = pre ? (long long)json_array_size(pre) : 0;
    int rc = count(c, s, "minItems", &m);
    if (rc || (rc = count(c, s, "maxItems", &M)))
        return rc;
    if (m < 0)
        m = 0;
    bool no_rest = rest && json_is_false(rest);
    if (no_rest && (M < 0 || M > k))
        M = k;
    if (M >= 0 && M < m)
        return js_fail(c, DERAS_EUNSUPPORTED, "maxItems below minItems: nothing matches");
    if (m > JS_MAX_REPEAT)
        return js_fail(c, DERAS_ERANGE, "minItems %lld over %d", m, JS_MAX_REPEAT);
    if (M > JS_MAX_REPEAT)
        M = -1; /* not enforced past the bound (docs) */
    const char *w = js_ws(c);
    if (M == 0)
        return sb_printf(body, "\"[\"%s\"]\"", w);
    int *item = calloc((size_t)k + 1, sizeof *item), *P = calloc((size_t)k + 2, sizeof *P);
    sbuf b = {0};
    if (!item || !P) {
        rc = deras_fail(DERAS_ENOMEM, "json_schema: out of memory");
        goto done;
    }
    for (long long i = 0; i < k && !rc; i++) {
        char seg[48];
        snprintf(seg, sizeof seg, "prefixItems/%lld", i);
        size_t at = ptr_push(c, seg);
        rc = gen(c, json_array_get(pre, (size_t)i), &item[i]);
        ptr_pop(c, at);
    }
    int rest_rule = -1;
    if (!rc && !no_rest) {
        size_t at = ptr_push(c, "items");
        if (rest && json_is_object(rest))
            rc = gen(c, rest, &rest_rule);
        else
            rc = any_value(c, &rest_rule);
        ptr_pop(c, at);
    }
    long long kk = k > 1 ? k : 1; /* positions the prefix rules and the first item cover */
    for (long long i = 1; i <= kk && !rc; i++)
        rc = js_rule(c, &P[i]);
    if (rc)
        goto done;
    /* the tail after position kk - 1: the repeated items */
    long long lo = m > kk ? m - kk : 0, hi = M < 0 ? -1 : M - kk;
    if (no_rest || (hi == 0) || (k == 0 && rest_rule < 0))
        rc = sb_puts(&b, "\"\"");
    else if (hi < 0)
        rc = sb_printf(&b, "(%s\",\"%sr%d ){%lld,}", w, w, rest_rule, lo);
    else
        rc = sb_printf(&b, "(%s\",\"%sr%d ){%lld,%lld}", w, w, rest_rule, lo, hi);
    if (!rc)
        rc = js_emit(c, P[kk], &b);
    for (long long i = kk - 1; i >= 1 && !rc; i--) { /* prefix position i */
        b.n = 0;
        if (M >= 0 && i >= M)
            rc = sb_puts(&b, "\"\"");
        else
            rc = sb_printf(&b, "%s%s\",\"%sr%d r%d%s", i < m ? "" : "(", w, w, item[i], P[i + 1],
                           i < m ? "" : " )?");
        if (!rc)
            rc = js_emit(c, P[i], &b);
    }
    int first = k > 0 ? item[0] : rest_rule;
    if (rc)
        goto done;
    if (m >= 1)
        rc = sb_printf(body, "\"[\"%sr%d r%d%s\"]\"", w, first, P[1], w);
    else
        rc = sb_printf(body, "\"[\"%s( r%d r%d%s)? \"]\"", w, first, P[1], w);
done:
    sb_free(&b);
    free(item);
    free(P);
    return rc;
}

/* ---- types and combinators ---- */

static const char *infer_type(const json_t *s)
{
    static const char *const obj[] = {"properties", "required", "additionalProperties", NULL};
    static const char *const arr[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
    static const char *const str[] = {"minLength", "maxLength", "pattern", "format", NULL};
    static const char *const num[] = {"minimum", "maximum", "exclusiveMinimum",
                                      "exclusiveMaximum", NULL};
    for (int i = 0; obj[i]; i++)
        if (json_object_get(s, obj[i]))
            return "object";
    for (int i = 0; arr[i]; i++)
        if (json_object_get(s, arr[i]))
            return "array";
    for (int i = 0; str[i]; i++)
        if (json_object_get(s, str[i]))
            return "string";
    for (int i = 0; num[i]; i++)
        if (json_object_get(s, num[i]))
            return "number";
    return NULL;
}

static int gen_type(js *c, const json_t *s, const char *t, sbuf *body)
{
    if (!strcmp(t, "string"))
        return js_string(c, s, body);
    if (!strcmp(t, "integer"))
        return js_integer(c, s, body);
    if (!strcmp(t, "number"))
        return js_number(c, s, body);
    if (!strcmp(t, "boolean"))
        return sb_puts(body, "( \"true\" | \"false\" )");
    if (!strcmp(t, "null"))
        return sb_puts(body, "\"null\"");
    if (!strcmp(t, "object"))
        return gen_object(c, s, body);
    if (!strcmp(t, "array"))
        return gen_array(c, s, body);
    return js_fail(c, DERAS_EFORMAT, "unknown type '%.32s'", t);
}

static int gen_alts(js *c, const json_t *list, const char *kw, sbuf *body)
{
    if (!json_is_array(list) || json_array_size(list) == 0)
        return js_fail(c, DERAS_EFORMAT, "'%s' must be a non-empty array", kw);
    size_t i;
    const json_t *v;
    int rc = DERAS_OK;
    json_array_foreach(list, i, v) {
        char seg[48];
        snprintf(seg, sizeof seg, "%s/%zu", kw, i);
        size_t at = ptr_push(c, seg);
        int r;
        if (!(rc = gen(c, v, &r)))
            rc = sb_printf(body, "%sr%d", i ? " | " : "", r);
        ptr_pop(c, at);
        if (rc)
            break;
    }
    return rc;
}

/* The body of schema s. */
static int gen_body(js *c, const json_t *s, sbuf *body)
{
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        int rc = js_need(c, JP_VALUE);
        return rc ? rc : sb_puts(body, "jvalue");
    }
    if (json_is_false(s))
        return js_fail(c, DERAS_EUNSUPPORTED, "the schema 'false' matches nothing");
    if (!json_is_object(s))
        return js_fail(c, DERAS_EFORMAT, "a schema must be an object or a boolean");
    int n_valid, rc = check_keywords(c, s, &n_valid);
    if (rc)
        return rc;
    const json_t *ref = json_object_get(s, "$ref"), *any = json_object_get(s, "anyOf");
    const json_t *one = json_object_get(s, "oneOf"), *all = json_object_get(s, "allOf");
    const json_t *en = json_object_get(s, "enum"), *co = json_object_get(s, "const");
    int n_comb = !!ref + !!any + !!one + !!all;
    if (n_comb > 1 || (n_comb && n_valid))
        return js_fail(c, DERAS_EUNSUPPORTED, "%s together with other keywords is not supported",
                       ref ? "$ref" : any ? "anyOf" : one ? "oneOf" : "allOf");
    if (ref) {
        int r = -1;
        return (rc = gen_ref(c, ref, &r)) ? rc : sb_printf(body, "r%d", r);
    }
    if (any || one)
        return gen_alts(c, any ? any : one, any ? "anyOf" : "oneOf", body);
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1)
            return js_fail(c, DERAS_EUNSUPPORTED, "allOf with other than one member is not "
                           "supported");
        return gen_alts(c, all, "allOf", body);
    }
    if (co)
        return js_enum(c, co, true, body);
    if (en)
        return js_enum(c, en, false, body);
    const json_t *type = json_object_get(s, "type");
    if (!type) {
        const char *t = infer_type(s);
        if (!t) {
            rc = js_need(c, JP_VALUE);
            return rc ? rc : sb_puts(body, "jvalue");
        }
        return gen_type(c, s, t, body);
    }
    if (json_is_string(type))
        return gen_type(c, s, json_string_value(type), body);
    if (!json_is_array(type) || json_array_size(type) == 0)
        return js_fail(c, DERAS_EFORMAT, "'type' must be a string or a non-empty array");
    size_t i;
    const json_t *t;
    json_array_foreach(type, i, t) {
        if (!json_is_string(t))
            return js_fail(c, DERAS_EFORMAT, "'type' must list strings");
        if ((rc = sb_puts(body, i ? " | ( " : "( ")) ||
            (rc = gen_type(c, s, json_string_value(t), body)) || (rc = sb_puts(body, " )")))
            return rc;
    }
    return DERAS_OK;
}

static int gen(js *c, const json_t *s, int *id)
{
    if (++c->depth > c->o.max_depth)
        return js_fail(c, DERAS_ERANGE, "schema nested deeper than max_depth %d", c->o.max_depth);
    sbuf body = {0};
    int rc = js_rule(c, id);
    if (!rc)
        rc = gen_body(c, s, &body);
    if (!rc)
        rc = js_emit(c, *id, &body);
    sb_free(&body);
    c->depth--;
    return rc;
}

static int finish(js *c, int root, char **out, size_t *out_len)
{
    sbuf r = {0};
    int rc = sb_printf(&r, "root ::= r%d\n", root);
    if (!rc)
        rc = sb_put(&r, c->out.s ? c->out.s : "", c->out.n);
    if (rc) {
        sb_free(&r);
        return rc;
    }
    *out = r.s;
    *out_len = r.n;
    return DERAS_OK;
}

static int check_opts(const jschema_opts *o)
{
    if (o->max_indent < 0 || o->max_indent > 1000 || o->max_digits < 1 || o->max_digits > 20 ||
        o->max_depth < 1 || o->max_output < 64)
        return deras_fail(DERAS_EINVAL, "json_schema: options out of range");
    return DERAS_OK;
}

int jschema_to_gbnf_json(const json_t *schema, const jschema_opts *o, char **out,
                         size_t *out_len)
{
    if (!out || !out_len || !schema)
        return deras_fail(DERAS_EINVAL, "jschema_to_gbnf_json: NULL argument");
    *out = NULL;
    *out_len = 0;
    js c = {.root = schema};
    if (o)
        c.o = *o;
    else
        jschema_opts_default(&c.o);
    int rc = check_opts(&c.o), root = -1;
    if (!rc)
        rc = js_need(&c, 0); /* ws, unless compact */
    if (!rc)
        rc = gen(&c, schema, &root);
    if (!rc)
        rc = finish(&c, root, out, out_len);
    sb_free(&c.out);
    free(c.ref_t);
    free(c.ref_r);
    return rc;
}

int jschema_to_gbnf(const char *schema, size_t len, const jschema_opts *o, char **out,
                    size_t *out_len)
{
    if (!out || !out_len || (!schema && len))
        return deras_fail(DERAS_EINVAL, "jschema_to_gbnf: NULL argument");
    *out = NULL;
    *out_len = 0;
    json_error_t err;
    json_t *j = json_loadb(schema ? schema : "", len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                           &err);
    if (!j)
        return deras_fail(DERAS_EFORMAT, "json_schema: not valid JSON at line %d, column %d: %s",
                          err.line, err.column, err.text);
    int rc = jschema_to_gbnf_json(j, o, out, out_len);
    json_decref(j);
    return rc;
}

int jschema_json_object_gbnf(const jschema_opts *o, char **out, size_t *out_len)
{
    if (!out || !out_len)
        return deras_fail(DERAS_EINVAL, "jschema_json_object_gbnf: NULL argument");
    *out = NULL;
    *out_len = 0;
    js c = {0};
    if (o)
        c.o = *o;
    else
        jschema_opts_default(&c.o);
    int rc = check_opts(&c.o);
    if (!rc)
        rc = js_need(&c, JP_VALUE);
    sbuf r = {0};
    if (!rc && !(rc = sb_puts(&r, "root ::= jobject\n")))
        rc = sb_put(&r, c.out.s, c.out.n);
    sb_free(&c.out);
    if (rc) {
        sb_free(&r);
        return rc;
    }
    *out = r.s;
    *out_len = r.n;
    return DERAS_OK;
}
