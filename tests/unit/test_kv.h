/* SPDX-License-Identifier: Apache-2.0 */
/* test_kv.h - the KV cache dtype the engine-level tests run with (tests that build models).
 *
 * $DERAS_TEST_KV_DTYPE (f32, f16, bf16: --kv-dtype's names) on the device the tests use
 * (test_backend_spec()), else that device's default: f32 on the CPU, the activation type
 * on CUDA. ctest runs the identity tests (engine, speculative, tensor-parallel) once with
 * the default and again with f16 and bf16 caches (tests/unit/CMakeLists.txt). A name the
 * device does not keep ends the test with the reason (exit 1).
 */
#ifndef DERAS_TEST_KV_H
#define DERAS_TEST_KV_H

#include <stdio.h>
#include <stdlib.h>

#include "common/base/status.h"
#include "engine/kv_sizing.h"
#include "test_util.h"

static inline int test_kv_dtype(void)
{
    int dt;
    const char *name = getenv("DERAS_TEST_KV_DTYPE");
    if (kv_sizing_dtype(test_backend_spec(), name, &dt)) {
        fprintf(stderr, "FAIL: DERAS_TEST_KV_DTYPE=%s on %s: %s\n", name ? name : "",
                test_backend_spec(), deras_errmsg());
        exit(1);
    }
    return dt;
}

#endif
