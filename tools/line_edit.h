/* SPDX-License-Identifier: Apache-2.0 */
/* line_edit.h - line input for interactive tools (`deras chat`): a small line editor on a
 * terminal, plain line reading otherwise. No dependency: GNU readline is GPL, and libedit
 * would be a new package for a handful of keys.
 *
 * On a terminal the line is edited in raw mode (set for each line and restored before
 * returning, so whatever runs between lines sees the terminal as it was; keys typed ahead
 * are kept): printable input (UTF-8)
 * inserts at the cursor; Left/Right, Home/End (and Ctrl-A/Ctrl-E) move; Backspace,
 * Delete, Ctrl-U (to the start), Ctrl-K (to the end), Ctrl-W (the word before) delete;
 * Up/Down walk the history of the lines entered (at most LINE_EDIT_HISTORY); Enter ends
 * the line; Ctrl-C abandons it (LINE_INTERRUPT); Ctrl-D on an empty line is the end of
 * input. A line longer than the screen is not wrapped specially (the terminal wraps it).
 * Elsewhere (a pipe, a file) a line is read up to its newline, and a SIGINT while waiting
 * abandons it.
 *
 * Costs: a redraw of the line per key, O(line); the line buffer grows as needed (at most
 * LINE_EDIT_MAX bytes); the history keeps copies of the lines.
 */
#ifndef DERAS_TOOLS_LINE_EDIT_H
#define DERAS_TOOLS_LINE_EDIT_H

#include <stdbool.h>
#include <stdio.h>

#define LINE_EDIT_HISTORY 200
#define LINE_EDIT_MAX (1 << 20)

typedef struct line_edit line_edit_t;

/* Read lines from in (its descriptor) and draw on out. DERAS_ENOMEM. */
int line_edit_new(FILE *in, FILE *out, line_edit_t **out_e);
void line_edit_destroy(line_edit_t **e);

/* Whether input is a terminal (then the prompt is drawn and keys are edited). */
bool line_edit_is_tty(const line_edit_t *e);

enum { LINE_OK = 0, LINE_EOF = 1, LINE_INTERRUPT = 2 };
/* Read one line (without its newline) into *line, valid until the next call. LINE_OK,
 * LINE_EOF (end of input: nothing read), LINE_INTERRUPT (Ctrl-C or SIGINT: the line is
 * abandoned), or DERAS_EIO / DERAS_ENOMEM / DERAS_ERANGE (longer than LINE_EDIT_MAX). */
int line_edit_read(line_edit_t *e, const char *prompt, const char **line);

/* Add a line to the history (an empty line or a repeat of the last is not added). */
void line_edit_remember(line_edit_t *e, const char *line);

#endif
