/* SPDX-License-Identifier: Apache-2.0 */
/* openai_response.c - the router's replies -> OpenAI-compatible JSON (see openai_response.h):
 * the growable buffer, JSON strings, logprobs in both kinds' shapes, choices (streamed or
 * whole), response bodies, usage and errors. */
#include "router/openai_response.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/utf8.h"

void oai_buf_free(oai_buf *b)
{
    free(b->p);
    *b = (oai_buf){0};
}

static bool reserve(oai_buf *b, size_t more)
{
    if (b->n + more <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + more)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void oai_buf_put(oai_buf *b, const char *s, size_t n)
{
    if (!reserve(b, n))
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

void oai_buf_printf(oai_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !reserve(b, (size_t)n + 1))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

void oai_buf_json_str(oai_buf *b, const char *s, size_t n)
{
    if (!reserve(b, n * 6 + 2))
        return;
    char *o = b->p + b->n;
    *o++ = '"';
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            uint32_t cp;
            size_t l = utf8_decode(s + i, n - i, &cp);
            if (l) {
                memcpy(o, s + i, l);
                o += l;
                i += l;
            } else { /* U+FFFD for each invalid sequence */
                memcpy(o, "\xef\xbf\xbd", 3);
                o += 3;
                size_t bad = utf8_incomplete_len(s + i, n - i) ? n - i : utf8_invalid_len(s + i, n - i);
                i += bad ? bad : 1;
            }
            continue;
        }
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c == '\n') {
            *o++ = '\\';
            *o++ = 'n';
        } else if (c < 0x20 || c == 0x7f) {
            o += sprintf(o, "\\u%04x", c);
        } else {
            *o++ = (char)c;
        }
        i++;
    }
    *o++ = '"';
    b->n = (size_t)(o - b->p);
}

static void put_lit(oai_buf *b, const char *s)
{
    oai_buf_put(b, s, strlen(s));
}

static void put_logprob(oai_buf *b, float lp)
{
    oai_buf_printf(b, "%.9g", isfinite(lp) ? (double)lp : -9999.0);
}

static void put_token(oai_buf *b, const tokenizer_t *tok, int32_t id, bool bytes)
{
    size_t n = 0;
    const char *s = tok ? tokenizer_token_bytes(tok, id, &n) : NULL;
    if (!s)
        n = 0;
    oai_buf_json_str(b, s ? s : "", n);
    if (!bytes)
        return;
    put_lit(b, ",\"bytes\":[");
    for (size_t i = 0; i < n; i++)
        oai_buf_printf(b, i ? ",%u" : "%u", (unsigned char)s[i]);
    put_lit(b, "]");
}

/* Chat: {"content": [{token, logprob, bytes, top_logprobs}]}; completions: {tokens,
 * token_logprobs, top_logprobs, text_offset}. */
static void put_logprobs(oai_buf *b, oai_kind kind, const tokenizer_t *tok, const oai_piece *p)
{
    if (!p->lps) {
        put_lit(b, "null");
        return;
    }
    if (kind == OAI_CHAT) {
        put_lit(b, "{\"content\":[");
        for (int i = 0; i < p->n_lps; i++) {
            const proto_logprob *l = &p->lps[i];
            put_lit(b, i ? ",{\"token\":" : "{\"token\":");
            put_token(b, tok, l->token_id, true);
            put_lit(b, ",\"logprob\":");
            put_logprob(b, l->logprob);
            put_lit(b, ",\"top_logprobs\":[");
            for (int j = 0; j < l->n_top && j < p->top_n; j++) {
                put_lit(b, j ? ",{\"token\":" : "{\"token\":");
                put_token(b, tok, l->top_ids[j], true);
                put_lit(b, ",\"logprob\":");
                put_logprob(b, l->top_logprobs[j]);
                put_lit(b, "}");
            }
            put_lit(b, "]}");
        }
        put_lit(b, "]}");
        return;
    }
    put_lit(b, "{\"tokens\":[");
    for (int i = 0; i < p->n_lps; i++) {
        if (i)
            put_lit(b, ",");
        put_token(b, tok, p->lps[i].token_id, false);
    }
    put_lit(b, "],\"token_logprobs\":[");
    for (int i = 0; i < p->n_lps; i++) {
        if (i)
            put_lit(b, ",");
        put_logprob(b, p->lps[i].logprob);
    }
    put_lit(b, "],\"top_logprobs\":[");
    for (int i = 0; i < p->n_lps; i++) {
        put_lit(b, i ? ",{" : "{");
        for (int j = 0; j < p->lps[i].n_top && j < p->top_n; j++) {
            if (j)
                put_lit(b, ",");
            put_token(b, tok, p->lps[i].top_ids[j], false);
            put_lit(b, ":");
            put_logprob(b, p->lps[i].top_logprobs[j]);
        }
        put_lit(b, "}");
    }
    /* each token's offset in the sample's text, from the bytes of the tokens before it */
    put_lit(b, "],\"text_offset\":[");
    int off = p->text_offset;
    for (int i = 0; i < p->n_lps; i++) {
        oai_buf_printf(b, i ? ",%d" : "%d", off);
        size_t n = 0;
        if (tok && tokenizer_token_bytes(tok, p->lps[i].token_id, &n))
            off += (int)n;
    }
    put_lit(b, "]}");
}

static void put_finish(oai_buf *b, const char *finish)
{
    if (!finish) {
        put_lit(b, "null");
        return;
    }
    oai_buf_json_str(b, finish, strlen(finish));
}

