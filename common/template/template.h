/* SPDX-License-Identifier: Apache-2.0 */
/* template.h - chat templates: a sandboxed interpreter for the Jinja2 subset that model
 * vendors' chat templates use (tokenizer_config.json `chat_template`, GGUF
 * `tokenizer.chat_template`), rendering what Hugging Face transformers'
 * apply_chat_template renders, byte for byte.
 *
 * The environment is transformers' (_compile_jinja_template): an ImmutableSandboxedEnvironment
 * with trim_blocks and lstrip_blocks, the loopcontrols extension ({% break %},
 * {% continue %}), its {% generation %} tag, a `tojson` filter that is json.dumps with
 * ensure_ascii=False (and its indent / separators / sort_keys arguments), and the globals
 * raise_exception(msg) and strftime_now(fmt) next to Jinja2's range, namespace and dict.
 * Lists and dicts are immutable as in that sandbox: `x.append(...)` fails as it fails there.
 *
 * What is not implemented is refused when the template is compiled, with the line and the
 * construct ("template line 12: filter 'wordwrap' is not supported"), never rendered some
 * other way: a compiled template renders what Jinja2 renders or fails where Jinja2 fails.
 * The few things that can only be seen while rendering fail the render with
 * DERAS_EUNSUPPORTED instead: a str.format spec, printf-style `%` on a string, integers
 * past 64 bits, complex powers, and printing what Python shows as an object address (a
 * generator from |map or |select, a bound method, a function).
 *
 * Sandbox. A render does no I/O (strftime_now reads the clock) and is bounded: by output
 * bytes, by steps (one per expression evaluated, statement run, loop iteration, and per
 * element, or 64 to 256 bytes, an operation touches: 10^7 steps is about a second), by
 * nesting depth (blocks and expressions at compile; macro calls, nested evaluations and
 * container values at render: the C stack a render needs grows with it, under 256 KiB at
 * the default, measured on a release build) and by the bytes of live values.
 * Each bound is a field of tmpl_limits with a default and its own status:
 *   max_output  DERAS_ERANGE        the output, or any string or captured block, grew past it
 *   max_steps   DERAS_ETIMEOUT      the render's work budget (a deadline counted in steps)
 *   max_depth   DERAS_EUNSUPPORTED  nesting deeper than supported (at compile or render)
 *   max_memory  DERAS_ENOMEM        live values (context included) past this many bytes
 * Other render failures: raise_exception(msg) in the template gives DERAS_EINVAL with the
 * template's message (the conversation is invalid for this template); errors Jinja2 raises
 * (an undefined variable's attribute, 'str' + int, a missing filter reached in an `if`)
 * give DERAS_EFORMAT. Messages name the line ("template line N: ..."), or the context key
 * ("template context 'messages': ...") when the context itself is past a bound.
 */
#ifndef DERAS_TEMPLATE_H
#define DERAS_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tmpl tmpl_t;

/* Bounds of one template's renders; a zero field takes its default. */
typedef struct tmpl_limits {
    size_t max_output;   /* default 8 MiB */
    uint64_t max_steps;  /* default 10,000,000 (about a second of work) */
    int max_depth;       /* default 64 */
    size_t max_memory;   /* default 64 MiB */
} tmpl_limits;

/* The defaults, as a filled struct. */
tmpl_limits tmpl_limits_default(void);

/* The constructor: compile source[0..len) (UTF-8; need not be NUL-terminated). `lim` (NULL:
 * defaults) is copied and applies to every render of the template. *out is set to NULL
 * first; on success it owns the compiled template (end it with tmpl_destroy) and the status
 * is DERAS_OK; on failure it stays NULL and the status is DERAS_EINVAL (a NULL `out`, or no
 * source with len > 0), DERAS_EFORMAT (a syntax error, or what
 * Jinja2 also refuses at compile time, such as an unknown filter outside an `if`),
 * DERAS_EUNSUPPORTED (a construct this interpreter does not implement, or nesting past
 * max_depth) or DERAS_ENOMEM, with a message "template line N: ...". O(len) time and
 * memory. */
int tmpl_compile(const char *source, size_t len, const tmpl_limits *lim, tmpl_t **out);

/* Render `t` with the variables of `context`, a JSON object: messages, tools,
 * add_generation_prompt, bos_token, eos_token and any extra keyword arguments
 * (chat_template_kwargs), exactly as apply_chat_template passes them (tools: null when
 * there are none). Only the keys the template names are read. On success *out is a
 * NUL-terminated malloc'd string the caller frees, *out_len its length (the output may
 * contain NUL bytes if the context did); on failure *out is NULL, *out_len 0, and the
 * status is one of those in the file comment or DERAS_EINVAL for a context that is not an
 * object. Cost: O(size of the context keys read) to convert them, then bounded by the
 * limits. `t` is not modified: any number of threads may render one template at once. */
int tmpl_render(const tmpl_t *t, const json_t *context, char **out, size_t *out_len);

/* The limits `t` renders under. */
tmpl_limits tmpl_limits_of(const tmpl_t *t);

/* Free the template and NULL *t; accepts NULL and *t == NULL. */
void tmpl_destroy(tmpl_t **t);

#endif
