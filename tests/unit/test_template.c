/* SPDX-License-Identifier: Apache-2.0 */
/* test_template.c - the chat-template interpreter (common/template) piece by piece:
 * whitespace control, loops and the loop object, scoping, Undefined, filters, tests,
 * methods, macros, Markup, errors with their lines and codes, the sandbox bounds (each
 * stopped by its own bound, quickly), the API contract, and concurrent renders of one
 * template. Expected strings are what Jinja2 3.1 renders in transformers' environment
 * (checked with tests/ref/jinja_reference.py when they were written).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base/status.h"
#include "common/template/template.h"

static const char *CTX =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi <b> & 'x'\"},"
    " {\"role\": \"assistant\", \"content\": \"Hello\", \"tool_calls\": [{\"type\": \"function\","
    "   \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [true, null, 2.5]}}}]}],"
    " \"tools\": null, \"add_generation_prompt\": true, \"bos_token\": \"<s>\","
    " \"n\": 3, \"s\": \"Hello World\", \"l\": [3, 1, 2], \"d\": {\"b\": 1, \"a\": 2},"
    " \"u\": \"Gr\\u00fc\\u00dfe \\u4e16\\u754c\"}";

/* Render src with the context (NULL: CTX) and limits (NULL: defaults). */
static int render(const char *src, const char *ctx, const tmpl_limits *lim, char **out)
{
    json_error_t je;
    json_t *c = json_loads(ctx ? ctx : CTX, 0, &je);
    if (!c)
        fail_msg("bad test context: %s", je.text);
    tmpl_t *t = NULL;
    size_t n;
    *out = NULL;
    int st = tmpl_compile(src, strlen(src), lim, &t);
    if (!st)
        st = tmpl_render(t, c, out, &n);
    tmpl_destroy(&t);
    json_decref(c);
    return st;
}

static void expect_ctx(const char *src, const char *ctx, const char *want)
{
    char *out;
    int st = render(src, ctx, NULL, &out);
    if (st)
        fail_msg("%s\n  failed: %s %s", src, deras_status_name(st), deras_errmsg());
    if (strcmp(out, want))
        fail_msg("%s\n  want [%s]\n  got  [%s]", src, want, out);
    free(out);
}

static void expect(const char *src, const char *want) { expect_ctx(src, NULL, want); }

/* Fails with `code` and a message containing `msg`. */
static void expect_fail_lim(const char *src, const tmpl_limits *lim, int code, const char *msg)
{
    char *out;
    int st = render(src, NULL, lim, &out);
    if (st != code || !strstr(deras_errmsg(), msg))
        fail_msg("%s\n  want %s \"%s\"\n  got  %s \"%s\"", src, deras_status_name(code), msg,
                 deras_status_name(st), st ? deras_errmsg() : out);
    free(out);
}

static void expect_fail(const char *src, int code, const char *msg)
{
    expect_fail_lim(src, NULL, code, msg);
}

static void test_whitespace_control(void **s)
{
    (void)s;
    /* trim_blocks drops the newline after a block tag; lstrip_blocks its indentation */
    expect("{% if true %}\n  yes\n{% endif %}\nafter", "  yes\nafter");
    expect("  {% if true %}\n    x\n  {% endif %}\n", "    x\n");
    /* the minus strips all whitespace on its side, newlines included */
    expect("a  \n  {%- if true -%}  \n  b  \n  {%- endif %}", "ab");
    expect("a {{- 'b' -}} \n c", "abc");
    /* lstrip_blocks does not touch {{ }}; {%+ keeps the indentation */
    expect("  {{ 'v' }}", "  v");
    expect("  {%+ if true %}x{% endif %}", "  x");
    /* comments take the same whitespace rules; raw is data */
    expect("a\n  {# note #}\nb", "a\nb");
    expect("{% raw %}{{ not parsed }}{% endraw %}", "{{ not parsed }}");
    /* one trailing newline is dropped; \r\n is \n */
    expect("x\n", "x");
    expect("x\n\n", "x\n");
    expect("a\r\nb{% if true %}\r\nc{% endif %}", "a\nbc");
}

