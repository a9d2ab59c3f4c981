/* SPDX-License-Identifier: Apache-2.0 */
/* test_grammar.c - grammars from GBNF and regular expressions (common/grammar/grammar.h,
 * regex.h): the corpus in tests/data/grammar parses and its random sentences (and each of
 * their prefixes) are recognized; hand-written strings in and out; syntax errors and
 * refusals with their codes; the limits; regex translation checked against PCRE2 on random
 * strings (the differential property: both agree on every string).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "common/base/status.h"
#include "common/grammar/grammar.h"
#include "common/grammar/regex.h"
#include "grammar_gen.h"
#include "test_util.h"

static grammar_t *compile(const char *text)
{
    grammar_t *g = NULL;
    int rc = grammar_from_gbnf(text, strlen(text), NULL, &g);
    if (rc)
        fail_msg("grammar did not compile (%s): %s\n%s", deras_status_name(rc), deras_errmsg(), text);
    return g;
}

static bool complete(const grammar_t *g, const char *s)
{
    bool prefix, done;
    assert_int_equal(grammar_match_bytes(g, s, strlen(s), &prefix, &done), 0);
    if (done)
        assert_true(prefix);
    return done;
}

static bool is_prefix(const grammar_t *g, const char *s, size_t n)
{
    bool prefix, done;
    assert_int_equal(grammar_match_bytes(g, s, n, &prefix, &done), 0);
    return prefix;
}

static char *read_data(const char *name)
{
    char *text = gg_read_data(name);
    if (!text)
        fail_msg("cannot read tests/data/grammar/%s", name);
    return text;
}

typedef struct strcase {
    const char *s;
    bool ok;
} strcase;

static void check_file(const char *file, const strcase *cases)
{
    char *text = read_data(file);
    grammar_t *g = compile(text);
    for (const strcase *c = cases; c->s; c++)
        if (complete(g, c->s) != c->ok)
            fail_msg("%s: \"%s\" should %sbe in the language", file, c->s, c->ok ? "" : "not ");
    /* random sentences are sentences, and each of their prefixes is a prefix */
    uint64_t rng = 17;
    char buf[4096];
    for (int i = 0; i < 200; i++) {
        long n = gg_sentence(g, &rng, 12, buf, sizeof buf);
        if (n < 0)
            continue;
        if (!complete(g, buf))
            fail_msg("%s: generated \"%s\" is not recognized", file, buf);
        for (long k = 0; k < n; k += 1 + n / 16)
            assert_true(is_prefix(g, buf, (size_t)k));
    }
    grammar_destroy(&g);
    free(text);
}

static void test_corpus_json(void **state)
{
    (void)state;
    static const strcase c[] = {
        {"{}", true}, {"[1, 2.5e10, -0.1, true, null]", true},
        {"{\"a\": {\"b\": [\"\\u00e9\\n\", \"\xc3\xa9\"]}}", true}, {"\"x\"", true},
        {"{\"a\" 1}", false}, {"[1,]", false}, {"\"\x01\"", false}, {"01x", false},
        {"{\n  \"k\": \"v\"\n}", true}, {"\"\\x\"", false}, {NULL, false}};
    check_file("json.gbnf", c);
}

static void test_corpus_arithmetic(void **state)
{
    (void)state;
    static const strcase c[] = {{"a + 1 = x\n", true}, {"(a*b) / 3 = y2\n", true},
                                {"a + = x\n", false}, {"a = b", false}, {NULL, false}};
    check_file("arithmetic.gbnf", c);
}

static void test_corpus_list(void **state)
{
    (void)state;
    static const strcase c[] = {{"- one\n- two\n", true}, {"- caf\xc3\xa9\n", true},
                                {"- a\xe2\x80\xa8" "b\n", false}, {"-\n", false}, {NULL, false}};
    check_file("list.gbnf", c);
}

static void test_corpus_c(void **state)
{
    (void)state;
    static const strcase c[] = {
        {"int main() {\n return 0;\n}\n", true},
        {"float f(int x, char *s) {\n float y = x * 2.5;\n while (y > 0) {\n y = y - 1;\n}\n "
         "/* done */\n return y;\n}\n", true},
        {"int main() {\n return 0\n}\n", false}, {NULL, false}};
    check_file("c_like.gbnf", c);
}

