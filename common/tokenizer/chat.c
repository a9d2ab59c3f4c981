/* SPDX-License-Identifier: Apache-2.0 */
/* chat.c - recognising a model's chat template and rendering conversations natively.
 *
 * Detection looks for each family's fixed markers in the Jinja text:
 *  - ChatML: "<|im_start|>" and "<|im_end|>" (SmolLM2, Qwen2);
 *  - Llama 3: "<|start_header_id|>", "<|end_header_id|>" and "<|eot_id|>" (3.0 style;
 *    the 3.1+ templates that inject a "Cutting Knowledge Date" system block are refused);
 *  - Llama 2: "[INST]", "[/INST]" and "<<SYS>>".
 * A ChatML template may declare a default system message as a string literal
 * '<|im_start|>system\n...<|im_end|>' used when the conversation has none; the literal is
 * unescaped as Jinja would (\n, \t, \', \", \\) and kept in chat_format.default_system.
 *
 * Rendering reproduces the reference templates' output with the BOS the tokenizer adds
 * left out: ChatML "<|im_start|>role\ncontent<|im_end|>\n"; Llama 3
 * "<|start_header_id|>role<|end_header_id|>\n\n" + trimmed content + "<|eot_id|>";
 * Llama 2 "[INST] " + (the "<<SYS>>" block) + content, stripped, + " [/INST]", the
 * assistant's " answer </s>", and "<s>" before every later user turn, with roles that must
 * alternate user/assistant (DERAS_EINVAL otherwise, as the template raises).
 * Cost: O(total message length); one allocation for the result.
 */
#include "chat.h"

#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/base/utf8.h"

static const char CHATML_SYS[] = "<|im_start|>system\n";

/* Unescape a Jinja string literal starting at the opening quote q; returns the malloc'd
 * value and sets *end past the closing quote, or NULL if unterminated. */
static char *jinja_literal(const char *q, const char **end)
{
    char quote = *q;
    size_t cap = strlen(q) + 1, n = 0;
    char *v = malloc(cap);
    if (!v)
        return NULL;
    for (const char *p = q + 1; *p; p++) {
        if (*p == quote) {
            v[n] = '\0';
            *end = p + 1;
            return v;
        }
        if (*p == '\\' && p[1]) {
            p++;
            switch (*p) {
            case 'n': v[n++] = '\n'; break;
            case 't': v[n++] = '\t'; break;
            case 'r': v[n++] = '\r'; break;
            default: v[n++] = *p; break;
            }
            continue;
        }
        v[n++] = *p;
    }
    free(v);
    return NULL;
}

/* Find a literal '<|im_start|>system\n...<|im_end|>' and copy its message. */
static int chatml_default_system(const char *jinja, chat_format *out)
{
    for (const char *p = jinja; *p; p++) {
        if (*p != '\'' && *p != '"')
            continue;
        const char *end;
        char *lit = jinja_literal(p, &end);
        if (!lit)
            return 0;
        size_t pre = strlen(CHATML_SYS);
        const char *close = strstr(lit, "<|im_end|>");
        if (!strncmp(lit, CHATML_SYS, pre) && close) {
            size_t n = (size_t)(close - lit) - pre;
            if (n >= sizeof out->default_system) {
                free(lit);
                return deras_fail(DERAS_ERANGE, "chat template: default system message of %zu bytes is longer "
                                  "than %zu", n, sizeof out->default_system - 1);
            }
            memcpy(out->default_system, lit + pre, n);
            out->default_system[n] = '\0';
            free(lit);
            return 0;
        }
        free(lit);
        p = end - 1;
    }
    return 0;
}

int chat_format_detect(const char *jinja, chat_format *out)
{
    if (!out)
        return deras_fail(DERAS_EINVAL, "chat_format_detect: NULL output");
    if (!jinja)
        return deras_fail(DERAS_ENOTFOUND, "the model declares no chat template");
    memset(out, 0, sizeof *out);
    if (strstr(jinja, "<|im_start|>") && strstr(jinja, "<|im_end|>")) {
        out->style = CHAT_STYLE_CHATML;
        return chatml_default_system(jinja, out);
    }
    if (strstr(jinja, "<|start_header_id|>") && strstr(jinja, "<|end_header_id|>") && strstr(jinja, "<|eot_id|>")) {
        if (strstr(jinja, "Cutting Knowledge Date"))
            return deras_fail(DERAS_EUNSUPPORTED, "chat template: Llama 3.1+ template (injects a dated system "
                              "block and tool prompts) is not supported");
        out->style = CHAT_STYLE_LLAMA3;
        return 0;
    }
    if (strstr(jinja, "[INST]") && strstr(jinja, "[/INST]") && strstr(jinja, "<<SYS>>")) {
        out->style = CHAT_STYLE_LLAMA2;
        return 0;
    }
    return deras_fail(DERAS_EUNSUPPORTED, "chat template not recognised (supported: ChatML, Llama 3, Llama 2): "
                      "'%.80s...'", jinja);
}

