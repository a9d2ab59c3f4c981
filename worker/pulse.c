/* SPDX-License-Identifier: Apache-2.0 */
/* pulse.c - heartbeats from a side thread while a step runs long (see pulse.h). */
#include "pulse.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "common/wire/worker_proto.h"
#include "common/wire/zmq_check.h"

struct pulse {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit, in_step;
    int interval_ms;
    unsigned char frame[PULSE_MAX_FRAME];
    size_t len;
    void *sock;
    int start_rc;
    bool started;
};

static void deadline_after(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *pulse_main(void *arg)
{
    pulse_t *p = arg;
    unsigned char frame[PULSE_MAX_FRAME];
    pthread_mutex_lock(&p->mu);
    while (!p->quit) {
        if (!p->in_step) {
            pthread_cond_wait(&p->cv, &p->mu);
            continue;
        }
        /* a step is running: wait one interval; if it is still the same step, pulse */
        struct timespec ts;
        deadline_after(&ts, p->interval_ms);
        int rc = 0;
        while (p->in_step && !p->quit && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (!p->in_step || p->quit || p->len == 0)
            continue;
        size_t len = p->len;
        memcpy(frame, p->frame, len);
        pthread_mutex_unlock(&p->mu);
        if (zmq_send(p->sock, frame, len, ZMQ_DONTWAIT) < 0 && zmq_errno() != EAGAIN)
            log_warn("pulse: zmq_send: %s", zmq_strerror(zmq_errno()));
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int pulse_start(void *zctx, const char *endpoint, const char *name, pulse_t **out)
{
    if (!zctx || !endpoint || !name || !out)
        return deras_fail(DERAS_EINVAL, "pulse_start: NULL argument");
    *out = NULL;
    pulse_t *p = calloc(1, sizeof *p);
    if (!p)
        return deras_fail(DERAS_ENOMEM, "pulse: out of memory");
    char id[WPROTO_MAX_NAME + 8];
    snprintf(id, sizeof id, "%s/hb", name);
    int linger = 0, hwm = 4, rc;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&p->mu, NULL);
    /* The socket is made here and used only by the thread: the thread starts after it is
     * connected, and pthread_create is a full memory barrier. */
    if ((rc = ZMQ_CHECK_PTR(p->sock, zmq_socket(zctx, ZMQ_DEALER))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(p->sock, ZMQ_ROUTING_ID, id, strlen(id)))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(p->sock, ZMQ_LINGER, &linger, sizeof linger))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(p->sock, ZMQ_SNDHWM, &hwm, sizeof hwm))) ||
        (rc = ZMQ_CHECK(zmq_connect(p->sock, endpoint))))
        goto fail;
    if (pthread_create(&p->th, NULL, pulse_main, p)) {
        rc = deras_fail(DERAS_ENOMEM, "pulse: cannot start its thread");
        goto fail;
    }
    p->started = true;
    *out = p;
    return DERAS_OK;
fail:
    pulse_stop(&p);
    return rc;
}

void pulse_stop(pulse_t **pp)
{
    if (!pp || !*pp)
        return;
    pulse_t *p = *pp;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->quit = true;
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->th, NULL);
    }
    if (p->sock)
        zmq_close(p->sock);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    *pp = NULL;
}

void pulse_step_begin(pulse_t *p, const void *frame, size_t len, int interval_ms)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->len = len <= PULSE_MAX_FRAME ? len : 0;
    if (p->len)
        memcpy(p->frame, frame, len);
    p->interval_ms = interval_ms > 0 ? interval_ms : 500;
    p->in_step = true;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void pulse_step_end(pulse_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->in_step = false;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}
