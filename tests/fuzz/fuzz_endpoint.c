/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_endpoint.c - libFuzzer target for the tcp:// endpoint parser (common/wire/endpoints.h).
 *
 * Arbitrary bytes (as a NUL-terminated string) go through endpoint_tcp_parse. A failure must
 * be DERAS_EINVAL; a success must give a host that is non-empty, fits, holds no ';' and
 * re-assembles to an endpoint that parses to the same host and port. No name resolution
 * (endpoint_tcp_loopback is left out: it may ask DNS).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/status.h"
#include "common/wire/endpoints.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                             \
    do {                                                                                     \
        if (!(x))                                                                            \
            abort();                                                                         \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[1024];
    if (size >= sizeof in)
        size = sizeof in - 1;
    memcpy(in, data, size);
    in[size] = '\0';
    char host[256], host2[256], again[600];
    int port = -1, port2 = -1;
    int rc = endpoint_tcp_parse(in, host, sizeof host, &port);
    if (rc) {
        CHECK(rc == DERAS_EINVAL);
        return 0;
    }
    CHECK(*host && strlen(host) < sizeof host && !strchr(host, ';'));
    CHECK(port >= 0 && port <= 65535);
    snprintf(again, sizeof again, strchr(host, ':') ? "tcp://[%s]:%s" : "tcp://%s:%s", host,
             port ? "" : "*");
    if (port) {
        size_t n = strlen(again);
        snprintf(again + n, sizeof again - n, "%d", port);
    }
    CHECK(endpoint_tcp_parse(again, host2, sizeof host2, &port2) == DERAS_OK);
    CHECK(!strcmp(host, host2) && port == port2);
    return 0;
}
