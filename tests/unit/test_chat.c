/* SPDX-License-Identifier: Apache-2.0 */
/* test_chat.c - chat formats against transformers' Jinja rendering of the real templates
 * (SmolLM2's from the test model GGUF, Qwen2, Llama 3, Llama 2; data from
 * tests/ref/make_tokenizer_vectors.py, BOS removed from the front), default system
 * message extraction, and the refusals: unknown template, missing template, Llama 2 roles
 * that do not alternate.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <jansson.h>

#include "common/tokenizer/chat.h"
#include "common/base/status.h"
#include "test_util.h"

static void test_renders_match_jinja(void **s)
{
    (void)s;
    char *p = test_data_path("tokenizer/chat_cases.json");
    json_error_t err;
    json_t *root = json_load_file(p, 0, &err);
    if (!root)
        fail_msg("%s: %s", p, err.text);
    json_t *tmpls = json_object_get(root, "templates"), *convs = json_object_get(root, "conversations");
    json_t *renders = json_object_get(root, "renders");
    size_t n = json_array_size(renders), ok = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *r = json_array_get(renders, i);
        const char *name = json_string_value(json_object_get(r, "template"));
        json_t *conv = json_array_get(convs, (size_t)json_integer_value(json_object_get(r, "conversation")));
        chat_format f;
        int rc = chat_format_detect(json_string_value(json_object_get(tmpls, name)), &f);
        if (rc != DERAS_OK)
            fail_msg("%s: detect failed: %s", name, deras_errmsg());
        size_t nm = json_array_size(conv);
        chat_msg msgs[8];
        for (size_t k = 0; k < nm; k++) {
            msgs[k].role = json_string_value(json_object_get(json_array_get(conv, k), "role"));
            msgs[k].content = json_string_value(json_object_get(json_array_get(conv, k), "content"));
        }
        char *out = NULL;
        rc = chat_format_render(&f, msgs, nm, json_is_true(json_object_get(r, "add_generation_prompt")), &out);
        const char *want = json_string_value(json_object_get(r, "expected"));
        if (rc == DERAS_OK && !strcmp(out, want))
            ok++;
        else
            fprintf(stderr, "render %zu (%s): expected\n---\n%s\n---\ngot (%s)\n---\n%s\n---\n", i, name, want,
                    deras_status_name(rc), out ? out : "");
        free(out);
    }
    printf("chat: %zu/%zu renders equal to transformers' Jinja output\n", ok, n);
    assert_int_equal(ok, n);
    assert_true(n >= 40);
    json_decref(root);
    free(p);
}

static void test_detection(void **s)
{
    (void)s;
    chat_format f;
    assert_int_equal(chat_format_detect(NULL, &f), DERAS_ENOTFOUND);
    assert_int_equal(chat_format_detect("{{ messages[0]['content'] }}", &f), DERAS_EUNSUPPORTED);
    assert_int_equal(chat_format_detect("{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>"
                                        "Cutting Knowledge Date<|eot_id|>{% endfor %}", &f), DERAS_EUNSUPPORTED);
    /* escapes inside the literal are unescaped as Jinja does */
    assert_int_equal(chat_format_detect("{{ '<|im_start|>system\\nBe \\'nice\\'.<|im_end|>\\n' }}<|im_start|>", &f),
                     DERAS_OK);
    assert_int_equal(f.style, CHAT_STYLE_CHATML);
    assert_string_equal(f.default_system, "Be 'nice'.");
    /* ChatML without a default system message */
    assert_int_equal(chat_format_detect("{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                                        "'<|im_end|>'}}", &f), DERAS_OK);
    assert_string_equal(f.default_system, "");
}

static void test_llama2_roles_must_alternate(void **s)
{
    (void)s;
    chat_format f = {.style = CHAT_STYLE_LLAMA2};
    chat_msg m[] = {{"user", "a"}, {"user", "b"}};
    char *out = NULL;
    assert_int_equal(chat_format_render(&f, m, 2, true, &out), DERAS_EINVAL);
    assert_null(out);
    chat_msg m2[] = {{"assistant", "a"}};
    assert_int_equal(chat_format_render(&f, m2, 1, true, &out), DERAS_EINVAL);
    chat_msg m3[] = {{"user", NULL}};
    assert_int_equal(chat_format_render(&f, m3, 1, true, &out), DERAS_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_renders_match_jinja),
        cmocka_unit_test(test_detection),
        cmocka_unit_test(test_llama2_roles_must_alternate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
