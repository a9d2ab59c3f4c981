/* SPDX-License-Identifier: Apache-2.0 */
/* test_json_schema.c - JSON Schema to GBNF (common/schema/json_schema.h):
 *   - the corpus tests/data/grammar/schemas.json (checked against Python's jsonschema when
 *     it was written): every valid instance, compact and indented, is in the language,
 *     every invalid one is not; random sentences of each schema's grammar parse as JSON;
 *   - refusals name the keyword and where it is; limits; JSON mode; whitespace options;
 *   - a realistic schema's masks against brute force, and no uncertain token anywhere in
 *     it (specialization makes every position's context static);
 *   - `samples N`: prints N sentences per corpus schema as JSON lines for
 *     test_json_schema_validate.py, which validates them with jsonschema.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/base/status.h"
#include "common/grammar/matcher.h"
#include "common/schema/json_schema.h"
#include "grammar_gen.h"
#include "test_util.h"

static json_t *corpus(void)
{
    char *path = test_data_path("grammar/schemas.json");
    json_error_t err;
    json_t *c = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!c)
        fail_msg("%s: %s", path, err.text);
    free(path);
    return c;
}

static grammar_t *schema_grammar(const json_t *schema, const jschema_opts *o)
{
    char *gbnf = NULL;
    size_t n;
    int rc = jschema_to_gbnf_json(schema, o, &gbnf, &n);
    if (rc)
        fail_msg("schema: %s", deras_errmsg());
    grammar_t *g = NULL;
    rc = grammar_from_gbnf(gbnf, n, NULL, &g);
    if (rc)
        fail_msg("its grammar: %s\n%s", deras_errmsg(), gbnf);
    free(gbnf);
    return g;
}

static bool in_language(const grammar_t *g, const char *s)
{
    bool prefix, done;
    assert_int_equal(grammar_match_bytes(g, s, strlen(s), &prefix, &done), 0);
    return done;
}

static void test_corpus(void **state)
{
    (void)state;
    json_t *c = corpus();
    size_t i;
    json_t *cs;
    uint64_t rng = 1;
    json_array_foreach(c, i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        grammar_t *g = schema_grammar(json_object_get(cs, "schema"), NULL);
        bool compact_only = json_is_true(json_object_get(cs, "compact_only"));
        size_t k;
        json_t *inst;
        json_array_foreach(json_object_get(cs, "valid"), k, inst) {
            for (int pretty = 0; pretty < (compact_only ? 1 : 2); pretty++) {
                char *s = json_dumps(inst, JSON_ENCODE_ANY | (pretty ? JSON_INDENT(2) : JSON_COMPACT));
                if (!in_language(g, s))
                    fail_msg("%s: valid %s is refused", name, s);
                free(s);
            }
        }
        json_array_foreach(json_object_get(cs, "invalid"), k, inst) {
            char *s = json_dumps(inst, JSON_ENCODE_ANY | JSON_COMPACT);
            if (in_language(g, s))
                fail_msg("%s: invalid %s is accepted", name, s);
            free(s);
        }
        char buf[8192];
        for (int n = 0; n < 50; n++) {
            long len = gg_sentence(g, &rng, 8, buf, sizeof buf);
            if (len < 0)
                continue;
            json_t *j = json_loadb(buf, (size_t)len, JSON_DECODE_ANY, NULL);
            if (!j)
                fail_msg("%s: generated \"%s\" is not JSON", name, buf);
            json_decref(j);
        }
        grammar_destroy(&g);
    }
    json_decref(c);
}

typedef struct refusal {
    const char *schema;
    int code;
    const char *needle;
} refusal;

static void test_refusals(void **state)
{
    (void)state;
    static const refusal r[] = {
        {"{\"type\": \"array\", \"uniqueItems\": true}", DERAS_EUNSUPPORTED, "'uniqueItems'"},
        {"{\"properties\": {\"a\": {\"multipleOf\": 3}}}", DERAS_EUNSUPPORTED, "/properties/a: keyword 'multipleOf'"},
        {"{\"not\": {}}", DERAS_EUNSUPPORTED, "'not'"},
        {"{\"type\": \"object\", \"patternProperties\": {}}", DERAS_EUNSUPPORTED, "patternProperties"},
        {"{\"if\": {}, \"then\": {}}", DERAS_EUNSUPPORTED, "'if'"},
        {"{\"type\": \"string\", \"format\": \"iri\"}", DERAS_EUNSUPPORTED, "format 'iri'"},
        {"{\"type\": \"number\", \"maximum\": 1}", DERAS_EUNSUPPORTED, "maximum"},
        {"{\"type\": \"number\", \"minimum\": -1}", DERAS_EUNSUPPORTED, "negative minimum"},
        {"{\"type\": \"string\", \"pattern\": \"(?=a)\"}", DERAS_EUNSUPPORTED, "lookaround"},
        {"{\"type\": \"string\", \"pattern\": \"(a\"}", DERAS_EFORMAT, "pattern"},
        {"{\"$ref\": \"http://example.com/s.json\"}", DERAS_EUNSUPPORTED, "within the schema"},
        {"{\"$ref\": \"#/$defs/missing\"}", DERAS_ENOTFOUND, "points at nothing"},
        {"{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", DERAS_EUNSUPPORTED, "no integer"},
        {"{\"type\": \"array\", \"minItems\": 3, \"maxItems\": 2}", DERAS_EUNSUPPORTED, "maxItems"},
        {"{\"type\": \"string\", \"minLength\": 9999}", DERAS_ERANGE, "minLength"},
        {"{\"type\": \"strin\"}", DERAS_EFORMAT, "unknown type"},
        {"{\"type\": \"object\", \"properties\": []}", DERAS_EFORMAT, "'properties'"},
        {"{\"allOf\": [{}, {}]}", DERAS_EUNSUPPORTED, "allOf"},
        {"{\"anyOf\": [{}], \"type\": \"string\"}", DERAS_EUNSUPPORTED, "anyOf together"},
        {"{\"enum\": []}", DERAS_EFORMAT, "non-empty"},
        {"false", DERAS_EUNSUPPORTED, "matches nothing"},
        {"{\"type\": \"object\",", DERAS_EFORMAT, "not valid JSON"},
        {"{\"a\": 1, \"a\": 2}", DERAS_EFORMAT, "not valid JSON"},
        {NULL, 0, NULL}};
    for (const refusal *x = r; x->schema; x++) {
        char *out = (char *)1;
        size_t n;
        int rc = jschema_to_gbnf(x->schema, strlen(x->schema), NULL, &out, &n);
        if (rc != x->code || out || !strstr(deras_errmsg(), x->needle))
            fail_msg("%s: got %s (%s), want %s mentioning %s", x->schema, deras_status_name(rc),
                     deras_errmsg(), deras_status_name(x->code), x->needle);
    }
    /* nesting past max_depth, and a recursive $ref that is fine */
    char deep[8192] = "";
    for (int i = 0; i < 100; i++)
        strcat(deep, "{\"type\": \"array\", \"items\": ");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++)
        strcat(deep, "}");
    char *out = NULL;
    size_t n;
    assert_int_equal(jschema_to_gbnf(deep, strlen(deep), NULL, &out, &n), DERAS_ERANGE);
    const char *rec = "{\"$ref\": \"#\", \"title\": \"x\"}";
    assert_int_equal(jschema_to_gbnf(rec, strlen(rec), NULL, &out, &n), 0);
    grammar_t *g = NULL;
    assert_int_equal(grammar_from_gbnf(out, n, NULL, &g), DERAS_EUNSUPPORTED); /* never ends */
    free(out);
    jschema_opts o;
    jschema_opts_default(&o);
    o.max_output = 100;
    const char *big = "{\"enum\": [\"aaaaaaaaaaaaaaaaaaaaaa\", \"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\", \"ccccccccccccccccccccccccccccccccc\"]}";
    assert_int_equal(jschema_to_gbnf(big, strlen(big), &o, &out, &n), DERAS_ERANGE);
}

