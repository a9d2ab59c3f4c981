/* SPDX-License-Identifier: Apache-2.0 */
/* log.h - leveled logging to stderr.
 *
 * One line per message, in one of three formats:
 *   text     "2026-11-21T12:00:00.123Z deras-worker W message" (the default)
 *   journal  "<4>message": the sd-daemon priority prefix journald turns into the entry's
 *            PRIORITY (journalctl -p warning works), no time stamp (the journal has one).
 *            Chosen by itself when stderr is the journal (JOURNAL_STREAM names it, as
 *            systemd sets it for a unit's stderr).
 *   json     {"ts":"2026-11-21T12:00:00.123Z","proc":"deras-worker","level":"warn",
 *            "msg":"..."}: one object per line, the message escaped.
 * The level comes from DERAS_LOG (debug, info, warn, error, off; default info), the format
 * from DERAS_LOG_FORMAT (text, json; default text, journal under journald), both read by
 * log_init(), or set with log_set_level() / log_set_format(). The process name is set once
 * with log_set_name(). Logging takes a lock per line and never allocates. Prompts and
 * generated text must never be passed here unless the operator asked for them (see
 * docs/operations.md).
 */
#ifndef DERAS_LOG_H
#define DERAS_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_OFF = 4 };
enum log_format { LOG_TEXT = 0, LOG_JOURNAL = 1, LOG_JSON = 2 };

/* Level and format from DERAS_LOG and DERAS_LOG_FORMAT (and JOURNAL_STREAM). DERAS_EINVAL
 * naming the variable and the accepted values for anything else: a process refuses to
 * start on a misspelt level rather than log at a level nobody asked for. */
int log_init(void);

/* "debug" ... "off" / "text", "json" to the enums; DERAS_EINVAL naming the choices. */
int log_parse_level(const char *s, enum log_level *out);
int log_parse_format(const char *s, enum log_format *out);

void log_set_name(const char *name);
void log_set_level(enum log_level level);
void log_set_format(enum log_format format);
enum log_level log_get_level(void);
enum log_format log_get_format(void);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
