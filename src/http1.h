/* The client side: accepts connections, parses requests with llhttp,
 * rewrites heads for the backend, relays responses, answers errors. */
#ifndef SLUICE_HTTP1_H
#define SLUICE_HTTP1_H

#include "proxy-t.h"

void http1_settings_init(void);
void client_accept(struct worker_listener *li);
/* Drain: close idle clients, make busy ones close after their response. */
void client_drain_all(void);

/* Called by upstream for the client that owns a backend connection. */
void client_backend_ready(struct client *cl);
void client_backend_error(struct client *cl, enum reason r);
void client_backend_data(struct client *cl, const char *data, size_t len);
void client_backend_eof(struct client *cl, enum reason r);
void client_backend_writable(struct client *cl);

#endif
