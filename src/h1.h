/* The HTTP/1.1 codec (h1.c), reached through its struct codec_ops. */
#ifndef SLUICE_H1_H
#define SLUICE_H1_H

#include "codec.h"

extern const struct codec_ops h1_codec;
/* Worker start: the request parser's settings. */
void h1_init(void);

#endif
