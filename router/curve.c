/* SPDX-License-Identifier: Apache-2.0 */
/* curve.c - CURVE encryption and client authentication for the client and admin sockets.
 *
 * With --curve-secret-key the client socket is a CURVE server: traffic is encrypted and
 * every client proves it holds the secret key of a public key. Which public keys may
 * connect is the ZAP handler's call (ZeroMQ RFC 27): ZeroMQ asks inproc
 * "zeromq.zap.01" about every handshake, and this handler answers 200 for a key listed
 * in --curve-allow and 400 otherwise. It runs in the router's event loop; a handshake
 * waits for the loop, never the other way round. A tcp admin socket is a CURVE server
 * with the same secret key and its own allow list (--admin-curve-allow); each socket
 * names its ZAP domain, so a client key never opens the admin socket.
 *
 * Key files are text. The secret key file holds the 40-character Z85 secret key, alone
 * on a line or as `secret-key = "..."` (the zcert format); the allow file holds one Z85
 * public key per line (or `public-key = "..."`), with # comments and blank lines. The
 * secret key file must not be readable by group or others.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/base/log.h"
#include "common/base/status.h"
#include "common/wire/zmq_check.h"
#include "router/router.h"

#define ZAP_ADDR "inproc://zeromq.zap.01"

struct curve {
    const char *domain;     /* ZAP domain of the sockets this key and list serve */
    char secret_z85[41];
    char public_z85[41];
    uint8_t (*allowed)[32];
    int n_allowed;
};

/* The 40-character Z85 key on this line, if any: a bare key or key = "...". */
static bool line_key(const char *line, char out[41])
{
    const char *p = line;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '#' || !*p)
        return false;
    const char *q = strchr(p, '"');
    if (q) {
        const char *e = strchr(q + 1, '"');
        if (!e || e - q - 1 != 40)
            return false;
        memcpy(out, q + 1, 40);
    } else {
        size_t n = 0;
        while (p[n] && !isspace((unsigned char)p[n]))
            n++;
        if (n != 40)
            return false;
        memcpy(out, p, 40);
    }
    out[40] = '\0';
    return true;
}

static int read_secret(const char *path, char out[41])
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return deras_fail(DERAS_EIO, "%s: %s", path, strerror(errno));
    if (sb.st_mode & 077)
        return deras_fail(DERAS_EINVAL, "%s: the secret key file is readable by others (chmod 600)",
                          path);
    FILE *f = fopen(path, "r");
    if (!f)
        return deras_fail(DERAS_EIO, "%s: %s", path, strerror(errno));
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        if (strstr(line, "public-key"))
            continue;
        found = line_key(line, out);
    }
    fclose(f);
    uint8_t raw[32];
    if (!found || !zmq_z85_decode(raw, out))
        return deras_fail(DERAS_EFORMAT, "%s: no 40-character Z85 secret key found", path);
    return DERAS_OK;
}

static int read_allowed(const char *path, curve_t *c)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return deras_fail(DERAS_EIO, "%s: %s", path, strerror(errno));
    char line[512], key[41];
    int n_line = 0, cap = 0, rc = DERAS_OK;
    while (fgets(line, sizeof line, f)) {
        n_line++;
        if (strstr(line, "secret-key")) {
            rc = deras_fail(DERAS_EINVAL, "%s:%d: a secret key in the allow list", path, n_line);
            break;
        }
        const char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (!*p || *p == '#' || !strncmp(p, "metadata", 8) || !strncmp(p, "curve", 5))
            continue;
        if (!line_key(line, key)) {
            rc = deras_fail(DERAS_EFORMAT, "%s:%d: not a 40-character Z85 public key", path, n_line);
            break;
        }
        if (c->n_allowed == cap) {
            cap = cap ? cap * 2 : 16;
            uint8_t(*a)[32] = realloc(c->allowed, (size_t)cap * sizeof *a);
            if (!a) {
                rc = deras_fail(DERAS_ENOMEM, "%s: out of memory", path);
                break;
            }
            c->allowed = a;
        }
        if (!zmq_z85_decode(c->allowed[c->n_allowed], key)) {
            rc = deras_fail(DERAS_EFORMAT, "%s:%d: invalid Z85 key", path, n_line);
            break;
        }
        c->n_allowed++;
    }
    fclose(f);
    if (!rc && c->n_allowed == 0)
        rc = deras_fail(DERAS_EINVAL, "%s: no public keys: no client could connect", path);
    return rc;
}