static void test_loops(void **s)
{
    (void)s;
    expect("{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
           "{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
           "10TrueFalse332;21FalseFalse321;32FalseTrue310;");
    expect("{% for x in l %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }}|{% endfor %}",
           ">3>1|3>1>2|1>2>|");
    /* a filtered loop counts only what passes; loop.last looks ahead through the filter */
    expect("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.last }}{{ loop.length }},{% endfor %}",
           "2False2,4True2,");
    expect("{% for x in [] %}x{% else %}empty{% endfor %}", "empty");
    expect("{% for k, v in d.items() %}{{ k }}={{ v }} {% endfor %}", "b=1 a=2 ");
    expect("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}"
           "{% break %}{% endif %}{{ i }}{% endfor %}", "013");
    expect("{% for c in 'ab' %}{{ loop.cycle('x', 'y') }}{{ c }}{% endfor %}", "xayb");
    expect("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}"
           "{{ loop.index }}|{% endfor %}", "1x2y1|1x2y2|");
    expect("{% for m in messages[::-1] %}{{ m.role[0] }}{% endfor %}", "aus");
}

static void test_scoping(void **s)
{
    (void)s;
    /* a set in a loop body does not leak; in an if it does; namespaces carry state out */
    expect("{% set x = 1 %}{% for i in l %}{% set x = i %}{% endfor %}{{ x }}", "1");
    expect("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", "2");
    expect("{% set ns = namespace(c=0, last=none) %}{% for i in l %}{% set ns.c = ns.c + i %}"
           "{% set ns.last = i %}{% endfor %}{{ ns.c }} {{ ns.last }}", "6 2");
    expect("{% set a, b = 1, 2 %}{{ b }}{{ a }}", "21");
    expect("{% set x %}  {{ s | upper }} {% endset %}[{{ x }}]", "[  HELLO WORLD ]");
    expect("{% set x | trim %}  padded  {% endset %}[{{ x }}]", "[padded]");
    /* a macro sees the top level at call time, not the caller's loop variables */
    expect("{% macro m(a, b='d') %}{{ a }}{{ b }}{{ y }}{{ i }}{% endmacro %}{% set y = 5 %}"
           "{% for i in [1] %}{{ m(1) }}{{ m(2, b=3) }}{% endfor %}", "1d5235");
    expect("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
           "(1, 2){'k': 3}");
    expect("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
           "321");
    expect("{% set x = 1 %}{% generation %}{% set x = 2 %}{{ x }}{% endgeneration %}{{ x }}", "21");
    expect("{% filter upper %}a{{ s }}{% endfilter %}", "AHELLO WORLD");
}

static void test_undefined(void **s)
{
    (void)s;
    expect("[{{ missing }}][{{ missing is defined }}][{{ not missing }}][{{ missing | length }}]"
           "[{{ missing | default('d') }}][{{ missing ~ 'x' }}]", "[][False][True][0][d][x]");
    /* a missing key or attribute of a defined value is Undefined, not an error */
    expect("[{{ messages[0].nope }}][{{ d['zz'] is defined }}][{{ none.x }}][{{ l[10] }}]",
           "[][False][][]");
    expect("{% for x in missing %}x{% else %}none{% endfor %}", "none");
    expect("{{ '' | default('e', true) }}{{ none | default('n') }}", "eNone");
    /* what Jinja2 raises on: attributes of Undefined, arithmetic with it */
    expect_fail("line 1\n{{ missing.attr }}", DERAS_EFORMAT, "template line 2: 'missing' is undefined");
    expect_fail("{{ missing + 1 }}", DERAS_EFORMAT, "'missing' is undefined");
    expect_fail("{{ missing | tojson }}", DERAS_EFORMAT, "not JSON serializable");
}

