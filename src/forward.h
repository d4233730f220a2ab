/* What a backend learns about the client: the identity headers sluice adds
 * to each request (X-Forwarded-*, Forwarded, X-Real-IP, WL-Proxy-*), the
 * removal of identity headers a client may not assert, and the PROXY
 * protocol header of the backend connection. */
#ifndef SLUICE_FORWARD_H
#define SLUICE_FORWARD_H

#include "proxy-t.h"

/* Mark the request's identity headers dropped unless CL is a trusted
 * forwarder; for a trusted one, drop only those sluice will rewrite
 * (merged X-Forwarded-For / Forwarded, or replace mode). */
void forward_filter(const struct client *cl, struct msg *m, const struct cfg_forward *f);

/* Append sluice's identity headers for CL's request M to OUT. Called after
 * the client's headers are written, so a Connection header naming one of
 * them cannot remove it. */
void forward_write(const struct client *cl, const struct msg *m, const struct cfg_forward *f,
		   struct buf *out);

/* Append the PROXY header SRV is to receive for CL's connections to OUT;
 * nothing when SRV does not use the PROXY protocol. */
void forward_proxy_header(const struct client *cl, const struct cfg_server *srv, struct buf *out);

/* The header a health check sends: LOCAL (v2) or UNKNOWN (v1). */
void forward_proxy_local(const struct cfg_server *srv, struct buf *out);

#endif
