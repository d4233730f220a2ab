/* libFuzzer target: the config loader (cfg_load) on arbitrary YAML.
 *
 * Each input is written to a file and loaded twice. Oracles beyond "no
 * crash, no leak":
 *   - a refused config has an error text that is non-empty, NUL-terminated
 *     within the buffer, and whose every line names the file (cfg.h:
 *     "FILE:LINE:COL: KEY: message");
 *   - an accepted one is coherent: 1..CFG_MAX_LISTENERS listeners, each
 *     with a resolved backend of the config, every backend with servers,
 *     addresses of a real family, durations and sizes as the loader
 *     promises (a nonzero worker count, a nonzero Lua memory cap);
 *   - loading the same bytes twice gives the same verdict and the same
 *     error text (uninitialised memory or hidden state would differ).
 *
 * Determinism and speed: host names are resolved without DNS
 * ("localhost" is 127.0.0.1, anything else numeric only), and an
 * inspection script may only be a relative name, which is looked up in a
 * private temporary directory holding a valid (ok.lua), a broken (bad.lua)
 * and an inspect-less (none.lua) script (tests/fuzz/README.md). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include "cfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FAIL(...) do { fprintf(stderr, "fuzz_cfg: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static char dir[] = "/tmp/fuzz_cfg.XXXXXX";
static char path[64];  /* the config file, in DIR */

/* ---- determinism: no DNS, no files outside the work directory ---- */

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
	static int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
	if (real == NULL)
		real = (int (*)(const char *, const char *, const struct addrinfo *, struct addrinfo **))dlsym(RTLD_NEXT, "getaddrinfo");
	struct addrinfo h = { 0 };
	if (hints)
		h = *hints;
	h.ai_flags |= AI_NUMERICHOST;
	if (node && strcmp(node, "localhost") == 0)
		node = h.ai_family == AF_INET6 ? "::1" : "127.0.0.1";
	return real(node, service, &h, res);
}

/* While cfg_load runs (it opens nothing else with fopen), scripts may be
 * relative names only, resolved in the work directory. libFuzzer's own
 * files (corpus, artifacts) go through untouched. */
static int in_load;

FILE *fopen(const char *name, const char *mode)
{
	static FILE *(*real)(const char *, const char *);
	if (real == NULL)
		real = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
	if (!in_load)
		return real(name, mode);
	if (name[0] == '/' || strstr(name, "..") || strcmp(mode, "rb") != 0 || strlen(name) > 200) {
		errno = EACCES;
		return NULL;
	}
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return real(p, mode);
}

static void write_file(const char *name, const char *text)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	size_t n = strlen(text);
	if (fd < 0 || write(fd, text, n) != (ssize_t)n || close(fd) != 0)
		FAIL("cannot write %s", p);
}

static void cleanup(void)
{
	static const char *const files[] = { "c.yaml", "ok.lua", "bad.lua", "none.lua" };
	char p[256];
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
		unlink(p);
	}
	rmdir(dir);
}

/* No chdir: libFuzzer reads its corpus by relative paths. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (mkdtemp(dir) == NULL)
		FAIL("temporary directory: %s", strerror(errno));
	atexit(cleanup);
	write_file("ok.lua", "local n = 0\nfunction inspect(req) n = n + 1 end\nfunction log(req) end\n");
	write_file("bad.lua", "function inspect(req) = end\n");
	write_file("none.lua", "x = 1\n");
	snprintf(path, sizeof(path), "%s/c.yaml", dir);
	return 0;
}

/* ---- oracles ---- */

static void check_err(const char *err, size_t cap)
{
	size_t len = strnlen(err, cap);
	if (len == cap)
		FAIL("error text not NUL-terminated");
	if (len == 0)
		FAIL("config refused without a message");
	for (const char *line = err; *line;) {
		const char *nl = strchr(line, '\n');
		size_t ll = nl ? (size_t)(nl - line) : strlen(line);
		if (ll && !(ll > strlen(path) && strncmp(line, path, strlen(path)) == 0 && line[strlen(path)] == ':'))
			FAIL("error line does not name the file: \"%.*s\"", (int)ll, line);
		line += ll + (nl != NULL);
	}
}

static void check_addr(const struct cfg_addr *a, const char *what)
{
	if (!((a->ss.ss_family == AF_INET && a->len == sizeof(struct sockaddr_in)) ||
	      (a->ss.ss_family == AF_INET6 && a->len == sizeof(struct sockaddr_in6))))
		FAIL("%s: address \"%s\" of family %d, length %u", what, a->text, a->ss.ss_family, (unsigned)a->len);
	if (strnlen(a->text, sizeof(a->text)) == sizeof(a->text))
		FAIL("%s: address text not terminated", what);
}

