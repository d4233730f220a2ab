/* The registry behind codec.h: which stream events codecs report to, and
 * which codec a connection speaks. Owns nothing else; calls only tls for
 * the protocol a handshake chose. */
#include <string.h>
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
