/* SPDX-License-Identifier: Apache-2.0 */
/* client_flags.c - flags shared by the router clients (see client_flags.h). The sampling
 * parameters' flags come from the table (tools/sampling_flags.h); the rest are here. */
#include "tools/client_flags.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/cli/cli_util.h"
#include "tools/sampling_flags.h"

enum {
    F_ADDRESS = 1000, F_CURVE, F_CURVE_KEY, F_TIMEOUT, F_MAXTOK, F_N, F_SEED, F_STOP, F_STOPID,
    F_IGNEOS, F_NOSPECIAL, F_DEADLINE, F_SPEC
};

static const struct option shared[] = {
    {"address", required_argument, 0, F_ADDRESS},
    {"curve-server-key", required_argument, 0, F_CURVE},
    {"curve-client-key", required_argument, 0, F_CURVE_KEY},
    {"timeout", required_argument, 0, F_TIMEOUT},
    {"max-tokens", required_argument, 0, F_MAXTOK},
    {"n", required_argument, 0, F_N},
    {"seed", required_argument, 0, F_SEED},
    {"stop", required_argument, 0, F_STOP},
    {"stop-token-id", required_argument, 0, F_STOPID},
    {"ignore-eos", no_argument, 0, F_IGNEOS},
    {"no-special-tokens", no_argument, 0, F_NOSPECIAL},
    {"deadline-ms", required_argument, 0, F_DEADLINE},
    {"num-speculative-tokens", required_argument, 0, F_SPEC},
    {0, 0, 0, 0},
};

/* Help of shared[i], same order; continuation lines start with the padding. */
static const char *const help[] = {
    "router endpoint (default $DERAS_ADDRESS or\n"
    "                          " DERAS_CLIENT_DEFAULT_ADDRESS ")",
    "router's CURVE public key, 40 Z85 characters\n"
    "                          (default $DERAS_CURVE_SERVER_KEY; unset: no encryption)",
    "file with this client's CURVE secret key, the one the\n"
    "                          router allows (default $DERAS_CURVE_CLIENT_KEY)",
    "longest wait for the router, seconds (default 120)",
    "tokens to generate (default: the router's, 256)",
    "samples per request (default 1)",
    "sampling seed (same seed and inputs: same output)",
    "stop string, repeatable (at most 16)",
    "stop token, repeatable (at most 16)",
    "do not stop at the model's end-of-generation tokens",
    "tokenize the prompt without BOS/special tokens",
    "the router ends the request after MS milliseconds",
    "speculative drafts per step at most, 0 = no\n"
    "                          speculation (default: the worker's)",
};
static const char *const arg_names[] = {
    "A", "K", "FILE", "S", "N", "N", "N", "TEXT", "ID", "", "", "MS", "K",
};

/* Sampling flags (the table's) that no client takes: the clients do not show logprobs. */
#define CLIENT_NO_SAMPLING "logprobs"


static bool listed(const char *name, const struct option *own, const char *const *exclude)
{
    for (int j = 0; own && own[j].name; j++)
        if (!strcmp(own[j].name, name))
            return true;
    for (int j = 0; exclude && exclude[j]; j++)
        if (!strcmp(exclude[j], name))
            return true;
    return false;
}

/* The sampling flags to leave out: CLIENT_NO_SAMPLING, the command's own options (its own
 * wins) and its exclude list, NULL-terminated in out[cap]. */
static void sampling_exclude(const struct option *own, const char *const *exclude,
                             const char **out, int cap)
{
    int n = 0;
    out[n++] = CLIENT_NO_SAMPLING;
    for (int j = 0; own && own[j].name && n < cap - 1; j++)
        out[n++] = own[j].name;
    for (int j = 0; exclude && exclude[j] && n < cap - 1; j++)
        out[n++] = exclude[j];
    out[n] = NULL;
}

void client_flags_usage(FILE *f, const struct option *own, const char *const *exclude)
{
    for (int i = 0; shared[i].name; i++) {
        if (listed(shared[i].name, own, exclude))
            continue;
        char opt[64];
        snprintf(opt, sizeof opt, "--%s%s%s", shared[i].name, *arg_names[i] ? " " : "",
                 arg_names[i]);
        fprintf(f, "  %-23s %s\n", opt, help[i]);
    }
    const char *skip[CLIENT_FLAGS_MAX_OPTIONS];
    sampling_exclude(own, exclude, skip, CLIENT_FLAGS_MAX_OPTIONS);
    sampling_params def;
    sampling_params_init(&def); /* what the router applies to a flag not given */
    sampling_flags_usage(f, &def, skip);
}