static void check_cfg(const struct cfg *c)
{
	if (c->workers == 0)
		FAIL("accepted with 0 workers");
	if (c->nlisteners == 0 || c->nlisteners > CFG_MAX_LISTENERS || c->listeners == NULL)
		FAIL("accepted with %u listeners", c->nlisteners);
	if (c->nbackends == 0 || c->nbackends > CFG_MAX_BACKENDS || c->backends == NULL)
		FAIL("accepted with %u backends", c->nbackends);
	for (unsigned b = 0; b < c->nbackends; b++) {
		const struct cfg_backend *be = &c->backends[b];
		if (strnlen(be->name, sizeof(be->name)) == sizeof(be->name) || be->name[0] == '\0')
			FAIL("backend %u: bad name", b);
		if (be->nservers == 0 || be->nservers > CFG_MAX_SERVERS || be->servers == NULL)
			FAIL("backend %s accepted with %u servers", be->name, be->nservers);
		for (unsigned s = 0; s < be->nservers; s++) {
			check_addr(&be->servers[s].addr, be->name);
			if (be->servers[s].proxy_tlvs && be->servers[s].proxy_protocol != CFG_PP_V2)
				FAIL("backend %s: proxy_tlvs without proxy_protocol v2", be->name);
		}
		for (unsigned k = 0; k < b; k++)
			if (strcmp(c->backends[k].name, be->name) == 0)
				FAIL("two backends named %s", be->name);
		if (be->health.enabled && (be->health.rise == 0 || be->health.fall == 0 ||
					   be->health.path[0] != '/'))
			FAIL("backend %s: health check rise %u fall %u path \"%s\"", be->name, be->health.rise,
			     be->health.fall, be->health.path);
	}
	for (unsigned l = 0; l < c->nlisteners; l++) {
		const struct cfg_listener *li = &c->listeners[l];
		check_addr(&li->addr, li->name);
		if (li->backend == NULL || li->backend < c->backends || li->backend >= c->backends + c->nbackends)
			FAIL("listener %s: backend not resolved into the config", li->name);
		if (strcmp(li->backend->name, li->backend_name) != 0)
			FAIL("listener %s: backend_name %s resolved to %s", li->name, li->backend_name,
			     li->backend->name);
		if (li->tls.enabled && (li->tls.ncerts == 0 || li->tls.certs == NULL))
			FAIL("listener %s: TLS without certificates", li->name);
		if (li->tls.enabled && li->tls.min_version > li->tls.max_version)
			FAIL("listener %s: TLS min_version above max_version", li->name);
		if (li->nproxy_from && li->proxy_from == NULL)
			FAIL("listener %s: accept_proxy_from count without a list", li->name);
		if (li->ntrusted_forwarders && li->trusted_forwarders == NULL)
			FAIL("listener %s: trusted_forwarders count without a list", li->name);
		if (li->inspect.enabled && li->inspect.script[0] == '\0')
			FAIL("listener %s: inspect without a script", li->name);
		if (li->inspect.body > (1u << 20))
			FAIL("listener %s: inspect.body %u above 1 MiB", li->name, li->inspect.body);
		for (unsigned k = 0; k < l; k++)
			if (strcmp(c->listeners[k].name, li->name) == 0)
				FAIL("two listeners named %s", li->name);
	}
	if (c->lua_memory_max == 0)
		FAIL("accepted with lua_memory_max 0");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size || close(fd) != 0)
		FAIL("cannot write %s", path);
	static char err1[8192], err2[8192];
	memset(err1, 'x', sizeof(err1));
	memset(err2, 'y', sizeof(err2));
	in_load = 1;
	struct cfg *c1 = cfg_load(path, err1, sizeof(err1));
	struct cfg *c2 = cfg_load(path, err2, sizeof(err2));
	in_load = 0;
	static int print = -1;
	if (print < 0)
		print = getenv("FUZZ_CFG_PRINT") != NULL;
	if (print)
		fprintf(stderr, "fuzz_cfg: %s\n%s", c1 ? "accepted" : "refused:", c1 ? "" : err1);
	if ((c1 == NULL) != (c2 == NULL))
		FAIL("the same file loaded once and refused once");
	if (c1 == NULL) {
		check_err(err1, sizeof(err1));
		if (strcmp(err1, err2) != 0)
			FAIL("two loads of the same file, two error texts:\n%s\n---\n%s", err1, err2);
	} else {
		check_cfg(c1);
	}
	cfg_free(c1);
	cfg_free(c2);
	return 0;
}
