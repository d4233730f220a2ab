#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <llhttp.h>
#include "cfg.h"
#include "log.h"
#include "master.h"
#include "version.h"
#include "tls.h"


static void usage(FILE *f)
{
	fprintf(f, "usage: sluice [-c FILE] [-t] [-V]\n"
		   "  -c FILE  configuration file (default conf/sluice.yaml, else /etc/sluice/sluice.yaml)\n"
		   "  -t       check the configuration and exit (0 valid, 1 invalid)\n"
		   "  -V       print version and build facts\n");
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	int test_only = 0, opt;
	while ((opt = getopt(argc, argv, "c:tVh")) != -1) {
		switch (opt) {
		case 'c': path = optarg; break;
		case 't': test_only = 1; break;
		case 'V':
			printf("sluice %s\nlibuv %s\nllhttp %d.%d.%d\nTLS %s\n", SLUICE_VERSION,
			       uv_version_string(), LLHTTP_VERSION_MAJOR, LLHTTP_VERSION_MINOR,
			       LLHTTP_VERSION_PATCH, tls_library());
			return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 1;
		}
	}
	if (path == NULL)
		path = access("conf/sluice.yaml", R_OK) == 0 ? "conf/sluice.yaml" : "/etc/sluice/sluice.yaml";
	char err[8192];
	struct cfg *cfg = cfg_load(path, err, sizeof(err));
	if (cfg == NULL) {
		fprintf(stderr, "%s%s", err, err[0] && err[strlen(err) - 1] == '\n' ? "" : "\n");
		fprintf(stderr, "sluice: configuration %s is invalid\n", path);
		return 1;
	}
	if (test_only) {
		struct tls_set *tls = master_tls_load(cfg, err, sizeof(err));
		if (tls == NULL) {
			fprintf(stderr, "%ssluice: configuration %s is invalid\n", err, path);
			cfg_free(cfg);
			return 1;
		}
		master_tls_free(cfg, tls);
		fprintf(stderr, "sluice: configuration %s is ok\n", path);
		cfg_free(cfg);
		return 0;
	}
	if (log_open(cfg->error_log, cfg->access_log) < 0) {
		cfg_free(cfg);
		return 1;
	}
	return master_run(cfg);
}
