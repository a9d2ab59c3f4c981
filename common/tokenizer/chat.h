/* SPDX-License-Identifier: Apache-2.0 */
/* chat.h - wrapping chat messages in a model's chat format.
 *
 * deras does not interpret Jinja. It recognises the common template families from the
 * template text the model declares and formats them natively: ChatML (<|im_start|>role,
 * Qwen2, SmolLM2), Llama 3 (<|start_header_id|>role<|end_header_id|>) and Llama 2
 * ([INST] ... [/INST], with <<SYS>> system blocks). A template that declares a default
 * system message as a literal (SmolLM2's "You are a helpful AI assistant named SmolLM...")
 * has it extracted and used when the conversation has no system message. An unrecognised
 * template is DERAS_EUNSUPPORTED, never guessed.
 */
#ifndef DERAS_CHAT_H
#define DERAS_CHAT_H

#include <stdbool.h>
#include <stddef.h>

enum chat_style {
    CHAT_STYLE_CHATML = 1,
    CHAT_STYLE_LLAMA3 = 2,
    CHAT_STYLE_LLAMA2 = 3,
};

typedef struct chat_msg {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} chat_msg;

typedef struct chat_format {
    enum chat_style style;
    char default_system[1024]; /* "" if the template declares none */
} chat_format;

/* Recognise a Jinja chat template. NULL template: DERAS_ENOTFOUND. */
int chat_format_detect(const char *jinja, chat_format *out);

/* Render messages, ending with the assistant prompt when add_generation_prompt. The result
 * is malloc'd, NUL-terminated, and starts with no BOS (the tokenizer adds it). */
int chat_format_render(const chat_format *f, const chat_msg *msgs, size_t n,
                       bool add_generation_prompt, char **out);

#endif
