/* SPDX-License-Identifier: Apache-2.0 */
/* kv_sizing.c - KV cache size from a budget, and the start-up log line (see kv_sizing.h). */
#include "kv_sizing.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/checkpoint/kv_math.h"
#include "common/base/dtype.h"
#include "common/base/log.h"
#include "common/base/status.h"
#include "engine/host_memory.h"
#include "kernels/backend.h"

#define MAX_BLOCKS (1 << 30)

int kv_sizing_dtype(const char *device, const char *name, int *out)
{
    int requested = BACKEND_KV_DEFAULT;
    if (name && *name) {
        enum kvmath_dtype dt;
        int rc = kvmath_dtype_parse(name, &dt);
        if (rc || (rc = kvmath_dtype_to_deras(dt, &requested)))
            return rc;
    }
    return backend_kv_dtype(device ? device : "cpu", requested, out);
}

static int token_and_block_bytes(const model_config *c, int kv_dtype, int block_size,
                                 kv_sizing *out)
{
    enum kvmath_dtype dt;
    if (!c || !out || block_size < 1)
        return deras_fail(DERAS_EINVAL, "kv sizing: bad arguments");
    memset(out, 0, sizeof *out);
    int rc = kvmath_dtype_from_deras(kv_dtype, &dt);
    if (rc || (rc = kvmath_token_bytes(c, 1, dt, &out->token_bytes)) ||
        (rc = kvmath_block_bytes(out->token_bytes, block_size, &out->block_bytes)))
        return rc;
    out->kv_dtype = kv_dtype;
    out->block_size = block_size;
    return DERAS_OK;
}

static int finish(kv_sizing *out, uint64_t budget)
{
    uint64_t blocks = budget / out->block_bytes;
    if (blocks < 2)
        return deras_fail(DERAS_ERANGE,
                          "KV budget of %llu bytes holds %llu blocks of %llu bytes; at least 2 "
                          "are needed (block 0 is reserved)",
                          (unsigned long long)budget, (unsigned long long)blocks,
                          (unsigned long long)out->block_bytes);
    out->n_blocks = blocks > MAX_BLOCKS ? MAX_BLOCKS : (int)blocks;
    out->budget_bytes = budget;
    out->n_tokens = (int64_t)(out->n_blocks - 1) * out->block_size;
    out->budget_used = (double)out->n_blocks * (double)out->block_bytes / (double)budget;
    return DERAS_OK;
}

/* A bare number: the fraction in *frac (true); else false. */
static bool is_fraction(const char *spec, double *frac)
{
    char *end;
    *frac = strtod(spec, &end);
    return end != spec && *end == '\0' && isfinite(*frac);
}

int kv_sizing_check_spec(const char *spec)
{
    if (!spec || !*spec)
        return deras_fail(DERAS_EINVAL, "KV budget: empty");
    double frac;
    if (is_fraction(spec, &frac)) {
        if (!(frac > 0 && frac <= 1))
            return deras_fail(DERAS_EINVAL,
                              "KV budget '%s': a bare number is a fraction of available memory "
                              "and must be in (0, 1]; give sizes with a unit (e.g. 4GiB)",
                              spec);
        return DERAS_OK;
    }
    uint64_t bytes;
    int rc = kvmath_parse_size(spec, &bytes);
    return rc ? deras_fail_ctx(rc, "KV budget: ") : DERAS_OK;
}

int kv_sizing_from_budget_before(const model_config *c, int kv_dtype, int block_size,
                                 const char *spec, uint64_t pending_bytes, kv_sizing *out)
{
    int rc = token_and_block_bytes(c, kv_dtype, block_size, out);
    if (rc || (rc = kv_sizing_check_spec(spec)))
        return rc;
    double frac;
    if (is_fraction(spec, &frac)) {
        host_memory hm;
        if ((rc = host_memory_available(&hm)))
            return deras_fail_ctx(rc, "KV budget '%s' (give a size instead): ", spec);
        const uint64_t avail = hm.available;
        if (pending_bytes >= avail)
            return deras_fail(DERAS_ERANGE,
                              "KV budget '%s': the weights (%llu bytes) take all of the %llu "
                              "bytes available (%s)",
                              spec, (unsigned long long)pending_bytes, (unsigned long long)avail,
                              hm.source);
        if ((rc = finish(out, (uint64_t)((double)(avail - pending_bytes) * frac))))
            return rc;
        out->mem_available = avail;
        snprintf(out->mem_source, sizeof out->mem_source, "%s", hm.source);
        return DERAS_OK;
    }
    uint64_t bytes;
    if ((rc = kvmath_parse_size(spec, &bytes)))
        return deras_fail_ctx(rc, "KV budget: ");
    return finish(out, bytes);
}

int kv_sizing_from_budget(const model_config *c, int kv_dtype, int block_size,
                          const char *spec, kv_sizing *out)
{
    return kv_sizing_from_budget_before(c, kv_dtype, block_size, spec, 0, out);
}

int kv_sizing_for_tokens(const model_config *c, int kv_dtype, int block_size,
                         int64_t n_tokens, kv_sizing *out)
{
    int rc = token_and_block_bytes(c, kv_dtype, block_size, out);
    if (rc)
        return rc;
    if (n_tokens < 1 || n_tokens > (int64_t)(MAX_BLOCKS - 1) * block_size)
        return deras_fail(DERAS_ERANGE, "kv sizing: %lld tokens", (long long)n_tokens);
    int64_t blocks = (n_tokens + block_size - 1) / block_size + 1;
    return finish(out, (uint64_t)blocks * out->block_bytes);
}

void kv_sizing_log(const kv_sizing *s)
{
    char kv[32], budget[32];
    kvmath_format_bytes((uint64_t)s->n_blocks * s->block_bytes, kv, sizeof kv);
    kvmath_format_bytes(s->budget_bytes, budget, sizeof budget);
    char avail[400] = "";
    if (s->mem_available) {
        char bytes[32];
        kvmath_format_bytes(s->mem_available, bytes, sizeof bytes);
        snprintf(avail, sizeof avail, ", a share of %s available (%s)", bytes, s->mem_source);
    }
    log_info("KV cache: %s, %llu B/token, %d blocks x %d tokens = %lld tokens (block 0 "
             "reserved), %s, %.1f%% of the %s budget%s", dtype_name(s->kv_dtype),
             (unsigned long long)s->token_bytes, s->n_blocks, s->block_size,
             (long long)s->n_tokens, kv, 100.0 * s->budget_used, budget, avail);
}
