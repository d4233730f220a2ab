/* The client side: accepts connections, parses requests with llhttp,
 * rewrites heads for the backend, relays responses, answers errors. */
#ifndef SLUICE_HTTP1_H
#define SLUICE_HTTP1_H

#include "proxy-t.h"

/* Worker start: the parser settings, and the upstream events registered. */
void http1_settings_init(void);
void client_accept(struct worker_listener *li);
/* Drain: close idle clients, make busy ones close after their response. */
void client_drain_all(void);

#endif