void client_flags_init(client_flags *f)
{
    memset(f, 0, sizeof *f);
    const char *a = getenv("DERAS_ADDRESS"), *k = getenv("DERAS_CURVE_SERVER_KEY"),
               *kf = getenv("DERAS_CURVE_CLIENT_KEY");
    f->address = a && *a ? a : DERAS_CLIENT_DEFAULT_ADDRESS;
    f->curve_server_key = k && *k ? k : NULL;
    f->curve_key_file = kf && *kf ? kf : NULL;
    f->timeout_s = 120;
    deras_client_request_init(&f->req);
}

void client_flags_options(const struct option *own, const char *const *exclude,
                          struct option *out)
{
    int n = 0;
    for (; own[n].name && n < CLIENT_FLAGS_MAX_OPTIONS - 1; n++)
        out[n] = own[n];
    for (int i = 0; shared[i].name && n < CLIENT_FLAGS_MAX_OPTIONS - 1; i++)
        if (!listed(shared[i].name, own, exclude))
            out[n++] = shared[i];
    const char *skip[CLIENT_FLAGS_MAX_OPTIONS];
    sampling_exclude(own, exclude, skip, CLIENT_FLAGS_MAX_OPTIONS);
    sampling_flags_options(skip, out, &n, CLIENT_FLAGS_MAX_OPTIONS);
}

static int set_int(const char *opt, const char *arg, long lo, long hi, int *out)
{
    long l;
    if (cli_int(opt, arg, lo, hi, &l))
        return -1;
    *out = (int)l;
    return 1;
}

int client_flags_apply(client_flags *f, int c, const char *arg)
{
    proto_request *r = &f->req;
    req_params *q = &r->params;
    long l;
    int rc = sampling_flags_apply(&q->sp, c, arg);
    if (rc)
        return rc;
    switch (c) {
    case F_ADDRESS: f->address = arg; return 1;
    case F_CURVE:
        if (strlen(arg) != 40) {
            fprintf(stderr, "--curve-server-key: expected 40 Z85 characters, got %zu\n",
                    strlen(arg));
            return -1;
        }
        f->curve_server_key = arg;
        return 1;
    case F_CURVE_KEY: f->curve_key_file = arg; return 1;
    case F_TIMEOUT:
        if (cli_float("--timeout", arg, 0.001, 1e6, &f->timeout_s))
            return -1;
        return 1;
    case F_MAXTOK: return set_int("--max-tokens", arg, 1, 1 << 20, &q->max_tokens);
    case F_N: return set_int("--n", arg, 1, REQ_MAX_N, &q->n);
    case F_SEED:
        if (cli_u64("--seed", arg, &q->seed))
            return -1;
        r->has_seed = true;
        return 1;
    case F_STOP:
        if (r->n_stops == PROTO_MAX_STOPS || !*arg || strlen(arg) > PROTO_MAX_STOP_BYTES) {
            fprintf(stderr, "--stop: at most %d non-empty stop strings of at most %d bytes\n",
                    PROTO_MAX_STOPS, PROTO_MAX_STOP_BYTES);
            return -1;
        }
        r->stops[r->n_stops] = arg;
        r->stop_lens[r->n_stops++] = strlen(arg);
        return 1;
    case F_STOPID:
        if (q->n_stop_ids == REQ_MAX_STOP_IDS) {
            fprintf(stderr, "--stop-token-id: at most %d\n", REQ_MAX_STOP_IDS);
            return -1;
        }
        if (cli_int("--stop-token-id", arg, 0, INT32_MAX, &l))
            return -1;
        q->stop_ids[q->n_stop_ids++] = (int32_t)l;
        return 1;
    case F_IGNEOS: q->ignore_eos = true; return 1;
    case F_NOSPECIAL: r->add_special_tokens = false; return 1;
    case F_DEADLINE:
        if (cli_int("--deadline-ms", arg, 1, 24L * 3600 * 1000, &l))
            return -1;
        r->deadline_ms = l;
        return 1;
    case F_SPEC: /* the wire's 0 (no speculation) is the request's -1 */
        if (cli_int("--num-speculative-tokens", arg, 0, REQ_MAX_SPEC_TOKENS, &l))
            return -1;
        q->spec_tokens = l == 0 ? -1 : (int)l;
        return 1;
    default: return 0;
    }
}

int client_flags_connect(const client_flags *f, int max_in_flight, deras_client_t **out)
{
    char secret[41];
    int rc;
    *out = NULL;
    if (f->curve_key_file) {
        if (!f->curve_server_key)
            return deras_fail(DERAS_EINVAL, "--curve-client-key needs --curve-server-key");
        if ((rc = cli_read_secret_key(f->curve_key_file, secret)))
            return rc;
    }
    return deras_client_new(&(deras_client_opts){
        .address = f->address, .curve_server_key = f->curve_server_key,
        .curve_secret_key = f->curve_key_file ? secret : NULL, .max_in_flight = max_in_flight},
        out);
}
