/* The backend side's HTTP/1.1 response parser (upstream_h1.c). It reports
 * what it parses to the stream through upstream_events (resp_interim,
 * resp_head, resp_body, resp_end) and checks what a backend may send. */
#ifndef SLUICE_UPSTREAM_H1_H
#define SLUICE_UPSTREAM_H1_H

#include "upstream-t.h"

enum h1r_result {
	H1R_MORE,     /* all bytes taken; the response goes on */
	H1R_DONE,     /* the response is complete */
	H1R_UPGRADE,  /* a 101 ended the head: the bytes from *used on are the tunnel's */
	H1R_INVALID,  /* not a response sluice relays (upstream_h1_error says why) */
};

/* Worker start: whom the parser reports to. */
void upstream_h1_init(const struct upstream_events *ev);
/* A request goes out on BC: its response is parsed from the start. */
void upstream_h1_start(struct bconn *bc);
/* Parse response bytes of BC's stream. *USED: bytes taken (DONE, UPGRADE);
 * *REUSABLE (DONE): the connection may carry another request. */
enum h1r_result upstream_h1_parse(struct bconn *bc, const char *data, size_t len, size_t *used, int *reusable);
/* The backend closed: 1 if that ended a close-delimited body cleanly. */
int upstream_h1_finish(struct bconn *bc);
const char *upstream_h1_error(const struct bconn *bc);

#endif
