/* The registry behind codec.h: which stream events codecs report to, and
 * which codec a new connection speaks. Owns nothing else; calls nothing. */
#include "codec.h"

const struct stream_events *codec_ev;
const struct codec_ops *codec_default;

void codec_events_set(const struct stream_events *ev)
{
	codec_ev = ev;
}

void codec_default_set(const struct codec_ops *ops)
{
	codec_default = ops;
}
