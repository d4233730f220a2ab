/* The master process: holds the config, the listening sockets and the shared
 * memory; forks, watches and replaces workers; handles reload and stop. */
#ifndef SLUICE_MASTER_H
#define SLUICE_MASTER_H

#include "cfg-t.h"

/* Runs until SIGTERM/SIGINT has drained every worker. CFG is owned by the
 * master from here on. Returns the process exit status. */
int master_run(struct cfg *cfg);

struct tls_set;
/* NULL with positioned errors in ERR on failure. Also what `sluice -t` checks. */
struct tls_set *master_tls_load(const struct cfg *cfg, char *err, size_t errlen);
void master_tls_free(const struct cfg *cfg, struct tls_set *tls);

#endif
