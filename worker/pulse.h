/* SPDX-License-Identifier: Apache-2.0 */
/* pulse.h - the worker's liveness while one engine step runs for a long time.
 *
 * The event loop heartbeats between steps. A single step can take seconds on a CPU (a
 * 512-token prefill chunk of even a small model), longer than the router waits before it
 * declares a silent worker dead. The pulse is a thread with its own DEALER socket (routing
 * id "<name>/hb") that, only while a step has been running for longer than the heartbeat
 * interval, sends the heartbeat frame the loop prepared when the step began. The router
 * counts those frames as liveness for worker <name>, nothing more: the load they carry
 * is the step's starting load, and the step counter in it does not advance, so a step
 * that never ends is still seen as stuck.
 *
 * The loop calls pulse_step_begin / pulse_step_end around each step: a mutex and a
 * condition variable, no allocation (the frame buffer is sized at start).
 */
#ifndef DERAS_PULSE_H
#define DERAS_PULSE_H

#include <stddef.h>

typedef struct pulse pulse_t;

#define PULSE_MAX_FRAME 1024 /* a heartbeat frame is a few hundred bytes */

/* Start the thread: it connects its own socket from `zctx` (a ZeroMQ context is
 * thread-safe, a socket is not) to `endpoint` as "<name>/hb". */
int pulse_start(void *zctx, const char *endpoint, const char *name, pulse_t **out);

/* Stop the thread and close its socket; NULL-safe; *p becomes NULL. */
void pulse_stop(pulse_t **p);

/* A step begins: from interval_ms after now, every interval_ms, `frame` is sent until
 * pulse_step_end. Frames longer than PULSE_MAX_FRAME are ignored (no pulse this step). */
void pulse_step_begin(pulse_t *p, const void *frame, size_t len, int interval_ms);
void pulse_step_end(pulse_t *p);

#endif