static void put_head(oai_buf *b, const char *object, const char *id, int64_t created,
                     const char *model)
{
    put_lit(b, "{\"id\":");
    oai_buf_json_str(b, id, strlen(id));
    oai_buf_printf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object,
                   (long long)created);
    oai_buf_json_str(b, model, strlen(model));
}

/* One choice object: {"index", then a chat delta, a chat message or a completion's text,
 * "logprobs", "finish_reason"}. Streamed chunks and whole choices both write it. */
static void put_choice_object(oai_buf *b, oai_kind kind, const tokenizer_t *tok,
                              const oai_piece *p, bool delta)
{
    oai_buf_printf(b, "{\"index\":%d,", p->index);
    if (kind == OAI_CHAT && delta) {
        put_lit(b, "\"delta\":{");
        if (p->role)
            put_lit(b, "\"role\":\"assistant\"");
        if (p->n_text || (p->role && !p->finish && !p->n_tool_calls)) {
            put_lit(b, p->role ? ",\"content\":" : "\"content\":");
            oai_buf_json_str(b, p->text, p->n_text);
        }
        if (p->n_tool_calls) {
            put_lit(b, p->role || p->n_text ? ",\"tool_calls\":[" : "\"tool_calls\":[");
            oai_buf_put(b, p->tool_calls, p->n_tool_calls);
            put_lit(b, "]");
        }
        put_lit(b, "},");
    } else if (kind == OAI_CHAT) {
        put_lit(b, "\"message\":{\"role\":\"assistant\",\"content\":");
        if (p->n_tool_calls && !p->n_text)
            put_lit(b, "null");
        else
            oai_buf_json_str(b, p->text, p->n_text);
        if (p->n_tool_calls) {
            put_lit(b, ",\"tool_calls\":[");
            oai_buf_put(b, p->tool_calls, p->n_tool_calls);
            put_lit(b, "]");
        }
        put_lit(b, "},");
    } else {
        put_lit(b, "\"text\":");
        oai_buf_json_str(b, p->text, p->n_text);
        put_lit(b, ",");
    }
    put_lit(b, "\"logprobs\":");
    put_logprobs(b, kind, tok, p);
    put_lit(b, ",\"finish_reason\":");
    put_finish(b, p->finish);
    put_lit(b, "}");
}

static void put_usage(oai_buf *b, int prompt_tokens, int completion_tokens)
{
    oai_buf_printf(b,
                   "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}",
                   prompt_tokens, completion_tokens, prompt_tokens + completion_tokens);
}

void oai_put_chunk(oai_buf *b, oai_kind kind, const char *id, int64_t created,
                   const char *model, const tokenizer_t *tok, const oai_piece *p)
{
    put_lit(b, "data: ");
    put_head(b, kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", id, created,
             model);
    put_lit(b, ",\"choices\":[");
    put_choice_object(b, kind, tok, p, true);
    put_lit(b, "]");
    if (p->usage) {
        put_lit(b, ",");
        put_usage(b, p->prompt_tokens, p->completion_tokens);
    }
    put_lit(b, "}\n\n");
}

void oai_put_choice(oai_buf *b, oai_kind kind, const tokenizer_t *tok, const oai_piece *p,
                    bool first)
{
    if (!first)
        put_lit(b, ",");
    put_choice_object(b, kind, tok, p, false);
}

void oai_put_response(oai_buf *b, oai_kind kind, const char *id, int64_t created,
                      const char *model, const oai_buf *choices, int prompt_tokens,
                      int completion_tokens)
{
    put_head(b, kind == OAI_CHAT ? "chat.completion" : "text_completion", id, created, model);
    put_lit(b, ",\"choices\":[");
    oai_buf_put(b, choices->p ? choices->p : "", choices->n);
    put_lit(b, "],");
    put_usage(b, prompt_tokens, completion_tokens);
    put_lit(b, "}");
}

void oai_put_usage_chunk(oai_buf *b, oai_kind kind, const char *id, int64_t created,
                         const char *model, int prompt_tokens, int completion_tokens)
{
    put_lit(b, "data: ");
    put_head(b, kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", id, created,
             model);
    put_lit(b, ",\"choices\":[],");
    put_usage(b, prompt_tokens, completion_tokens);
    put_lit(b, "}\n\n");
}

unsigned oai_http_status(enum proto_error_code code)
{
    switch (code) {
    case PE_BUSY: return 429;
    case PE_NO_WORKERS:
    case PE_SHUTTING_DOWN:
    case PE_WORKER_FAILED: return 503;
    case PE_MESSAGE_TOO_LARGE: return 413;
    case PE_INTERNAL: return 500;
    default: return 400;
    }
}

void oai_put_error(oai_buf *b, unsigned http_status, const char *code, const char *param,
                   const char *message)
{
    const char *type = http_status == 401   ? "authentication_error"
                       : http_status == 429 ? "rate_limit_error"
                       : http_status >= 500 ? "server_error"
                                            : "invalid_request_error";
    put_lit(b, "{\"error\":{\"message\":");
    oai_buf_json_str(b, message, strlen(message));
    oai_buf_printf(b, ",\"type\":\"%s\",\"param\":", type);
    if (param && *param)
        oai_buf_json_str(b, param, strlen(param));
    else
        put_lit(b, "null");
    put_lit(b, ",\"code\":");
    oai_buf_json_str(b, code, strlen(code));
    put_lit(b, "}}");
}

const char *oai_finish_name(finish_reason f)
{
    return f == FINISH_STOP ? "stop" : f == FINISH_LENGTH ? "length" : "abort";
}

const char *oai_finish_name_tools(finish_reason f, int n_tool_calls)
{
    return f == FINISH_STOP && n_tool_calls > 0 ? "tool_calls" : oai_finish_name(f);
}
