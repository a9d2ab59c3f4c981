/* log.h - leveled logging to stderr.
 *
 * One line per message: "2026-11-21T12:00:00.123Z deras-worker W message". The level
 * comes from DERAS_LOG (debug, info, warn, error; default info) or log_set_level(). The
 * process name is set once with log_set_name(). Logging takes a lock per line and never
 * allocates. Prompts and generated text must never be passed here unless the operator
 * asked for them (see docs/operations.md).
 */
#ifndef DERAS_LOG_H
#define DERAS_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_OFF = 4 };

void log_set_name(const char *name);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
