/* libFuzzer target: the response path. The client sends one fixed, valid
 * request through a real sluice worker (tests/fuzz/rig.c); the rig's
 * backend answers it with the fuzz bytes, then closes its write side.
 *
 * Input: the first byte picks the request (bit 0: HEAD instead of GET;
 * bit 1: HTTP/1.0 instead of HTTP/1.1; bit 2: the PROXY listener, whose
 * backend connection starts with a PROXY v2 header); the rest is the
 * backend's response.
 *
 * Oracles (beyond crashes, leaks and sanitizer reports, and the rig's own:
 * the request reached the backend well-formed, the worker is idle after):
 * the client receives exactly one well-formed final response (after any
 * interim 1xx), whether the backend's or sluice's own 502/504, and nothing
 * after it; an HTTP/1.0 client never gets a chunked body. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "rig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char proxy_v1[] = "PROXY TCP4 10.1.2.3 10.0.0.1 40000 80\r\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		rig_init(NULL, NULL, NULL);
		ready = 1;
	}
	if (size == 0)
		return 0;
	int head = data[0] & 1, v10 = data[0] & 2, li = data[0] & 4 ? RIG_LI_PROXY : RIG_LI_PLAIN;
	char req[256];
	int n = snprintf(req, sizeof(req), "%s%s /r?x=1 HTTP/1.%c\r\nHost: example.com\r\nAccept: */*\r\n\r\n",
			 li == RIG_LI_PROXY ? proxy_v1 : "", head ? "HEAD" : "GET", v10 ? '0' : '1');
	const struct rig_result *r = rig_exchange(li, (const uint8_t *)req, (size_t)n, RIG_ANSWER_FUZZ, data + 1,
						  size - 1);
	if (r->nreqs != 1)
		RIG_FAIL("the backend received %u requests for the client's one", r->nreqs);
	if (r->tunnel)
		return 0;
	if (r->nresp != 1)
		RIG_FAIL("the client received %u final responses to its one request:\n%.*s", r->nresp,
			 (int)r->client.len, r->client.data);
	if (r->nown)
		RIG_FAIL("the response fits only a request other than the client's %s (a body after HEAD, or none "
			 "after GET):\n%.*s", head ? "HEAD" : "GET", (int)r->client.len, r->client.data);
	if (v10 && r->resp_chunked)
		RIG_FAIL("an HTTP/1.0 client received a chunked response:\n%.*s", (int)r->client.len, r->client.data);
	return 0;
}
