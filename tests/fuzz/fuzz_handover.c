/* libFuzzer target: what one master hands the next across a binary upgrade
 * (src/handover.c): $SLUICE_UPGRADE and the new master's report.
 *
 * The first byte chooses the mode:
 *   even: the rest is $SLUICE_UPGRADE for handover_env_parse;
 *   odd:  the rest is a report for handover_report_parse.
 * Oracles beyond "no crash": an accepted input describes descriptors >= 3,
 * none twice (env), at most the caller's maximum (report); formatting what
 * was parsed and parsing that again gives the same values (round trip);
 * the parsers read only the bytes they are given (heap copies of exactly
 * that length; the env parser's copy is NUL-terminated as getenv's is). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "handover.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...) do { fprintf(stderr, "fuzz_handover: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static struct handover_env he, he2;

static void env_mode(const uint8_t *p, size_t n)
{
	char *s = malloc(n + 1);
	if (s == NULL)
		abort();
	memcpy(s, p, n);
	s[n] = '\0';
	int r = handover_env_parse(s, &he);
	free(s);
	if (r < 0)
		return;
	if (he.report_fd < 3 || he.nfds > HANDOVER_MAX_FDS)
		FAIL("accepted report fd %d, %u fds", he.report_fd, he.nfds);
	for (unsigned i = 0; i < he.nfds; i++) {
		if (he.fds[i].fd < 3 || he.fds[i].fd == he.report_fd)
			FAIL("accepted fd %d (report fd %d)", he.fds[i].fd, he.report_fd);
		for (unsigned j = 0; j < i; j++)
			if (he.fds[j].fd == he.fds[i].fd)
				FAIL("accepted fd %d twice", he.fds[i].fd);
	}
	static char out[HANDOVER_ENV_MAX];
	if (handover_env_format(&he, out, sizeof(out)) < 0)
		FAIL("cannot format what was parsed (%u fds)", he.nfds);
	if (handover_env_parse(out, &he2) < 0)
		FAIL("formatted env refused: %s", out);
	if (he2.report_fd != he.report_fd || he2.nfds != he.nfds)
		FAIL("round trip changed the env: %s", out);
	for (unsigned i = 0; i < he.nfds; i++)
		if (he2.fds[i].fd != he.fds[i].fd || he2.fds[i].systemd != he.fds[i].systemd)
			FAIL("round trip changed fd %u: %s", i, out);
}

static void report_mode(const uint8_t *p, size_t n)
{
	static int fds[HANDOVER_MAX_FDS], fds2[HANDOVER_MAX_FDS];
	/* A small maximum too, so that "too many" is reached. */
	unsigned max = n && (p[0] & 1) ? 4 : HANDOVER_MAX_FDS;
	char *s = malloc(n ? n : 1);
	if (s == NULL)
		abort();
	memcpy(s, p, n);
	pid_t pid, pid2;
	unsigned k, k2;
	int r = handover_report_parse(s, n, &pid, fds, max, &k);
	free(s);
	if (r < 0)
		return;
	if (pid <= 0 || k > max)
		FAIL("accepted pid %d with %u fds (max %u)", (int)pid, k, max);
	static char out[HANDOVER_REPORT_MAX];
	if (handover_report_format(pid, fds, k, out, sizeof(out)) < 0)
		FAIL("cannot format what was parsed");
	if (handover_report_parse(out, strlen(out), &pid2, fds2, max, &k2) < 0 || pid2 != pid || k2 != k
	    || memcmp(fds, fds2, k * sizeof(int)) != 0)
		FAIL("round trip changed the report: %s", out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] & 1)
		report_mode(data + 1, size - 1);
	else
		env_mode(data + 1, size - 1);
	return 0;
}
