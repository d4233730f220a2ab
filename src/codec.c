/* The registry behind codec.h: which stream events codecs report to, and
 * which codec a connection speaks; and what every codec's own answers say.
 * Owns nothing else; calls only tls for the protocol a handshake chose. */
#include <stdio.h>
#include <string.h>
#include "log.h"
#include "codec.h"
#include "tls.h"

const struct stream_events *codec_ev;
const struct codec_ops *codec_default;
static const struct codec_ops *codec_h2;

void codec_events_set(const struct stream_events *ev)
{
	codec_ev = ev;
}

void codec_default_set(const struct codec_ops *ops)
{
	codec_default = ops;
}

void codec_h2_set(const struct codec_ops *ops)
{
	codec_h2 = ops;
}

/* RFC 9113 3.4: what a client with prior knowledge sends first. */
static const char h2_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const struct codec_ops *codec_choose(const struct client *cl, const char *data, size_t len)
{
	if (codec_h2 == NULL)
		return codec_default;
	if (cl->tls)
		return tls_conn_h2(cl->tls) ? codec_h2 : codec_default;
	if (!cl->li->cfg->h2c)
		return codec_default;
	size_t n = len < sizeof(h2_preface) - 1 ? len : sizeof(h2_preface) - 1;
	if (memcmp(data, h2_preface, n) != 0)
		return codec_default;
	return n == sizeof(h2_preface) - 1 ? codec_h2 : NULL;
}

const char *http_status_text(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 303: return "See Other";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 410: return "Gone";
	case 429: return "Too Many Requests";
	case 408: return "Request Timeout";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 417: return "Expectation Failed";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default:  return "Error";
	}
}

void local_answer(const struct stream *s, enum reason r, struct local_answer *a)
{
	const struct txn_insp *in = &s->insp;
	a->ctype = "text/plain";
	a->redirect = (r == REASON_INSPECT_DENIED && in->decision == INSPECT_REDIRECT) || r == REASON_ROUTE_REDIRECT;
	/* route: the response headers in in->resp_hdrs go out too */
	a->route = r == REASON_ROUTE_REDIRECT || r == REASON_ROUTE_RESPOND || r == REASON_MONITOR ||
		   r == REASON_RATE_LIMITED || r == REASON_RATE_LIMIT_STORE;  /* + Retry-After */
	if (r == REASON_MONITOR) {  /* the listener's monitor_uri: "ready" or "draining" */
		a->body = in->local.data;
		a->blen = in->local.len;
	} else if (r == REASON_ROUTE_RESPOND) {
		a->body = s->route->body;
		a->blen = s->route->body_len;
		a->ctype = s->route->content_type;
	} else if (r == REASON_INSPECT_DENIED && !a->redirect && in->deny_body) {
		a->body = in->local.data;
		a->blen = in->local.len;
	} else {
		int n = snprintf(a->text, sizeof(a->text), "%d %s: %s\n", s->status, http_status_text(s->status),
				 a->redirect ? "see Location" : reason_text(r));
		a->blen = n < 0 ? 0 : (size_t)n < sizeof(a->text) ? (size_t)n : sizeof(a->text) - 1;
		a->body = a->text;
	}
}