static void test_json_mode_and_whitespace(void **state)
{
    (void)state;
    char *text;
    size_t n;
    assert_int_equal(jschema_json_object_gbnf(NULL, &text, &n), 0);
    grammar_t *g = NULL;
    assert_int_equal(grammar_from_gbnf(text, n, NULL, &g), 0);
    free(text);
    assert_true(in_language(g, "{\"a\": [1, \"x\", {\"b\": null}]}"));
    assert_true(in_language(g, "{\n  \"a\": 1\n}"));
    assert_false(in_language(g, "[1]"));
    assert_false(in_language(g, "{\"a\":  1}")); /* two spaces: bounded whitespace */
    char ind[64] = "{\n";
    for (int i = 0; i < 21; i++)
        strcat(ind, " ");
    strcat(ind, "\"a\": 1}");
    assert_false(in_language(g, ind)); /* more than max_indent 20 */
    uint64_t rng = 2;
    char buf[8192];
    for (int i = 0; i < 100; i++) {
        long len = gg_sentence(g, &rng, 8, buf, sizeof buf);
        if (len < 0)
            continue;
        json_t *j = json_loadb(buf, (size_t)len, 0, NULL);
        if (!j || !json_is_object(j))
            fail_msg("JSON mode produced \"%s\"", buf);
        json_decref(j);
    }
    grammar_destroy(&g);
    jschema_opts o;
    jschema_opts_default(&o);
    o.compact = true;
    json_t *s = json_loads("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\"}}}", 0, NULL);
    g = schema_grammar(s, &o);
    assert_true(in_language(g, "{\"a\":[1,2]}"));
    assert_false(in_language(g, "{\"a\": [1,2]}"));
    grammar_destroy(&g);
    o.compact = false;
    o.allow_additional = true; /* the standard's default for additionalProperties */
    g = schema_grammar(s, &o);
    assert_true(in_language(g, "{\"a\": [], \"b\": 1}"));
    grammar_destroy(&g);
    g = schema_grammar(s, NULL);
    assert_false(in_language(g, "{\"a\": [], \"b\": 1}"));
    grammar_destroy(&g);
    json_decref(s);
}