static void test_corpus_unicode(void **state)
{
    (void)state;
    static const strcase c[] = {
        {"\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf \xc3\x89mile!", true},
        {"hello Zo\xc3\xab\xf0\x9f\x98\x80", true}, {"\xe4\xbd\xa0\xe5\xa5\xbd Ab\xe3\x80\x82", true},
        {"hello zoe!", false}, {"hello Z\xc3!", false}, {NULL, false}};
    check_file("unicode.gbnf", c);
}

static void test_notation(void **state)
{
    (void)state;
    grammar_t *g = compile("root ::= \"a\"{2} \"b\"{1,} \"c\"{0,2} [x-z]? # comment\n");
    assert_true(complete(g, "aab"));
    assert_true(complete(g, "aabbbccz"));
    assert_false(complete(g, "abb"));
    assert_false(complete(g, "aabccc"));
    grammar_destroy(&g);
    g = compile("root ::= ( \"a\" |\n  \"b\"\n  ) x\nx ::= . [^a-c]\n");
    assert_true(complete(g, "a\xe2\x82\xac" "d"));
    assert_true(complete(g, "b\nz"));
    assert_false(complete(g, "bab"));
    grammar_destroy(&g);
    /* escapes, including \x that names a code point (U+00E9 is two bytes) */
    g = compile("root ::= \"\\x41\\u00e9\\U0001F600\\t\\\\\\\"\\[\\]\"\n");
    assert_true(complete(g, "A\xc3\xa9\xf0\x9f\x98\x80\t\\\"[]"));
    grammar_destroy(&g);
    /* empty alternatives, a rule that is all optional, (a*)* kept and quick */
    g = compile("root ::= x y\nx ::= | \"a\"\ny ::= (\"b\"*)*\n");
    assert_true(complete(g, ""));
    assert_true(complete(g, "abbb"));
    grammar_destroy(&g);
}

typedef struct errcase {
    const char *text;
    int code;
    const char *needle;
} errcase;