int curve_load(const char *secret_file, const char *allow_file, const char *domain,
               curve_t **out)
{
    *out = NULL;
    if (!zmq_has("curve"))
        return deras_fail(DERAS_EUNSUPPORTED, "this libzmq was built without CURVE support");
    curve_t *c = calloc(1, sizeof *c);
    if (!c)
        return deras_fail(DERAS_ENOMEM, "curve_load: out of memory");
    c->domain = domain;
    int rc = read_secret(secret_file, c->secret_z85);
    if (!rc && zmq_curve_public(c->public_z85, c->secret_z85) == -1)
        rc = deras_fail(DERAS_EFORMAT, "%s: not a CURVE secret key", secret_file);
    if (!rc)
        rc = read_allowed(allow_file, c);
    if (rc) {
        curve_destroy(&c);
        return rc;
    }
    log_info("CURVE (%s): server public key %s, %d client keys allowed", domain, c->public_z85,
             c->n_allowed);
    *out = c;
    return DERAS_OK;
}

void curve_destroy(curve_t **cp)
{
    if (!cp || !*cp)
        return;
    curve_t *c = *cp;
    memset(c->secret_z85, 0, sizeof c->secret_z85);
    free(c->allowed);
    free(c);
    *cp = NULL;
}

int curve_apply(const curve_t *c, void *sock)
{
    int one = 1, rc;
    if ((rc = ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, c->secret_z85, 40))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, c->domain, strlen(c->domain)))))
        return rc;
    return DERAS_OK;
}

int curve_zap_open(void *zctx, void **zap)
{
    int rc, linger = 0;
    if ((rc = ZMQ_CHECK_PTR(*zap, zmq_socket(zctx, ZMQ_REP))) ||
        (rc = ZMQ_CHECK(zmq_setsockopt(*zap, ZMQ_LINGER, &linger, sizeof linger))) ||
        (rc = ZMQ_CHECK(zmq_bind(*zap, ZAP_ADDR))))
        return rc;
    return DERAS_OK;
}

static bool allowed(const curve_t *c, const void *key, size_t len)
{
    if (len != 32)
        return false;
    for (int i = 0; i < c->n_allowed; i++)
        if (!memcmp(c->allowed[i], key, 32))
            return true;
    return false;
}

/* The key list for a ZAP request's domain frame, or NULL. */
static const curve_t *for_domain(const curve_t *const *cs, int n, zmq_msg_t *domain)
{
    for (int i = 0; i < n; i++)
        if (cs[i] && zmq_msg_size(domain) == strlen(cs[i]->domain) &&
            !memcmp(zmq_msg_data(domain), cs[i]->domain, zmq_msg_size(domain)))
            return cs[i];
    return NULL;
}

void curve_zap_handle(const curve_t *client, const curve_t *admin, void *zap, router_stats *st)
{
    const curve_t *cs[2] = {client, admin};
    for (;;) {
        /* version, request id, domain, address, identity, mechanism, credentials... */
        zmq_msg_t f[7];
        int n = 0;
        bool more = true;
        while (more) {
            zmq_msg_t tmp, *m = n < 7 ? &f[n] : &tmp;
            zmq_msg_init(m);
            if (zmq_msg_recv(m, zap, ZMQ_DONTWAIT) == -1) {
                zmq_msg_close(m);
                if (n == 0)
                    return;
                break;
            }
            more = zmq_msg_more(m);
            if (n < 7)
                n++;
            else
                zmq_msg_close(m);
        }
        const curve_t *c = n >= 7 ? for_domain(cs, 2, &f[2]) : NULL;
        bool ok = c && zmq_msg_size(&f[5]) == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5) &&
                  allowed(c, zmq_msg_data(&f[6]), zmq_msg_size(&f[6]));
        if (ok)
            st->auth_allowed++;
        else
            st->auth_denied++;
        if (!ok && n >= 7 && zmq_msg_size(&f[6]) == 32) {
            char z85[41];
            zmq_z85_encode(z85, zmq_msg_data(&f[6]), 32);
            log_debug("CURVE: client key %s is not allowed", z85);
        }
        /* reply: version, request id, status code, status text, user id, metadata */
        const char *code = ok ? "200" : "400", *text = ok ? "OK" : "key not allowed";
        zmq_send(zap, "1.0", 3, ZMQ_SNDMORE);
        if (n >= 2)
            zmq_send(zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
        else
            zmq_send(zap, "", 0, ZMQ_SNDMORE);
        zmq_send(zap, code, 3, ZMQ_SNDMORE);
        zmq_send(zap, text, strlen(text), ZMQ_SNDMORE);
        zmq_send(zap, "", 0, ZMQ_SNDMORE);
        zmq_send(zap, "", 0, 0);
        for (int i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
    }
}
