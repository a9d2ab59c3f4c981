/* SPDX-License-Identifier: Apache-2.0 */
/* test_kv.h - the KV cache dtype and the matmul mode the engine-level tests run with
 * (tests that build models).
 *
 * $DERAS_TEST_KV_DTYPE (f32, f16, bf16: --kv-dtype's names) on the device the tests use
 * (test_backend_spec()), else that device's default: f32 on the CPU, the activation type
 * on CUDA. ctest runs the identity tests (engine, speculative, tensor-parallel) once with
 * the default and again with f16 and bf16 caches (tests/unit/CMakeLists.txt). A name the
 * device does not keep ends the test with the reason (exit 1).
 *
 * $DERAS_TEST_MATMUL_MODE (exact, q8: --matmul-mode's names; exact when unset) likewise:
 * ctest reruns the engine and speculative identity tests on the test model in q8 mode,
 * where the CPU backend packs the block-format weights (kernels/cpu/qmatmul.h), so batch
 * invariance is shown on those kernels too. (Not tensor parallelism: q8 rounds each
 * activation block to int8, so a partial sum's last-bit difference between TP sizes can
 * move a code by one step, and TP ranks agree with TP 1 only to that rounding.)
 */
#ifndef DERAS_TEST_KV_H
#define DERAS_TEST_KV_H

#include <stdio.h>
#include <stdlib.h>

#include "common/base/status.h"
#include "engine/kv_sizing.h"
#include "kernels/backend.h"
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

/* Set be's matmul mode from $DERAS_TEST_MATMUL_MODE; call before building a model. */
static inline void test_matmul_mode(backend_t *be)
{
    int mode = BACKEND_MM_EXACT;
    const char *name = getenv("DERAS_TEST_MATMUL_MODE");
    if ((name && *name && backend_mm_mode_parse(name, &mode)) ||
        backend_set_matmul_mode(be, mode)) {
        fprintf(stderr, "FAIL: DERAS_TEST_MATMUL_MODE=%s on %s: %s\n", name ? name : "",
                test_backend_spec(), deras_errmsg());
        exit(1);
    }
}

#endif