static void test_errors(void **state)
{
    (void)state;
    static const errcase c[] = {
        {"root ::= \"a\n", DERAS_EFORMAT, "unterminated"},
        {"root ::= [a-\n", DERAS_EFORMAT, "line 1"},
        {"root ::= (\"a\"\n", DERAS_EFORMAT, "')'"},
        {"root := \"a\"\n", DERAS_EFORMAT, "::="},
        {"root ::= \"a\" \"b\" )\n", DERAS_EFORMAT, "newline"},
        {"root ::= *\n", DERAS_EFORMAT, "repetition"},
        {"root ::= \"a\"{3,2}\n", DERAS_EFORMAT, "n < m"},
        {"root ::= \"\\q\"\n", DERAS_EFORMAT, "escape"},
        {"root ::= [z-a]\n", DERAS_EFORMAT, "out of order"},
        {"root ::= \"\xff\"\n", DERAS_EFORMAT, "UTF-8"},
        {"root ::= \"\\uD800\"\n", DERAS_EFORMAT, "scalar"},
        {"root ::= x\n", DERAS_ENOTFOUND, "'x'"},
        {"start ::= \"a\"\n", DERAS_ENOTFOUND, "root"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", DERAS_EFORMAT, "twice"},
        {"root ::= root \"a\" | \"b\"\n", DERAS_EUNSUPPORTED, "left recursion"},
        {"root ::= x \"a\"\nx ::= y | \"c\"\ny ::= \"\" root\n", DERAS_EUNSUPPORTED, "left recursion"},
        {"root ::= x\nx ::= \"a\" x\n", DERAS_EUNSUPPORTED, "never be completed"},
        {"root ::= [^\\x00-\\U0010FFFF]\n", DERAS_EUNSUPPORTED, "never be completed"},
        {"root ::= <[1234]>\n", DERAS_EUNSUPPORTED, "token"},
        {NULL, 0, NULL}};
    for (const errcase *e = c; e->text; e++) {
        grammar_t *g = (grammar_t *)1;
        int rc = grammar_from_gbnf(e->text, strlen(e->text), NULL, &g);
        if (rc != e->code || g || !strstr(deras_errmsg(), e->needle))
            fail_msg("\"%s\": got %s (%s), want %s mentioning %s", e->text, deras_status_name(rc),
                     deras_errmsg(), deras_status_name(e->code), e->needle);
    }
    assert_int_equal(grammar_from_gbnf("x", 1, NULL, NULL), DERAS_EINVAL);
}

static void test_limits(void **state)
{
    (void)state;
    grammar_limits lim;
    grammar_limits_default(&lim);
    grammar_t *g = NULL;
    lim.max_source = 8;
    assert_int_equal(grammar_from_gbnf("root ::= \"abc\"\n", 15, &lim, &g), DERAS_ERANGE);
    grammar_limits_default(&lim);
    /* nesting: 200 parentheses */
    char deep[1024] = "root ::= ";
    for (int i = 0; i < 200; i++)
        strcat(deep, "(");
    strcat(deep, "\"a\"");
    for (int i = 0; i < 200; i++)
        strcat(deep, ")");
    strcat(deep, "\n");
    assert_int_equal(grammar_from_gbnf(deep, strlen(deep), &lim, &g), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "max_nesting"));
    /* repetition counts and the elements they expand to */
    const char *big = "root ::= \"a\"{5000}\n";
    assert_int_equal(grammar_from_gbnf(big, strlen(big), &lim, &g), DERAS_ERANGE);
    /* a repeated group is referenced, not copied: this stays small */
    const char *squared = "root ::= ([a-z]{4000}){4000}\n";
    assert_int_equal(grammar_from_gbnf(squared, strlen(squared), &lim, &g), 0);
    grammar_info gi;
    grammar_get_info(g, &gi);
    assert_true(gi.n_elements < lim.max_elements);
    grammar_destroy(&g);
    /* copies of literals add up: 30 x 40,000 bytes */
    char lits[1024] = "root ::=";
    for (int i = 0; i < 30; i++)
        strcat(lits, " \"abcdefghij\"{4000}");
    strcat(lits, "\n");
    assert_int_equal(grammar_from_gbnf(lits, strlen(lits), &lim, &g), DERAS_ERANGE);
    assert_non_null(strstr(deras_errmsg(), "max_elements"));
    lim.max_rules = 10;
    const char *many = "root ::= (\"a\")(\"b\")(\"c\")(\"d\")(\"e\")(\"f\")(\"g\")(\"h\")(\"i\")(\"j\")(\"k\")\n";
    assert_int_equal(grammar_from_gbnf(many, strlen(many), &lim, &g), DERAS_ERANGE);
    assert_null(g);
    /* a huge alternation compiles within the limits */
    size_t cap = 1 << 20, n = 0;
    char *alts = malloc(cap);
    n += (size_t)snprintf(alts, cap, "root ::= \"w0\"");
    for (int i = 1; i < 20000; i++)
        n += (size_t)snprintf(alts + n, cap - n, " | \"w%d\"", i);
    snprintf(alts + n, cap - n, "\n");
    grammar_limits_default(&lim);
    assert_int_equal(grammar_from_gbnf(alts, strlen(alts), &lim, &g), 0);
    grammar_get_info(g, &gi);
    assert_true(gi.n_terminals > 20000);
    grammar_destroy(&g);
    free(alts);
}

/* ---- regular expressions against PCRE2 ---- */

typedef struct rxcase {
    const char *re;
    const char *yes[4];
    const char *no[4];
} rxcase;

