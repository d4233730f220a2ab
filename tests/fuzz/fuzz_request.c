/* libFuzzer target: the request path. Raw client bytes go into a real
 * sluice worker (tests/fuzz/rig.c); the rig's backend answers every request
 * it can parse, so pipelining proceeds.
 *
 * Input: the first byte's low bit picks the listener (0: plain; 1: the one
 * that requires a PROXY header from 127/8, trusts its identity headers and
 * sends its backend a PROXY v2 header); the rest is what the client sends
 * before shutting down its write side.
 *
 * Oracles (beyond crashes, leaks and sanitizer reports): everything the
 * backend receives parses strictly as a sequence of HTTP/1.1 requests
 * (one framing header at most, no bare CR/LF, no NUL, no obs-fold, token
 * header names, a single Host: nothing a backend could read two ways); the
 * client receives well-formed responses, at least one for every request
 * that reached the backend; the worker is idle afterwards. */
#include <stdint.h>
#include <stddef.h>
#include "rig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		rig_init(NULL, NULL, NULL);
		rig_whole_answers = 1;
		ready = 1;
	}
	if (size == 0)
		return 0;
	const struct rig_result *r = rig_exchange(data[0] & 1 ? RIG_LI_PROXY : RIG_LI_PLAIN, data + 1, size - 1,
						  RIG_ANSWER_EACH, NULL, 0);
	if (r->truncated)
		RIG_FAIL("a response to the client was cut short, yet the backend always answers in full");
	if (r->nresp < r->nreqs)
		RIG_FAIL("the backend received %u complete requests, the client %u responses", r->nreqs, r->nresp);
	return 0;
}
