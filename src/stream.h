/* The stream layer: one request/response exchange, protocol-neutral
 * (stream.c). Reached through the interfaces it registers, never by name. */
#ifndef SLUICE_STREAM_H
#define SLUICE_STREAM_H

/* Worker start: register with the codecs and with upstream. */
void stream_init(void);

#endif
