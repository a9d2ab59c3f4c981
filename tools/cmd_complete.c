/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_complete.c - `deras complete`: one completion from a running deras-router.
 *
 * Sends one request through the C client (tools/client/deras_client.h) and streams the
 * text to stdout as chunks arrive; with --n > 1 the samples interleave on the wire, so
 * each is collected and printed whole, labelled, when the request ends. --no-stream asks
 * for the whole text in the final message instead. Usage and timings go to stderr: the
 * router's own (queue, time to first token, total) and what this client saw.
 *
 * Exit status: 0 success, 1 server error (its code printed) or no reply within --timeout,
 * 2 usage error, 130 interrupted (Ctrl-C cancels the request and waits for its end).
 */
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "tools/client/deras_client.h"
#include "tools/client_flags.h"
#include "tools/commands.h"

#define POLL_MS 100 /* receive in slices so Ctrl-C and the timeout are noticed */

typedef struct sample_out {
    char *text;
    size_t len, cap;
    int n_tokens;
    bool finished;
    finish_reason why;
    char finish[40];        /* "abort (cancelled)" */
    proto_usage usage;
} sample_out;

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    interrupted = 1;
}

enum { O_NOSTREAM = 256, O_HELP };
static const struct option own_opts[] = {
    {"no-stream", no_argument, 0, O_NOSTREAM},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

static void usage(FILE *f)
{
    fputs("usage: deras complete [options] PROMPT\n"
          "\n"
          "Stream a completion of PROMPT (\"-\": read it from stdin) from deras-router.\n"
          "\n"
          "  --no-stream             receive the whole text at the end\n",
          f);
    client_flags_usage(f, own_opts, NULL);
    fputs("\nexit status: 0 ok, 1 server error or timeout, 2 usage, 130 interrupted\n", f);
}

static int append(sample_out *s, const char *p, size_t n)
{
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + n + 1)
            cap *= 2;
        char *t = realloc(s->text, cap);
        if (!t)
            return deras_fail(DERAS_ENOMEM, "out of memory");
        s->text = t;
        s->cap = cap;
    }
    memcpy(s->text + s->len, p, n);
    s->len += n;
    s->text[s->len] = '\0';
    return DERAS_OK;
}

static char *read_stdin(void)
{
    sample_out buf = {0};
    char tmp[4096];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, stdin)) > 0)
        if (append(&buf, tmp, n)) {
            free(buf.text);
            return NULL;
        }
    if (!buf.text)
        buf.text = calloc(1, 1);
    return buf.text;
}

static int parse_args(int argc, char **argv, client_flags *f, bool *no_stream,
                      const char **prompt)
{
    struct option opts[CLIENT_FLAGS_MAX_OPTIONS];
    client_flags_options(own_opts, NULL, opts);
    client_flags_init(f);
    *no_stream = false;
    *prompt = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int r = client_flags_apply(f, c, optarg);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        switch (c) {
        case O_NOSTREAM: *no_stream = true; break;
        case 'h':
        case O_HELP: usage(stdout); return -1;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, optind == argc ? "complete: a PROMPT is required\n\n"
                                       : "complete: one PROMPT expected (quote it)\n\n");
        usage(stderr);
        return 2;
    }
    *prompt = argv[optind];
    return 0;
}

/* t_first: the first chunk with tokens, 0 without one (--no-stream) */
static void print_summary(const sample_out *s, int n, double t_send, double t_first,
                          double t_end)
{
    int tokens = 0;
    for (int i = 0; i < n; i++)
        tokens += s[i].n_tokens ? s[i].n_tokens : s[i].usage.completion_tokens;
    const proto_usage *u = &s[0].usage;
    fprintf(stderr, "usage: prompt %d tokens, completion %d tokens; finish:", u->prompt_tokens,
            tokens);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s%s", i ? "," : " ", s[i].finished ? s[i].finish : "?");
    fprintf(stderr, "\nrouter: queue %.1f ms, first token %.1f ms, total %.1f ms\n", u->queue_ms,
            u->ttft_ms, u->total_ms);
    spec_counters sp = {0};
    for (int i = 0; i < n; i++)
        spec_counters_add(&sp, &s[i].usage.spec);
    if (spec_counters_any(&sp))
        fprintf(stderr, "speculation: %llu draft tokens, %llu accepted (%.0f%%) in %llu "
                        "verifications\n", (unsigned long long)sp.proposed,
                (unsigned long long)sp.accepted, 100.0 * (double)sp.accepted / (double)sp.proposed,
                (unsigned long long)sp.verifications);
    if (!t_first) {
        fprintf(stderr, "client: total %.1f ms\n", (t_end - t_send) * 1e3);
        return;
    }
    double gen = t_end - t_first;
    fprintf(stderr, "client: first token %.1f ms, total %.1f ms", (t_first - t_send) * 1e3,
            (t_end - t_send) * 1e3);
    if (tokens > n && gen > 0)
        fprintf(stderr, ", %.1f tok/s after the first", (tokens - n) / gen);
    fputc('\n', stderr);
}

