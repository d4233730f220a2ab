/* The admin listener (worker 0): GET /metrics (Prometheus text), GET
 * /status (JSON), GET / (the dashboard) and POST controls. One request per
 * connection; every figure comes from shared memory, so it covers all
 * workers. */
#ifndef SLUICE_ADMIN_H
#define SLUICE_ADMIN_H

#include "buf.h"

struct worker;
void admin_start(struct worker *w);
void admin_stop(void);

/* Response bodies, exposed for unit tests. */
void admin_metrics(struct buf *out);
void admin_status(struct buf *out);

#endif
