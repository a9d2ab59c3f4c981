/* SPDX-License-Identifier: Apache-2.0 */
/* test_router_chat.c - the model's chat at the router (router/chat.h): the template of
 * tests/data/tiny-chat rendered with transformers' variables, the end-of-turn ids joining a
 * request's stop ids, and, in scratch model directories that share its tokenizer.json, a
 * template that raises (chat_template_error), one the interpreter cannot compile (refused
 * at start with its line), and no template at all (the built-in ChatML format, which has
 * no tools: chat_unsupported).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/status.h"
#include "router/chat.h"
#include "test_util.h"

/* A model directory in `dir` with tiny-chat's tokenizer.json and the given template file
 * (NULL: none; tokenizer_config.json names <|im_end|> the EOS and has no template). */
static tokenizer_t *scratch_model(const char *dir, const char *template_text)
{
    char *src = test_data_path("tiny-chat/tokenizer.json");
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    assert_int_equal(symlink(src, path), 0);
    free(src);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"eos_token\": \"<|im_end|>\"}", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    unlink(path);
    if (template_text) {
        f = fopen(path, "w");
        assert_non_null(f);
        fputs(template_text, f);
        fclose(f);
    }
    tokenizer_t *tok = NULL;
    assert_int_equal(tokenizer_from_hf_dir(dir, &tok), DERAS_OK);
    return tok;
}

static proto_request chat_request(const char *messages_json)
{
    proto_request q;
    proto_request_default(&q);
    json_error_t jerr;
    q.messages = json_loads(messages_json, 0, &jerr);
    assert_non_null(q.messages);
    return q;
}

static void the_models_template_renders_with_transformers_variables(void **state)
{
    (void)state;
    char *dir = test_data_path("tiny-chat");
    tokenizer_t *tok = NULL;
    assert_int_equal(tokenizer_from_hf_dir(dir, &tok), DERAS_OK);
    free(dir);
    chat_t *c = (chat_t *)1;
    assert_int_equal(chat_new(tok, NULL, NULL), DERAS_EINVAL);
    assert_int_equal(chat_new(NULL, NULL, &c), DERAS_EINVAL);
    assert_null(c);
    assert_int_equal(chat_new(tok, NULL, &c), DERAS_OK);
    assert_non_null(strstr(chat_describe(c), "the model's chat template"));

    proto_request q = chat_request("[{\"role\": \"system\", \"content\": \"Be brief.\"},"
                                   " {\"role\": \"user\", \"content\": \"Hi \\u00e9\"}]");
    char *text, msg[256];
    size_t len;
    bool add_special = true;
    assert_int_equal(chat_render(c, &q, &text, &len, &add_special, msg, sizeof msg), PE_NONE);
    assert_string_equal(text, "<|im_start|>system\nBe brief.<|im_end|>\n"
                              "<|im_start|>user\nHi \xc3\xa9<|im_end|>\n<|im_start|>assistant\n");
    assert_int_equal(len, strlen(text));
    assert_false(add_special); /* the template wrote the special tokens */
    free(text);
    q.add_generation_prompt = false;
    assert_int_equal(chat_render(c, &q, &text, &len, &add_special, msg, sizeof msg), PE_NONE);
    assert_null(strstr(text, "assistant"));
    free(text);
    json_decref(q.messages);

    /* content parts: this template concatenates strings, so Jinja2 raises, and so do we */
    q = chat_request("[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\"}]}]");
    assert_int_equal(chat_render(c, &q, &text, &len, &add_special, msg, sizeof msg),
                     PE_CHAT_TEMPLATE);
    assert_null(text);
    assert_non_null(strstr(msg, "chat template: template line 1"));
    json_decref(q.messages);

    /* end of turn: <|im_end|> and the end-of-generation ids join the request's stop ids,
     * each once */
    int32_t im_end = tokenizer_find(tok, "<|im_end|>");
    req_params p;
    req_params_init(&p);
    p.stop_ids[p.n_stop_ids++] = 7;
    assert_int_equal(chat_add_stops(c, &p), DERAS_OK);
    int n = p.n_stop_ids;
    assert_in_range(n, 2, 1 + tokenizer_n_eog(tok) + 1);
    assert_int_equal(p.stop_ids[0], 7);
    bool has_im_end = false;
    for (int i = 1; i < n; i++) {
        has_im_end |= p.stop_ids[i] == im_end;
        assert_true(p.stop_ids[i] == im_end || tokenizer_is_eog(tok, p.stop_ids[i]));
    }
    assert_true(has_im_end);
    assert_int_equal(chat_add_stops(c, &p), DERAS_OK); /* already there: not repeated */
    assert_int_equal(p.n_stop_ids, n);
    for (p.n_stop_ids = 0; p.n_stop_ids < REQ_MAX_STOP_IDS; p.n_stop_ids++)
        p.stop_ids[p.n_stop_ids] = 100 + p.n_stop_ids;
    assert_int_equal(chat_add_stops(c, &p), DERAS_ERANGE);
    assert_int_equal(p.n_stop_ids, REQ_MAX_STOP_IDS);
    /* ignore_eos: the turn's end does not stop a chat either; the request's own ids stay */
    req_params_init(&p);
    p.ignore_eos = true;
    p.stop_ids[p.n_stop_ids++] = 7;
    assert_int_equal(chat_add_stops(c, &p), DERAS_OK);
    assert_int_equal(p.n_stop_ids, 1);
    assert_int_equal(p.stop_ids[0], 7);
    chat_destroy(&c);
    assert_null(c);
    chat_destroy(&c);
    chat_destroy(NULL);
    tokenizer_destroy(&tok);
}