static void test_filters(void **s)
{
    (void)s;
    expect("{{ messages[2].tool_calls[0].function.arguments | tojson }}",
           "{\"a\": 1, \"b\": [true, null, 2.5]}");
    expect("{{ d | tojson(indent=2) }}", "{\n  \"b\": 1,\n  \"a\": 2\n}");
    expect("{{ d | tojson(sort_keys=true, separators=(',', ':')) }}", "{\"a\":2,\"b\":1}");
    expect("{{ u | tojson }} {{ u | tojson(ensure_ascii=true) }}",
           "\"Gr\xc3\xbc\xc3\x9f" "e \xe4\xb8\x96\xe7\x95\x8c\" \"Gr\\u00fc\\u00dfe \\u4e16\\u754c\"");
    expect("{{ '  x  ' | trim }}|{{ u | length }}|{{ l | join(', ') }}|{{ l | sort | list }}|"
           "{{ l | max }}|{{ d | dictsort }}|{{ d | items | list }}",
           "x|8|3, 1, 2|[1, 2, 3]|3|[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]");
    expect("{{ messages | map(attribute='role') | join(',') }}|"
           "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|"
           "{{ messages | rejectattr('tool_calls', 'defined') | map(attribute='role') | first }}|"
           "{{ ['B', 'a', 'b'] | unique | list }}|{{ ['b', 'A'] | sort }}|{{ l | map('string') | join }}",
           "system,user,assistant|1|system|['B', 'a']|['A', 'b']|312");
    expect("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'x' | indent(2, first=true) }}", "a\n  b\n\n  c|  x");
    expect("{{ '7' | int + 1 }}|{{ '2.9' | int }}|{{ 'x' | int(5) }}|{{ s | upper }}|{{ s | lower }}|"
           "{{ 'hello world' | title }}|{{ s | replace('o', '0') }}|{{ l | first }}{{ l | last }}",
           "8|2|5|HELLO WORLD|hello world|Hello World|Hell0 W0rld|32");
    /* markupsafe: + with a |safe string escapes the plain side, ~ never does */
    expect("{{ '<i>' | safe + messages[1].content }}|{{ '<i>' | safe ~ '<b>' }}|{{ '<b>' | e }}",
           "<i>Hi &lt;b&gt; &amp; &#39;x&#39;|<i><b>|&lt;b&gt;");
}

static void test_tests_methods_ops(void **s)
{
    (void)s;
    expect("{{ s is string }}{{ d is mapping }}{{ l is sequence }}{{ n is number }}{{ true is number }}"
           "{{ none is none }}{{ l is iterable }}{{ 3 is odd }}{{ n is divisibleby 3 }}{{ 'a' is in s }}"
           "{{ s is eq 'Hello World' }}{{ 2.5 is even }}",
           "TrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueFalse");
    expect("{{ s.split() }}{{ s.split('o', 1) }}{{ '  x '.strip() }}{{ s.startswith('He') }}"
           "{{ s.endswith(('x', 'ld')) }}{{ s.find('o') }}{{ s.replace('l', 'L', 2) }}"
           "{{ '{} and {name}'.format(1, name='b') }}{{ ','.join(['a', 'b']) }}",
           "['Hello', 'World']['Hell', ' World']xTrueTrue4HeLLo World1 and ba,b");
    expect("{{ d.get('a') }}{{ d.get('z', 0) }}{{ d.keys() | list }}{{ d.items() }}",
           "20['b', 'a']dict_items([('b', 1), ('a', 2)])");
    expect("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} "
           "{{ [1] + [2] }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1 == 1.0 }} {{ 1 < 2 < 3 }}",
           "3 -4 2 3.5 1024 abab [1, 2] 0.30000000000000004 1e+16 True True");
    expect("{{ s[1:4] }}{{ s[-1] }}{{ u[2:5] }}{{ l[::-1] }}{{ 'x' if n > 2 else 'y' }}"
           "{{ [1, 'a', none, true, (1,), {'k': 1.0}] }}",
           "elld\xc3\xbc\xc3\x9f" "e[2, 1, 3]x[1, 'a', None, True, (1,), {'k': 1.0}]");
    expect("{{ \"it's\" }}{{ ['it\\'s', \"q\\\"\"] }}{{ 'a\\tb' }}", "it's[\"it's\", 'q\"']a\tb");
}

