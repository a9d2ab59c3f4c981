/* SPDX-License-Identifier: Apache-2.0 */
/* chat.c - the model's chat (see chat.h): its template compiled at start, a request's
 * conversation rendered by it (or by a built-in format), the end-of-turn ids. */
#include "router/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/base/status.h"
#include "common/template/template.h"
#include "common/tokenizer/chat.h"

#define CHAT_MAX_END_IDS REQ_MAX_STOP_IDS

struct chat {
    const tokenizer_t *tok;
    tmpl_t *tmpl;              /* the model's template, or NULL */
    chat_format builtin;       /* without a template: style 0 means no chat at all */
    json_t *specials;          /* {"bos_token": ..., "eos_token": ...} as the model has them */
    int32_t end_ids[CHAT_MAX_END_IDS];
    int n_end_ids;
    tool_style tools;
    char desc[96];
};

/* Tokens that close a turn in the templates of the common families. */
static const char *const turn_ends[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
                                        "<end_of_turn>"};

static void add_end_id(chat_t *c, int32_t id)
{
    if (id < 0 || c->n_end_ids == CHAT_MAX_END_IDS)
        return;
    for (int i = 0; i < c->n_end_ids; i++)
        if (c->end_ids[i] == id)
            return;
    c->end_ids[c->n_end_ids++] = id;
}

/* The ids that end the assistant's turn: end of generation, and each turn-closing token
 * the template writes (or the built-in format uses) that the vocabulary has. */
static void collect_end_ids(chat_t *c, const char *source)
{
    for (int i = 0; i < tokenizer_n_eog(c->tok); i++)
        add_end_id(c, tokenizer_eog_at(c->tok, i));
    if (!source) /* a built-in format: the token that closes its turns */
        source = c->builtin.style == CHAT_STYLE_CHATML   ? "<|im_end|>"
                 : c->builtin.style == CHAT_STYLE_LLAMA3 ? "<|eot_id|>"
                                                         : "";
    for (size_t i = 0; i < sizeof turn_ends / sizeof turn_ends[0]; i++)
        if (strstr(source, turn_ends[i]))
            add_end_id(c, tokenizer_find(c->tok, turn_ends[i]));
}

/* bos_token / eos_token as transformers passes them: the token's text, when there is one. */
static int collect_specials(chat_t *c)
{
    if (!(c->specials = json_object()))
        return deras_fail(DERAS_ENOMEM, "chat: out of memory");
    const char *names[2] = {"bos_token", "eos_token"};
    int32_t ids[2] = {tokenizer_bos(c->tok), tokenizer_eos(c->tok)};
    for (int i = 0; i < 2; i++) {
        const char *text = ids[i] >= 0 ? tokenizer_token_text(c->tok, ids[i]) : NULL;
        if (text && json_object_set_new(c->specials, names[i], json_string(text)))
            return deras_fail(DERAS_ENOMEM, "chat: out of memory");
    }
    return DERAS_OK;
}

int chat_new(const tokenizer_t *tok, const char *source, chat_t **out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "chat_new: NULL out");
    *out = NULL;
    if (!tok)
        return deras_fail(DERAS_EINVAL, "chat_new: NULL tokenizer");
    chat_t *c = calloc(1, sizeof *c);
    if (!c)
        return deras_fail(DERAS_ENOMEM, "chat: out of memory");
    c->tok = tok;
    int rc = collect_specials(c);
    const char *given = source;
    if (!source)
        source = tokenizer_chat_template(tok);
    if (!rc && source) {
        size_t n = strlen(source);
        if ((rc = tmpl_compile(source, n, NULL, &c->tmpl)))
            rc = deras_fail_ctx(rc, "chat template: ");
        snprintf(c->desc, sizeof c->desc, "%s chat template (%zu bytes)",
                 given ? "the given" : "the model's", n);
        c->tools = tool_style_of_template(source);
    } else if (!rc) {
        if (tokenizer_find(tok, "<|im_start|>") >= 0 && tokenizer_find(tok, "<|im_end|>") >= 0)
            c->builtin.style = CHAT_STYLE_CHATML;
        else if (tokenizer_find(tok, "<|start_header_id|>") >= 0 &&
                 tokenizer_find(tok, "<|end_header_id|>") >= 0 &&
                 tokenizer_find(tok, "<|eot_id|>") >= 0)
            c->builtin.style = CHAT_STYLE_LLAMA3;
        snprintf(c->desc, sizeof c->desc, "%s (the model has no chat template)",
                 c->builtin.style == CHAT_STYLE_CHATML   ? "built-in ChatML format"
                 : c->builtin.style == CHAT_STYLE_LLAMA3 ? "built-in Llama 3 format"
                                                         : "none: chats are refused");
    }
    if (rc) {
        chat_destroy(&c);
        return rc;
    }
    collect_end_ids(c, source);
    *out = c;
    return DERAS_OK;
}

void chat_destroy(chat_t **c)
{
    if (!c || !*c)
        return;
    tmpl_destroy(&(*c)->tmpl);
    json_decref((*c)->specials);
    free(*c);
    *c = NULL;
}

const char *chat_describe(const chat_t *c) { return c->desc; }

tool_style chat_tool_style(const chat_t *c) { return c->tools; }

/* The template's variables, as apply_chat_template passes them. NULL when out of memory. */
static json_t *template_context(const chat_t *c, const proto_request *q)
{
    json_t *ctx = json_deep_copy(c->specials);
    if (!ctx)
        return NULL;
    if (json_object_set(ctx, "messages", q->messages) ||
        json_object_set_new(ctx, "tools", q->tools ? json_incref(q->tools) : json_null()) ||
        json_object_set_new(ctx, "documents", json_null()) ||
        json_object_set_new(ctx, "add_generation_prompt",
                            json_boolean(q->add_generation_prompt)) ||
        (q->template_kwargs && json_object_update(ctx, q->template_kwargs))) {
        json_decref(ctx);
        return NULL;
    }
    return ctx;
}

