/* SPDX-License-Identifier: Apache-2.0 */
/* http_api.h - the OpenAI-compatible routes as libmicrohttpd sees them (http.c hands them
 * over; the router's side of the calls is in router.h, "http_api.c"). */
#ifndef DERAS_ROUTER_HTTP_API_H
#define DERAS_ROUTER_HTTP_API_H

#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

#include "router/router.h"

/* Whether url is one of the API's routes (/v1/..., /tokenize, /detokenize). */
bool http_api_route(const char *url);
/* libmicrohttpd's access handler for those routes (its contract: called for the head, for
 * each piece of the body, after the body, and again after each resume). */
enum MHD_Result http_api_request(router_t *rt, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *upload_data,
                                 size_t *upload_size, void **con_cls);
/* The HTTP request of *con_cls ended (MHD_OPTION_NOTIFY_COMPLETED, any reason): a request
 * still running is cancelled at its worker, the call is freed. */
void http_api_completed(router_t *rt, void **con_cls);

#endif
