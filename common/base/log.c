/* log.c - leveled logging to stderr (see log.h). */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_name[32] = "deras";
static int log_level = -1; /* -1: not yet read from DERAS_LOG */

void log_set_name(const char *name)
{
    snprintf(log_name, sizeof log_name, "%s", name ? name : "deras");
}

void log_set_level(enum log_level level)
{
    log_level = (int)level;
}

enum log_level log_get_level(void)
{
    if (log_level < 0) {
        const char *env = getenv("DERAS_LOG");
        log_level = LOG_INFO;
        if (env) {
            if (!strcasecmp(env, "debug")) log_level = LOG_DEBUG;
            else if (!strcasecmp(env, "warn")) log_level = LOG_WARN;
            else if (!strcasecmp(env, "error")) log_level = LOG_ERROR;
            else if (!strcasecmp(env, "off")) log_level = LOG_OFF;
        }
    }
    return (enum log_level)log_level;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (level < log_get_level())
        return;
    static const char tag[] = "DIWE";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);

    pthread_mutex_lock(&log_lock);
    fprintf(stderr, "%s.%03ldZ %s %c ", when, ts.tv_nsec / 1000000, log_name, tag[level]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&log_lock);
}