static enum proto_error_code render_template(const chat_t *c, const proto_request *q,
                                             char **text, size_t *len, char *msg, size_t cap)
{
    json_t *ctx = template_context(c, q);
    if (!ctx) {
        snprintf(msg, cap, "out of memory building the chat template's context");
        return PE_INTERNAL;
    }
    int rc = tmpl_render(c->tmpl, ctx, text, len);
    json_decref(ctx);
    if (rc) {
        /* raise_exception (the template refuses the conversation), an error Jinja2 raises
         * too, or a sandbox bound: the request's conversation, not the router, is at fault */
        snprintf(msg, cap, "chat template: %s", deras_errmsg());
        return PE_CHAT_TEMPLATE;
    }
    return PE_NONE;
}

/* A message's content as one string: a string as is, text parts joined. NULL + *owned
 * false for no content; *owned when the result was allocated. */
static const char *content_text(const json_t *m, bool *owned)
{
    const json_t *content = json_object_get(m, "content");
    *owned = false;
    if (json_is_string(content))
        return json_string_value(content);
    if (!json_is_array(content))
        return NULL;
    size_t n = 0, i;
    const json_t *part;
    json_array_foreach(content, i, part)
        n += json_string_length(json_object_get(part, "text"));
    char *s = malloc(n + 1), *p = s;
    if (!s)
        return NULL;
    json_array_foreach(content, i, part) {
        const json_t *t = json_object_get(part, "text");
        memcpy(p, json_string_value(t), json_string_length(t));
        p += json_string_length(t);
    }
    *p = '\0';
    *owned = true;
    return s;
}

static enum proto_error_code render_builtin(const chat_t *c, const proto_request *q,
                                            char **text, size_t *len, char *msg, size_t cap)
{
    size_t n = json_array_size(q->messages);
    if (q->tools) {
        snprintf(msg, cap, "%s: no tools", c->desc);
        return PE_CHAT_UNSUPPORTED;
    }
    chat_msg *msgs = calloc(n, sizeof *msgs);
    bool *owned = calloc(n, sizeof *owned);
    enum proto_error_code code = PE_NONE;
    if (!msgs || !owned) {
        snprintf(msg, cap, "out of memory rendering a chat");
        code = PE_INTERNAL;
    }
    for (size_t i = 0; code == PE_NONE && i < n; i++) {
        const json_t *m = json_array_get(q->messages, i);
        msgs[i].role = json_string_value(json_object_get(m, "role"));
        msgs[i].content = content_text(m, &owned[i]);
        if (!strcmp(msgs[i].role, "tool") || json_object_get(m, "tool_calls")) {
            snprintf(msg, cap, "%s: no tool messages (messages[%zu])", c->desc, i);
            code = PE_CHAT_UNSUPPORTED;
        } else if (!msgs[i].content) {
            snprintf(msg, cap, "out of memory rendering a chat");
            code = PE_INTERNAL;
        }
    }
    if (code == PE_NONE) {
        int rc = chat_format_render(&c->builtin, msgs, n, q->add_generation_prompt, text);
        if (rc == DERAS_ENOMEM) {
            snprintf(msg, cap, "out of memory rendering a chat");
            code = PE_INTERNAL;
        } else if (rc) {
            snprintf(msg, cap, "chat format: %s", deras_errmsg());
            code = PE_CHAT_TEMPLATE;
        } else {
            *len = strlen(*text);
        }
    }
    for (size_t i = 0; owned && i < n; i++)
        if (owned[i])
            free((char *)msgs[i].content);
    free(msgs);
    free(owned);
    return code;
}

enum proto_error_code chat_render(const chat_t *c, const proto_request *q, char **text,
                                  size_t *len, bool *add_special, char *msg, size_t cap)
{
    *text = NULL;
    *len = 0;
    *add_special = false;
    if (c->tmpl)
        return render_template(c, q, text, len, msg, cap);
    if (!c->builtin.style) {
        snprintf(msg, cap, "the model has no chat template and no built-in chat format fits "
                           "its vocabulary: send a prompt instead");
        return PE_CHAT_UNSUPPORTED;
    }
    *add_special = true; /* the built-in formats leave BOS to the tokenizer */
    return render_builtin(c, q, text, len, msg, cap);
}

int chat_add_stops(const chat_t *c, req_params *p)
{
    if (p->ignore_eos) /* vLLM's: the turn's end is the chat's end of generation */
        return DERAS_OK;
    int32_t ids[REQ_MAX_STOP_IDS];
    int n = p->n_stop_ids;
    memcpy(ids, p->stop_ids, (size_t)n * sizeof *ids);
    for (int i = 0; i < c->n_end_ids; i++) {
        bool have = false;
        for (int k = 0; k < n && !have; k++)
            have = ids[k] == c->end_ids[i];
        if (have)
            continue;
        if (n == REQ_MAX_STOP_IDS)
            return deras_fail(DERAS_ERANGE,
                              "stop_token_ids: a chat adds the model's %d end-of-turn ids; at "
                              "most %d ids in all",
                              c->n_end_ids, REQ_MAX_STOP_IDS);
        ids[n++] = c->end_ids[i];
    }
    memcpy(p->stop_ids, ids, (size_t)n * sizeof *ids);
    p->n_stop_ids = n;
    return DERAS_OK;
}