static void raising_refused_and_missing_templates(void **state)
{
    (void)state;
    char dir[] = "/tmp/deras-test-chat-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *text, msg[256];
    size_t len;
    bool add_special;
    chat_t *c = NULL;

    /* the template refuses the conversation: its words come back */
    tokenizer_t *tok = scratch_model(dir, "{% if messages[0].role != 'user' %}"
                                          "{{ raise_exception('Conversations start with a user') }}"
                                          "{% endif %}{{ bos_token ~ messages[0].content }}");
    assert_int_equal(chat_new(tok, NULL, &c), DERAS_OK);
    proto_request q = chat_request("[{\"role\": \"assistant\", \"content\": \"x\"}]");
    assert_int_equal(chat_render(c, &q, &text, &len, &add_special, msg, sizeof msg),
                     PE_CHAT_TEMPLATE);
    assert_non_null(strstr(msg, "Conversations start with a user"));
    json_decref(q.messages);
    /* chat_template_kwargs reach the template, over bos_token (none in this vocabulary's
     * config: undefined prints as "") */
    q = chat_request("[{\"role\": \"user\", \"content\": \"x\"}]");
    assert_int_equal(chat_render(c, &q, &text, &len, &add_special, msg, sizeof msg), PE_NONE);
    assert_string_equal(text, "x");
    free(text);
    json_error_t jerr;
    q.template_kwargs = json_loads("{\"bos_token\": \"<B>\"}", 0, &jerr);
    assert_int_equal(chat_render(c, &q, &text, &len, &add_special, msg, sizeof msg), PE_NONE);
    assert_string_equal(text, "<B>x");
    free(text);
    json_decref(q.template_kwargs);
    q.template_kwargs = NULL;
    chat_destroy(&c);
    tokenizer_destroy(&tok);

    /* a template the interpreter cannot compile stops the router: the construct and line */
    tok = scratch_model(dir, "line one\n{{ messages | wordwrap(5) }}");
    c = (chat_t *)1;
    int rc = chat_new(tok, NULL, &c);
    assert_true(rc == DERAS_EUNSUPPORTED || rc == DERAS_EFORMAT);
    assert_null(c);
    assert_non_null(strstr(deras_errmsg(), "chat template: template line 2"));
    assert_non_null(strstr(deras_errmsg(), "wordwrap"));
    tokenizer_destroy(&tok);

    /* no template: the built-in ChatML format (this vocabulary has <|im_start|>) */
    tok = scratch_model(dir, NULL);
    assert_int_equal(chat_new(tok, NULL, &c), DERAS_OK);
    assert_non_null(strstr(chat_describe(c), "built-in ChatML"));
    assert_int_equal(chat_render(c, &q, &text, &len, &add_special, msg, sizeof msg), PE_NONE);
    assert_string_equal(text, "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n");
    assert_true(add_special); /* BOS, if the model has one, is the tokenizer's */
    free(text);
    q.tools = json_loads("[{\"type\": \"function\"}]", 0, &jerr);
    assert_int_equal(chat_render(c, &q, &text, &len, &add_special, msg, sizeof msg),
                     PE_CHAT_UNSUPPORTED);
    assert_null(text);
    json_decref(q.tools);
    q.tools = NULL;
    json_decref(q.messages);
    q = chat_request("[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"tool\", "
                     "\"content\": \"4\"}]");
    assert_int_equal(chat_render(c, &q, &text, &len, &add_special, msg, sizeof msg),
                     PE_CHAT_UNSUPPORTED);
    json_decref(q.messages);
    chat_destroy(&c);
    tokenizer_destroy(&tok);

    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_models_template_renders_with_transformers_variables),
        cmocka_unit_test(raising_refused_and_missing_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