struct sbuf {
    char *s;
    size_t n, cap;
    int err;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->err)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->err = deras_fail(DERAS_ENOMEM, "chat: out of memory");
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* Python's str.isspace, which Jinja's trim and str.strip() use. */
static bool py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* Append s stripped of leading and trailing whitespace. */
static void sb_strip(struct sbuf *b, const char *s)
{
    size_t n = strlen(s), a = 0, e = n;
    uint32_t cp;
    size_t k;
    while (a < n && (k = utf8_decode(s + a, n - a, &cp)) && py_space(cp))
        a += k;
    while (e > a) {
        size_t st = e - 1;
        while (st > a && ((uint8_t)s[st] & 0xC0) == 0x80)
            st--;
        if (!utf8_decode(s + st, e - st, &cp) || !py_space(cp))
            break;
        e = st;
    }
    sb_add(b, s + a, e - a);
}

static void render_chatml(struct sbuf *b, const chat_format *f, const chat_msg *m, size_t n, bool gen)
{
    if (n > 0 && strcmp(m[0].role, "system") != 0 && f->default_system[0]) {
        sb_str(b, CHATML_SYS);
        sb_str(b, f->default_system);
        sb_str(b, "<|im_end|>\n");
    }
    for (size_t i = 0; i < n; i++) {
        sb_str(b, "<|im_start|>");
        sb_str(b, m[i].role);
        sb_str(b, "\n");
        sb_str(b, m[i].content);
        sb_str(b, "<|im_end|>\n");
    }
    if (gen)
        sb_str(b, "<|im_start|>assistant\n");
}

static void render_llama3(struct sbuf *b, const chat_msg *m, size_t n, bool gen)
{
    for (size_t i = 0; i < n; i++) {
        sb_str(b, "<|start_header_id|>");
        sb_str(b, m[i].role);
        sb_str(b, "<|end_header_id|>\n\n");
        sb_strip(b, m[i].content);
        sb_str(b, "<|eot_id|>");
    }
    if (gen)
        sb_str(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static int render_llama2(struct sbuf *b, const chat_msg *m, size_t n)
{
    const char *sys = NULL;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        sys = m[0].content;
        m++;
        n--;
    }
    for (size_t i = 0; i < n; i++) {
        bool user = !strcmp(m[i].role, "user");
        if (user != (i % 2 == 0))
            return deras_fail(DERAS_EINVAL, "chat: Llama 2 conversations must alternate user/assistant "
                              "(message %zu is '%s')", i + (sys ? 1 : 0), m[i].role);
        struct sbuf c = {0};
        if (i == 0 && sys) {
            sb_str(&c, "<<SYS>>\n");
            sb_str(&c, sys);
            sb_str(&c, "\n<</SYS>>\n\n");
        }
        sb_str(&c, m[i].content);
        if (c.err) {
            free(c.s);
            return c.err;
        }
        if (user) {
            if (i > 0)
                sb_str(b, "<s>");
            sb_str(b, "[INST] ");
            sb_strip(b, c.s ? c.s : "");
            sb_str(b, " [/INST]");
        } else if (!strcmp(m[i].role, "assistant")) {
            sb_str(b, " ");
            sb_strip(b, c.s ? c.s : "");
            sb_str(b, " </s>");
        }
        free(c.s);
    }
    return 0;
}

int chat_format_render(const chat_format *f, const chat_msg *msgs, size_t n, bool add_generation_prompt,
                       char **out)
{
    if (!f || (!msgs && n > 0) || !out)
        return deras_fail(DERAS_EINVAL, "chat_format_render: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return deras_fail(DERAS_EINVAL, "chat_format_render: message %zu has no role or content", i);
    struct sbuf b = {0};
    int rc = 0;
    switch (f->style) {
    case CHAT_STYLE_CHATML: render_chatml(&b, f, msgs, n, add_generation_prompt); break;
    case CHAT_STYLE_LLAMA3: render_llama3(&b, msgs, n, add_generation_prompt); break;
    case CHAT_STYLE_LLAMA2: rc = render_llama2(&b, msgs, n); break;
    default: rc = deras_fail(DERAS_EINVAL, "chat_format_render: unknown style %d", (int)f->style); break;
    }
    if (rc == 0 && b.err)
        rc = b.err;
    if (rc == 0 && !b.s)
        sb_add(&b, "", 0);
    if (rc == 0 && b.err)
        rc = b.err;
    if (rc < 0) {
        free(b.s);
        return rc;
    }
    *out = b.s;
    return 0;
}
