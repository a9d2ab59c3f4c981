/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_group_segment.c - libFuzzer target for the checks a tensor-parallel rank makes
 * before it uses a shared segment (worker/group_impl.h): arbitrary bytes as a segment go
 * through group_hdr_check; where it passes, the plan ring and the communicator attach to
 * the regions the header names, which must check their own layouts against those regions.
 * Nothing may be read or written outside the input (ASan), whatever it claims.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "worker/comm_shm.h"
#include "worker/group_impl.h"
#include "worker/plan_ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > (1u << 20))
        return 0;
    /* an aligned copy, as a mapping would be; the header's own size field claims `size` */
    size_t cap = size < sizeof(group_hdr) ? sizeof(group_hdr) : size;
    unsigned char *seg = aligned_alloc(64, (cap + 63) / 64 * 64);
    if (!seg)
        return 0;
    memset(seg, 0, cap);
    memcpy(seg, data, size);
    group_hdr *h = (group_hdr *)seg;
    if (size >= sizeof *h) {
        h->bytes = size; /* let the fuzzer reach the layout checks */
        atomic_store(&h->magic, GROUP_MAGIC);
        h->version = GROUP_VERSION;
    }
    if (group_hdr_check(h, size) == DERAS_OK) {
        plan_ring_t *r = NULL;
        comm_t *c = NULL;
        comm_shm_opts o = {.timeout_s = 0.01};
        if (plan_ring_new(seg + h->ring_off, h->ring_bytes, 1, h->size, NULL, NULL, &r) ==
            DERAS_OK)
            plan_ring_destroy(&r);
        if (comm_shm_new(seg + h->comm_off, h->comm_bytes, 1, h->size, &o, &c) == DERAS_OK)
            comm_destroy(&c);
    }
    free(seg);
    return 0;
}