static const rxcase RX[] = {
    {"\\d{3}-\\d{4}", {"555-1234"}, {"55-1234", "555-12345"}},
    {"[A-Z][a-z]+( [A-Z][a-z]+)*", {"Ada Lovelace", "Bo"}, {"ada", "Ada  L"}},
    {"(?:ab|a)(?:bc|c)?d", {"abcd", "acd", "abd"}, {"ad d"}},
    {"^\\w+@\\w+\\.(com|org)$", {"me@site.org"}, {"me@site.net"}},
    {"(a*)*b", {"aaab", "b"}, {"aaaa"}},
    {"(a|a)*c", {"aac"}, {"aa"}},
    {"[^\\s\"]{2,5}", {"a\xc3\xa9z"}, {"a b", "a"}},
    {"x{2,}y{0,2}z?", {"xxx", "xxyy"}, {"xyyy"}},
    {"\\{\"k\": \\d+\\}", {"{\"k\": 12}"}, {"{\"k\": }"}},
    {"caf\xc3\xa9|na\\u00efve|[\\u4e00-\\u9fff]{2}", {"caf\xc3\xa9", "na\xc3\xafve", "\xe4\xb8\xad\xe6\x96\x87"}, {"cafe"}},
    {".+\\.txt", {"a b.txt"}, {"a\nb.txt"}},
    {"(?P<year>\\d{4})-(?<m>0[1-9]|1[0-2])", {"2024-12"}, {"2024-13"}},
    {"[\\d.-]+|[]a]", {"-1.5", "]"}, {"b"}},
    {"\\t\\x41\\n", {"\tA\n"}, {"tA"}},
    {"colou?r|gr[ae]y", {"color", "grey"}, {"gry"}},
    {"a\\|b\\(c\\)", {"a|b(c)"}, {"ab"}},
    {"a{1,3}?b*?", {"aab"}, {"aaaa"}},
};

static pcre2_code *pcre(const char *re)
{
    int err;
    PCRE2_SIZE off;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_ANCHORED | PCRE2_ENDANCHORED |
                                      PCRE2_DOLLAR_ENDONLY, &err, &off, NULL);
    if (!c)
        fail_msg("PCRE2 refuses %s", re);
    return c;
}

static bool pcre_full(pcre2_code *c, const char *s, size_t n)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

static void test_regex_vs_pcre2(void **state)
{
    (void)state;
    uint64_t rng = 5;
    for (size_t i = 0; i < sizeof RX / sizeof *RX; i++) {
        const rxcase *c = &RX[i];
        grammar_t *g = NULL;
        int rc = grammar_from_regex(c->re, strlen(c->re), NULL, &g);
        if (rc)
            fail_msg("regex %s: %s", c->re, deras_errmsg());
        pcre2_code *p = pcre(c->re);
        for (int k = 0; k < 4; k++) {
            if (c->yes[k] && (!complete(g, c->yes[k]) || !pcre_full(p, c->yes[k], strlen(c->yes[k]))))
                fail_msg("regex %s should match \"%s\"", c->re, c->yes[k]);
            if (c->no[k] && (complete(g, c->no[k]) || pcre_full(p, c->no[k], strlen(c->no[k]))))
                fail_msg("regex %s should not match \"%s\"", c->re, c->no[k]);
        }
        /* generated sentences match in PCRE2; random mutations are judged the same */
        char buf[512];
        for (int k = 0; k < 300; k++) {
            long n = gg_sentence(g, &rng, 10, buf, sizeof buf);
            if (n < 0)
                continue;
            if (!pcre_full(p, buf, (size_t)n))
                fail_msg("regex %s: generated \"%s\" does not match in PCRE2", c->re, buf);
            /* mutate: drop, duplicate or replace one byte by one from the regex text */
            if (n > 0) {
                size_t at = gg_rand(&rng) % (size_t)n;
                int op = (int)(gg_rand(&rng) % 3);
                char m[600];
                size_t mn = 0;
                for (size_t j = 0; j < (size_t)n; j++) {
                    if (j == at && op == 0)
                        continue;
                    if (j == at && op == 2) {
                        m[mn++] = c->re[gg_rand(&rng) % strlen(c->re)];
                        continue;
                    }
                    m[mn++] = buf[j];
                    if (j == at && op == 1)
                        m[mn++] = buf[j];
                }
                m[mn] = 0;
                bool ours_p, ours;
                assert_int_equal(grammar_match_bytes(g, m, mn, &ours_p, &ours), 0);
                if (ours != pcre_full(p, m, mn))
                    fail_msg("regex %s on \"%s\": ours %d, PCRE2 %d", c->re, m, ours, !ours);
            }
        }
        pcre2_code_free(p);
        grammar_destroy(&g);
    }
}