static const json_t *find(const json_t *c, const char *name)
{
    size_t i;
    const json_t *cs;
    json_array_foreach(c, i, cs) {
        if (!strcmp(json_string_value(json_object_get(cs, "name")), name))
            return json_object_get(cs, "schema");
    }
    fail_msg("no schema %s", name);
    return NULL;
}

static void test_schema_masks(void **state)
{
    (void)state;
    json_t *c = corpus();
    int32_t eog;
    gvocab_t *v = gg_synthetic_vocab(32000, 9, &eog);
    /* No recursion: every context is static once small rules are copied per call site. The
     * bounded nested arrays (an object under x{0,20} holding an array under x{1,8}) are
     * where specialization must leave the big object shared to copy the small rules under
     * it: copied by their own size, the object's copies used up the budget and left the
     * strings and numbers shared, with tens of thousands of uncertain tokens; now only the
     * tokens that cross the shared object's end depend on which call site it came from. */
    grammar_t *g = schema_grammar(find(c, "bounded nested arrays"), NULL);
    token_grammar_t *tg = NULL;
    assert_int_equal(token_grammar_new(&g, v, NULL, &tg), 0);
    assert_int_equal(token_grammar_precompute(tg), 0);
    token_grammar_stats st;
    token_grammar_get_stats(tg, &st);
    printf("bounded nested arrays: %llu uncertain ids over every position\n",
           (unsigned long long)st.n_uncertain);
    assert_true(st.n_uncertain < 100); /* the shared object's ends (4 here; 92,107 before) */
    token_grammar_destroy(&tg);
    g = schema_grammar(find(c, "nested realistic"), NULL);
    assert_int_equal(token_grammar_new(&g, v, NULL, &tg), 0);
    assert_int_equal(token_grammar_precompute(tg), 0);
    token_grammar_get_stats(tg, &st);
    assert_int_equal(st.n_uncertain, 0);
    /* walks through the mask against brute force on a sample, to the end of the object */
    uint32_t *mask = calloc(gvocab_mask_words(v), 4);
    uint64_t rng = 4;
    for (int run = 0; run < 8; run++) {
        gmatcher_t *m = NULL;
        assert_int_equal(gmatcher_new(tg, NULL, &m), 0);
        for (int step = 0; step < 400 && !gmatcher_is_terminated(m); step++) {
            assert_int_equal(gmatcher_fill_mask(m, mask), 0);
            int allowed = gmask_count(mask, gvocab_size(v));
            assert_true(allowed > 0);
            for (int k = 0; k < 300; k++) {
                int32_t t = (int32_t)(gg_rand(&rng) % (uint64_t)gvocab_size(v));
                int rc = gmatcher_accept(m, t);
                if (rc == 0)
                    assert_int_equal(gmatcher_rollback(m, 1), 0);
                if ((rc == 0) != gmask_get(mask, t))
                    fail_msg("step %d token %d: mask %d, brute force %d", step, t, gmask_get(mask, t), rc == 0);
            }
            int pick = (int)(gg_rand(&rng) % (uint64_t)allowed);
            int32_t t = 0;
            for (; t < gvocab_size(v); t++)
                if (gmask_get(mask, t) && pick-- == 0)
                    break;
            assert_int_equal(gmatcher_accept(m, t), 0);
        }
        gmatcher_destroy(&m);
    }
    free(mask);
    token_grammar_destroy(&tg);
    gvocab_destroy(&v);
    json_decref(c);
}

/* samples N: JSON lines {"name", "schema", "sample"} for the Python validator. */
static int print_samples(int n)
{
    const char *dir = getenv("DERAS_TEST_DATA");
    if (!dir)
        return 77;
    char path[4096];
    snprintf(path, sizeof path, "%s/grammar/schemas.json", dir);
    json_t *c = json_load_file(path, 0, NULL);
    if (!c)
        return 1;
    size_t i;
    json_t *cs;
    uint64_t rng = 77;
    json_array_foreach(c, i, cs) {
        char *gbnf;
        size_t len;
        grammar_t *g = NULL;
        if (jschema_to_gbnf_json(json_object_get(cs, "schema"), NULL, &gbnf, &len) ||
            grammar_from_gbnf(gbnf, len, NULL, &g))
            return 1;
        free(gbnf);
        char buf[8192];
        for (int k = 0; k < n; k++) {
            long sl = gg_sentence(g, &rng, 8, buf, sizeof buf);
            if (sl < 0)
                continue;
            json_t *line = json_pack("{s:O, s:s%}", "name", json_object_get(cs, "name"), "sample",
                                     buf, (size_t)sl);
            char *s = json_dumps(line, JSON_COMPACT);
            puts(s);
            free(s);
            json_decref(line);
        }
        grammar_destroy(&g);
    }
    json_decref(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "samples"))
        return print_samples(atoi(argv[2]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_json_mode_and_whitespace),
        cmocka_unit_test(test_schema_masks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