static void test_errors_with_lines(void **s)
{
    (void)s;
    /* compile time: syntax, unknown to Jinja2, not implemented here */
    expect_fail("a\n{% if x %}\nb", DERAS_EFORMAT, "template line 3: unexpected end of template");
    expect_fail("x\n\n{{ a | nosuchfilter }}", DERAS_EFORMAT, "template line 3: no filter named 'nosuchfilter'");
    expect_fail("\n{{ a | wordwrap }}", DERAS_EUNSUPPORTED, "template line 2: filter 'wordwrap' is not supported");
    expect_fail("{% include 'x.jinja' %}", DERAS_EUNSUPPORTED, "{% include %} is not supported");
    expect_fail("{% call m() %}{% endcall %}", DERAS_EUNSUPPORTED, "{% call %} is not supported");
    expect_fail("{{ s.zfill(3) }}", DERAS_EUNSUPPORTED, "method 'zfill' is not supported");
    expect_fail("{{ cycler(1, 2) }}", DERAS_EUNSUPPORTED, "global 'cycler' is not supported");
    expect_fail("{% frobnicate %}", DERAS_EFORMAT, "unknown tag 'frobnicate'");
    expect_fail("{{ range(1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1) }}", DERAS_EUNSUPPORTED,
                "more than 16 positional or keyword arguments");
    expect_fail("{% break %}", DERAS_EFORMAT, "'break' outside of a loop");
    expect_fail("{{ 'abc }}", DERAS_EFORMAT, "template line 1: unterminated string");
    expect_fail("{{ (1 }}", DERAS_EFORMAT, "template line 1:");
    /* an unknown filter inside an if is Jinja2's runtime error, only when reached */
    expect("{% if false %}{{ x | from_json }}{% endif %}ok", "ok");
    expect_fail("\n{% if true %}{{ '{}' | from_json }}{% endif %}", DERAS_EFORMAT,
                "template line 2: no filter named 'from_json' found");
    /* render time: raise_exception is the template's own message; Python's errors */
    expect_fail("{% for m in messages %}\n{% if m.role == 'user' %}{{ raise_exception('Only assistants!') }}"
                "{% endif %}{% endfor %}", DERAS_EINVAL, "template line 2: Only assistants!");
    expect_fail("\n\n{{ 'a' + 1 }}", DERAS_EFORMAT, "template line 3: unsupported operand type(s) for +");
    expect_fail("{{ messages.append(1) }}", DERAS_EFORMAT, "unsafe");
    expect_fail("{{ 1 / 0 }}", DERAS_EFORMAT, "division by zero");
    expect_fail("{% set x = 1 %}{% set x.y = 2 %}", DERAS_EFORMAT, "non-namespace");
    expect_fail("{{ range(100001) | length }}", DERAS_EFORMAT, "MAX_RANGE");
    expect_fail("{{ l | selectattr('x', 'nosuchtest') | list }}", DERAS_EFORMAT, "no test named");
    expect_fail("{{ '{:>5}'.format(1) }}", DERAS_EUNSUPPORTED, "format field");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_sandbox_bounds(void **s)
{
    (void)s;
    double t0 = now_s();
    /* nesting: brackets, unary chains, blocks at compile; macros and values at render */
    size_t n = 100000;
    char *deep = malloc(2 * n + 16);
    memset(deep, '(', n);
    strcpy(deep + n, "1");
    memset(deep + n + 1, ')', n);
    deep[2 * n + 1] = 0;
    char *wrapped = malloc(2 * n + 32);
    sprintf(wrapped, "{{ %s }}", deep);
    expect_fail(wrapped, DERAS_EUNSUPPORTED, "brackets nested too deeply");
    memset(deep, '-', n);
    sprintf(wrapped, "{{ %.*s1 }}", (int)n, deep);
    expect_fail(wrapped, DERAS_EUNSUPPORTED, "max_depth");
    char *blocks = malloc(n * 12 + 16), *p = blocks;
    for (size_t i = 0; i < 5000; i++)
        p += sprintf(p, "{%% if 1 %%}");
    strcpy(p, "x");
    expect_fail(blocks, DERAS_EUNSUPPORTED, "max_depth");
    free(blocks);
    free(deep);
    free(wrapped);
    expect_fail("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", DERAS_EUNSUPPORTED,
                "macro calls nested deeper than max_depth");
    expect_fail("{% macro f(n) %}{% if n > 0 %}{% if true %}{% for i in [1] %}{{ (f(n - 1) ~ 'x') | trim }}"
                "{% endfor %}{% endif %}{% endif %}{% endmacro %}{{ f(1000) }}", DERAS_EUNSUPPORTED,
                "nested deeper than max_depth");
    expect_fail("{% set ns = namespace(v=[]) %}{% for i in range(1000) %}{% set ns.v = [ns.v] %}"
                "{% endfor %}", DERAS_EUNSUPPORTED, "values nested deeper");
    expect_fail("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}", DERAS_EUNSUPPORTED,
                "containing itself");
    /* steps: loops that would run for hours stop at the budget */
    expect_fail("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
                DERAS_ETIMEOUT, "step budget");
    expect_fail("{{ ([1] * 100000) * 100000 }}", DERAS_ETIMEOUT, "step budget");
    /* output: exponential string growth stops at max_output, never near memory limits */
    expect_fail("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                "{% endfor %}", DERAS_ERANGE, "max_output");
    expect_fail("{{ 'x' * 1000000000000 }}", DERAS_ERANGE, "max_output");
    tmpl_limits small = {.max_output = 1000};
    expect_fail_lim("{% for i in range(1000) %}{{ i }}{% endfor %}", &small, DERAS_ERANGE, "max_output");
    /* memory: many live strings each under max_output */
    tmpl_limits mem = {.max_memory = 1 << 20};
    expect_fail_lim("{% set ns = namespace(l=[]) %}{% for i in range(10000) %}"
                    "{% set ns.l = ns.l + ['x' * 1000 ~ i] %}{% endfor %}", &mem, DERAS_ENOMEM,
                    "memory budget");
    tmpl_limits steps = {.max_steps = 1000};
    expect_fail_lim("{% for i in range(10000) %}{% endfor %}", &steps, DERAS_ETIMEOUT, "step budget");
    double took = now_s() - t0;
    print_message("sandbox bounds: every bound stopped its render, %.2f s in all\n", took);
    assert_true(took < 30.0);
}

static void test_api(void **s)
{
    (void)s;
    tmpl_t *t = NULL;
    char *out = (char *)1;
    size_t len = 1;
    assert_int_equal(tmpl_compile("{{ x }}", 7, NULL, &t), 0);
    tmpl_limits lim = tmpl_limits_of(t), d = tmpl_limits_default();
    assert_int_equal(lim.max_output, d.max_output);
    assert_int_equal(lim.max_depth, d.max_depth);
    json_t *arr = json_array();
    assert_int_equal(tmpl_render(t, arr, &out, &len), DERAS_EINVAL);
    assert_null(out);
    assert_int_equal(len, 0);
    json_decref(arr);
    assert_int_equal(tmpl_render(t, NULL, &out, &len), 0); /* no context: all undefined */
    assert_string_equal(out, "");
    free(out);
    json_t *ctx = json_pack("{s:s#}", "x", "a\0b", (size_t)3); /* NUL bytes pass through */
    assert_int_equal(tmpl_render(t, ctx, &out, &len), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(out, "a\0b", 3);
    free(out);
    json_decref(ctx);
    tmpl_destroy(&t);
    assert_null(t);
    tmpl_destroy(&t);
    tmpl_destroy(NULL);
    assert_int_equal(tmpl_compile("\xff", 1, NULL, &t), DERAS_EFORMAT); /* not UTF-8 */
    assert_null(t);
    assert_int_equal(tmpl_compile("x", 1, NULL, NULL), DERAS_EINVAL); /* the constructor form */
    t = (tmpl_t *)1;
    assert_int_equal(tmpl_compile(NULL, 1, NULL, &t), DERAS_EINVAL);
    assert_null(t);
    assert_int_equal(tmpl_compile("", 0, NULL, &t), 0);
    assert_int_equal(tmpl_render(t, NULL, &out, &len), 0);
    assert_int_equal(len, 0);
    free(out);
    tmpl_destroy(&t);
}

struct worker {
    const tmpl_t *t;
    json_t *ctx;
    const char *want;
    int bad;
};

static void *render_many(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < 200; i++) {
        char *out;
        size_t len;
        if (tmpl_render(w->t, w->ctx, &out, &len) || strcmp(out, w->want))
            w->bad++;
        free(out);
    }
    return NULL;
}

/* One compiled template, four threads rendering it: the template is read-only. */
static void test_concurrent_renders(void **s)
{
    (void)s;
    const char *src = "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                      "<{{ m.role }}>{{ m.content | trim }}{% endfor %}{{ ns.n }}{{ 'k' | upper }}";
    tmpl_t *t;
    assert_int_equal(tmpl_compile(src, strlen(src), NULL, &t), 0);
    json_t *ctx = json_loads(CTX, 0, NULL);
    struct worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct worker){t, ctx, "<system>Be brief.<user>Hi <b> & 'x'<assistant>Hello3K", 0};
        pthread_create(&th[i], NULL, render_many, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].bad, 0);
    }
    json_decref(ctx);
    tmpl_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whitespace_control), cmocka_unit_test(test_loops),
        cmocka_unit_test(test_scoping),            cmocka_unit_test(test_undefined),
        cmocka_unit_test(test_filters),            cmocka_unit_test(test_tests_methods_ops),
        cmocka_unit_test(test_errors_with_lines),  cmocka_unit_test(test_sandbox_bounds),
        cmocka_unit_test(test_api),                cmocka_unit_test(test_concurrent_renders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