static void test_regex_refusals(void **state)
{
    (void)state;
    grammar_t *g = NULL; /* Python's {,n} (PCRE2 before 10.43 reads it as a literal) */
    assert_int_equal(grammar_from_regex("a{,3}", 5, NULL, &g), 0);
    assert_true(complete(g, "") && complete(g, "aaa") && !complete(g, "aaaa"));
    grammar_destroy(&g);
    assert_int_equal(grammar_from_regex("a{x}", 4, NULL, &g), 0); /* a literal brace */
    assert_true(complete(g, "a{x}"));
    grammar_destroy(&g);
    static const errcase c[] = {
        {"(a", DERAS_EFORMAT, "unclosed"}, {"a)", DERAS_EFORMAT, "unbalanced"},
        {"[a", DERAS_EFORMAT, "unterminated"}, {"*a", DERAS_EFORMAT, "nothing to repeat"},
        {"a**", DERAS_EFORMAT, "multiple repeat"}, {"(a)\\1", DERAS_EUNSUPPORTED, "backreference"},
        {"(?=a)b", DERAS_EUNSUPPORTED, "lookaround"}, {"(?i)a", DERAS_EUNSUPPORTED, "flags"},
        {"a\\bc", DERAS_EUNSUPPORTED, "boundaries"}, {"\\p{L}", DERAS_EUNSUPPORTED, "Unicode"},
        {"a++", DERAS_EUNSUPPORTED, "possessive"}, {"[[:alpha:]]", DERAS_EUNSUPPORTED, "POSIX"},
        {"a^b", DERAS_EUNSUPPORTED, "start and end"}, {"\\q", DERAS_EFORMAT, "escape"},
        {"a{5000}", DERAS_ERANGE, "max_repeat"}, {"[z-a]", DERAS_EFORMAT, "out of order"},
        {NULL, 0, NULL}};
    for (const errcase *e = c; e->text; e++) {
        char *out = (char *)1;
        size_t n;
        int rc = regex_to_gbnf(e->text, strlen(e->text), NULL, false, &out, &n);
        if (rc != e->code || out || !strstr(deras_errmsg(), e->needle))
            fail_msg("regex \"%s\": got %s (%s), want %s mentioning %s", e->text,
                     deras_status_name(rc), deras_errmsg(), deras_status_name(e->code), e->needle);
    }
    /* deep nesting is a limit, never a stack overflow */
    char deep[4096] = "";
    for (int i = 0; i < 1000; i++)
        strcat(deep, "(");
    char *out = NULL;
    size_t n;
    assert_int_equal(regex_to_gbnf(deep, strlen(deep), NULL, false, &out, &n), DERAS_ERANGE);
}

static void test_regex_json_string(void **state)
{
    (void)state;
    /* inside a JSON string: '"' and '\' appear escaped; classes never produce them raw */
    char *expr;
    size_t n;
    const char *re = "a\"[^x]\\\\.";
    assert_int_equal(regex_to_gbnf(re, strlen(re), NULL, true, &expr, &n), 0);
    char text[512];
    snprintf(text, sizeof text, "root ::= %s\n", expr);
    free(expr);
    grammar_t *g = compile(text);
    assert_true(complete(g, "a\\\"y\\\\z"));
    assert_false(complete(g, "a\"y\\z"));
    assert_false(complete(g, "a\\\"\"\\\\z"));
    assert_false(complete(g, "a\\\"\n\\\\z"));
    assert_false(complete(g, "a\\\"y\\\\\""));
    grammar_destroy(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus_json),
        cmocka_unit_test(test_corpus_arithmetic),
        cmocka_unit_test(test_corpus_list),
        cmocka_unit_test(test_corpus_c),
        cmocka_unit_test(test_corpus_unicode),
        cmocka_unit_test(test_notation),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_regex_vs_pcre2),
        cmocka_unit_test(test_regex_refusals),
        cmocka_unit_test(test_regex_json_string),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