static int complete(client_flags *f, bool no_stream, const char *prompt_arg)
{
    deras_client_t *cl = NULL;
    sample_out s[REQ_MAX_N] = {{0}};
    char *prompt_buf = NULL;
    int status = 1, rc = DERAS_OK, n = f->req.params.n;
    bool cancelled = false, error = false, live = true;

    const char *prompt = prompt_arg;
    if (!strcmp(prompt_arg, "-") && !(prompt = prompt_buf = read_stdin())) {
        fprintf(stderr, "deras complete: reading the prompt from stdin failed\n");
        goto out;
    }
    if (client_flags_connect(f, 1, &cl)) {
        fprintf(stderr, "deras complete: %s\n", deras_errmsg());
        goto out;
    }
    proto_request *r = &f->req;
    r->prompt = prompt;
    r->prompt_len = strlen(prompt);
    r->stream = !no_stream;

    struct sigaction sa = {.sa_handler = on_sigint}, old;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old);

    double t_send = cli_now(), t_first = 0, t_last_msg = t_send;
    if ((rc = deras_client_send(cl, r, NULL)))
        goto done;
    while (live) {
        if (interrupted && !cancelled) {
            cancelled = true;
            if ((rc = deras_client_cancel(cl, r->id)))
                goto done;
        }
        deras_event ev;
        rc = deras_client_recv(cl, POLL_MS, &ev);
        double now = cli_now();
        if (rc == DERAS_ETIMEOUT) {
            if (now - t_last_msg < f->timeout_s)
                continue;
            rc = deras_fail(DERAS_ETIMEOUT, "no reply from %s for %.3g s (is deras-router "
                            "running there?)", f->address, f->timeout_s);
            goto done;
        }
        if (rc)
            goto done;
        if (!ev.known)
            continue; /* not ours (a late message of an earlier client with our identity) */
        t_last_msg = now;
        const proto_server_msg *m = &ev.msg;
        if (m->type == PROTO_ERROR) {
            fflush(stdout);
            fprintf(stderr, "%sderas complete: error %s: %s\n", s[0].len && n == 1 ? "\n" : "",
                    proto_error_name(m->code), m->message);
            error = true;
            break;
        }
        if (m->index < 0 || m->index >= n) {
            rc = deras_fail(DERAS_EFORMAT, "sample index %d outside [0, %d)", m->index, n);
            goto done;
        }
        sample_out *so = &s[m->index];
        if (m->type == PROTO_CHUNK || (m->type == PROTO_FINAL && m->text)) {
            if (m->type == PROTO_CHUNK && m->n_token_ids > 0 && !t_first)
                t_first = now;
            so->n_tokens += m->n_token_ids;
            if (n == 1) {
                fwrite(m->text, 1, m->text_len, stdout);
                fflush(stdout);
                so->len += m->text_len;
            } else if ((rc = append(so, m->text, m->text_len))) {
                goto done;
            }
        }
        if (m->type == PROTO_FINAL) {
            so->finished = true;
            so->why = m->finish;
            snprintf(so->finish, sizeof so->finish, "%s", finish_reason_name(m->finish));
            so->usage = m->usage;
            if (m->abort_reason && m->abort_reason[0])
                snprintf(so->finish, sizeof so->finish, "%s (%s)", finish_reason_name(m->finish),
                         m->abort_reason);
        }
        live = !ev.done;
    }
    double t_end = cli_now();
    if (n == 1 && s[0].len)
        fputc('\n', stdout);
    for (int i = 0; n > 1 && i < n; i++)
        printf("[%d] %s\n", i, s[i].text ? s[i].text : "");
    fflush(stdout);
    if (!error)
        print_summary(s, n, t_send, t_first, t_end);
    for (int i = 0; i < n; i++)
        error |= s[i].finished && s[i].why == FINISH_ERROR; /* a sample the server failed */
    status = interrupted ? 130 : error ? 1 : 0;

done:
    sigaction(SIGINT, &old, NULL);
    if (rc) {
        fflush(stdout);
        fprintf(stderr, "\nderas complete: %s (%s)\n", deras_errmsg(), deras_status_name(rc));
        status = 1;
    }
out:
    for (int i = 0; i < REQ_MAX_N; i++)
        free(s[i].text);
    free(prompt_buf);
    deras_client_destroy(&cl);
    return status;
}

int cmd_complete(int argc, char **argv)
{
    client_flags f;
    bool no_stream;
    const char *prompt;
    int rc = parse_args(argc, argv, &f, &no_stream, &prompt);
    if (rc)
        return rc < 0 ? 0 : rc;
    return complete(&f, no_stream, prompt);
}
