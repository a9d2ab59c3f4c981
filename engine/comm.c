/* SPDX-License-Identifier: Apache-2.0 */
/* comm.c - the communicator interface: argument checks and dispatch (see comm.h). */
#include "comm.h"

#include "comm_impl.h"
#include "common/base/status.h"

int comm_rank(const comm_t *c)
{
    return c ? c->rank : 0;
}

int comm_size(const comm_t *c)
{
    return c ? c->size : 1;
}

const char *comm_kind(const comm_t *c)
{
    return c ? c->ops->kind : "none";
}

int comm_all_reduce(comm_t *c, float *buf, size_t n)
{
    if (!c || (n && !buf))
        return deras_fail(DERAS_EINVAL, "comm_all_reduce: NULL argument");
    if (c->failed)
        return deras_fail(c->failed, "rank %d: the group's communicator failed earlier", c->rank);
    if (n == 0)
        return DERAS_OK;
    int rc = c->ops->all_reduce(c, buf, n);
    if (rc)
        c->failed = rc;
    return rc;
}

int comm_all_gather(comm_t *c, const float *send, size_t n, float *recv)
{
    if (!c || (n && !send))
        return deras_fail(DERAS_EINVAL, "comm_all_gather: NULL argument");
    if (c->failed)
        return deras_fail(c->failed, "rank %d: the group's communicator failed earlier", c->rank);
    if (n == 0)
        return DERAS_OK;
    int rc = c->ops->all_gather(c, send, n, recv);
    if (rc)
        c->failed = rc;
    return rc;
}

void comm_destroy(comm_t **cp)
{
    if (!cp || !*cp)
        return;
    (*cp)->ops->destroy(*cp);
    *cp = NULL;
}
