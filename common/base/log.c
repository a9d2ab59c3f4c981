/* SPDX-License-Identifier: Apache-2.0 */
/* log.c - leveled logging to stderr in text, journal or JSON lines (see log.h). */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "common/base/status.h"

#define LINE_CAP 4096 /* a longer message is cut, never allocated for */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_name[32] = "deras";
static int log_level = -1;  /* -1: not yet read from the environment */
static int log_format = -1;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void log_set_name(const char *name)
{
    snprintf(log_name, sizeof log_name, "%s", name ? name : "deras");
}

void log_set_level(enum log_level level)
{
    log_level = (int)level;
}

void log_set_format(enum log_format format)
{
    log_format = (int)format;
}

int log_parse_level(const char *s, enum log_level *out)
{
    for (int i = 0; s && i <= LOG_OFF; i++)
        if (!strcasecmp(s, level_names[i])) {
            *out = (enum log_level)i;
            return DERAS_OK;
        }
    return deras_fail(DERAS_EINVAL, "log level '%s': expected debug, info, warn, error or off",
                      s ? s : "(null)");
}

int log_parse_format(const char *s, enum log_format *out)
{
    if (s && !strcasecmp(s, "text"))
        *out = LOG_TEXT;
    else if (s && !strcasecmp(s, "json"))
        *out = LOG_JSON;
    else
        return deras_fail(DERAS_EINVAL, "log format '%s': expected text or json",
                          s ? s : "(null)");
    return DERAS_OK;
}

/* True when stderr is the stream JOURNAL_STREAM ("device:inode") names. */
static int stderr_is_journal(void)
{
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    return js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
           (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

int log_init(void)
{
    enum log_level level = LOG_INFO;
    enum log_format format = stderr_is_journal() ? LOG_JOURNAL : LOG_TEXT;
    const char *env = getenv("DERAS_LOG");
    int rc;
    if (env && *env && (rc = log_parse_level(env, &level)))
        return deras_fail_ctx(rc, "DERAS_LOG: ");
    env = getenv("DERAS_LOG_FORMAT");
    if (env && *env && (rc = log_parse_format(env, &format)))
        return deras_fail_ctx(rc, "DERAS_LOG_FORMAT: ");
    log_level = (int)level;
    log_format = (int)format;
    return DERAS_OK;
}

enum log_level log_get_level(void)
{
    if (log_level < 0 && log_init() != DERAS_OK) /* a process that never called log_init */
        log_level = LOG_INFO, log_format = LOG_TEXT;
    return (enum log_level)log_level;
}

enum log_format log_get_format(void)
{
    log_get_level();
    return (enum log_format)log_format;
}

/* msg as the body of a JSON string into out (cap bytes, NUL-terminated, cut at a whole
 * escape); bytes >= 0x80 pass through (the messages are UTF-8). */
static void json_escape(char *out, size_t cap, const char *msg)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && o + 7 < cap; p++) {
        switch (*p) {
        case '"': out[o++] = '\\'; out[o++] = '"'; break;
        case '\\': out[o++] = '\\'; out[o++] = '\\'; break;
        case '\n': out[o++] = '\\'; out[o++] = 'n'; break;
        case '\t': out[o++] = '\\'; out[o++] = 't'; break;
        case '\r': out[o++] = '\\'; out[o++] = 'r'; break;
        default:
            if (*p < 0x20)
                o += (size_t)snprintf(out + o, cap - o, "\\u%04x", *p);
            else
                out[o++] = (char)*p;
        }
    }
    out[o] = '\0';
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level < log_get_level())
        return;
    static const char tag[] = "DIWE";
    static const int priority[] = {7, 6, 4, 3}; /* sd-daemon: debug, info, warning, err */
    char msg[LINE_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof when - n, ".%03ldZ", ts.tv_nsec / 1000000);

    pthread_mutex_lock(&log_lock);
    switch ((enum log_format)log_format) {
    case LOG_JOURNAL:
        /* one entry per line: a message's own newlines would start entries of no priority */
        for (char *p = msg; (p = strchr(p, '\n')); p++)
            *p = ' ';
        fprintf(stderr, "<%d>%s\n", priority[level], msg);
        break;
    case LOG_JSON: {
        static char esc[2 * LINE_CAP]; /* under the lock */
        json_escape(esc, sizeof esc, msg);
        fprintf(stderr, "{\"ts\":\"%s\",\"proc\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n",
                when, log_name, level_names[level], esc);
        break;
    }
    default:
        fprintf(stderr, "%s %s %c %s\n", when, log_name, tag[level], msg);
    }
    pthread_mutex_unlock(&log_lock);
}
