/* The HTTP/2 codec (h2.c), reached through its struct codec_ops. */
#ifndef SLUICE_H2_H
#define SLUICE_H2_H

#include "codec.h"

extern const struct codec_ops h2_codec;
/* Worker start: the streams' deadline heap, nghttp2's callbacks. */
void h2_init(void);

#endif
