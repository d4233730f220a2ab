/* Active HTTP health checks. Run by worker 0 of the current generation only,
 * so a backend sees one check per interval whatever the worker count; the
 * verdict goes to the server's shm slot, which every worker reads. */
#ifndef SLUICE_HEALTH_H
#define SLUICE_HEALTH_H

struct worker;
void health_start(struct worker *w);
void health_stop(void);

#endif
