/* TLS termination, built against AWS-LC or OpenSSL 3 (make TLS=...).
 * The only module that includes a TLS library's headers.
 *
 * The master builds one struct tls_server per TLS listener before forking
 * (keys are read while it still has the rights to), workers inherit them.
 * A connection's TLS state works on memory BIOs: ciphertext in from the
 * socket, plaintext out to the HTTP parser, and the reverse; the event loop
 * and its buffers stay the caller's. */
#ifndef SLUICE_TLS_H
#define SLUICE_TLS_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"
#include "cfg-t.h"

#define TLS_MAX_TICKET_KEYS 8

/* Session ticket keys: [0] encrypts, all decrypt. */
struct tls_ticket_keys {
	unsigned n;
	struct { uint8_t name[16], hmac[16], aes[16]; } k[TLS_MAX_TICKET_KEYS];
};

struct tls_server;
struct tls_client;
struct tls_conn;

/* The TLS contexts of one configuration, built by the master before forking
 * (so keys are read with its rights) and inherited by the workers. */
struct tls_set {
	struct tls_server **listeners;  /* per cfg listener; NULL for plain ones */
	struct tls_client **backends;   /* per cfg backend; NULL for plain ones */
};

/* "AWS-LC 5.x.y" or "OpenSSL 3.0.x ...". */
const char *tls_library(void);

/* In a new worker, before it says it is ready: seed the library's random
 * generator, which a fork leaves to be seeded again on first use. */
void tls_worker_seed(void);

/* Build the contexts of listener L. ERR gets positioned messages
 * ("FILE:LINE:COL: key: why"), one per line; NULL on failure. KEYS may be
 * NULL when the listener reads a ticket key file or has tickets off; it is
 * copied. */
struct tls_server *tls_server_new(const struct cfg *cfg, const struct cfg_listener *l,
				  const struct tls_ticket_keys *keys, char *err, size_t errlen);
void tls_server_free(struct tls_server *srv);
void tls_ticket_keys_random(struct tls_ticket_keys *keys);

/* Client side, towards the servers of backend B (re-encryption). */
struct tls_client *tls_client_new(const struct cfg *cfg, const struct cfg_backend *b, char *err,
				  size_t errlen);
void tls_client_free(struct tls_client *c);
/* A connection to a server. SESSION_SLOT (per server, per worker; may be
 * NULL) holds the last session the server issued: it is offered for
 * resumption and replaced by newer ones. */
struct tls_conn *tls_conn_new_client(struct tls_client *c, void **session_slot);
void tls_session_free(void *session);
/* Give back memory an idle connection holds (its BIOs' buffers); 1 if
 * anything was freed. */
int tls_conn_trim(struct tls_conn *t);
int tls_conn_resumed(const struct tls_conn *t);

enum tls_status {
	TLS_OK,       /* progress (maybe plaintext, maybe bytes to send) */
	TLS_CLOSED,   /* the peer sent close_notify */
	TLS_ERROR,    /* handshake or record failure; tls_conn_error() says why */
};

struct tls_conn *tls_conn_new(struct tls_server *srv);
void tls_conn_free(struct tls_conn *t);
int tls_conn_handshake_done(const struct tls_conn *t);
/* Feed ciphertext. Decrypted bytes are appended to PLAIN; bytes for the
 * peer (handshake, tickets, alerts) to WIRE. */
enum tls_status tls_conn_feed(struct tls_conn *t, const char *in, size_t len,
			      struct buf *plain, struct buf *wire);
/* Encrypt LEN bytes of PLAIN onto WIRE. Returns 0, -1 on failure. */
int tls_conn_encrypt(struct tls_conn *t, const char *plain, size_t len, struct buf *wire);
/* Queue a close_notify alert onto WIRE. */
void tls_conn_shutdown(struct tls_conn *t, struct buf *wire);
const char *tls_conn_error(const struct tls_conn *t);
/* What the backend may be told about a client's TLS connection. Strings
 * point into the connection (valid while it lives) or are NULL. */
struct tls_facts {
	const char *version;       /* "TLSv1.3" */
	const char *cipher;        /* the library's name (OpenSSL style, as HAProxy sends it) */
	const char *cipher_std;    /* the IANA/RFC name: TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 */
	const char *sni;
	const uint8_t *alpn;
	unsigned alpn_len;
	int resumed;
	int peer_cert;             /* the client presented a certificate (in this session) */
	long verify;               /* its X509 verify result, 0 = verified; -1 without one */
	const char *sig_alg;       /* of the certificate sluice presented */
	const char *key_alg;
};
/* All zero (verify -1) until the handshake is done. */
void tls_conn_facts(const struct tls_conn *t, struct tls_facts *f);
/* The handshake chose h2 by ALPN. */
int tls_conn_h2(const struct tls_conn *t);
/* The client certificate's subject CN into OUT (NUL-terminated); its length, 0 if none. */
size_t tls_conn_peer_cn(const struct tls_conn *t, char *out, size_t cap);
/* The subject of a verified client certificate, RFC 2253 ("CN=a,O=b"),
 * into OUT; its length, 0 if there is none or it did not verify. */
size_t tls_conn_peer_subject(const struct tls_conn *t, char *out, size_t cap);
/* Append the client certificate's DER to OUT; its length, 0 if none. */
size_t tls_conn_peer_der(const struct tls_conn *t, struct buf *out);

/* The same facts as a JSON object member: ,"tls":{...}. */
void tls_conn_describe_json(const struct tls_conn *t, struct buf *out);
/* " tls=TLSv1.3 cipher=... sni=... alpn=... resumed=0|1 cert=ecdsa|rsa
 * ccert=\"subject\"|-" for the access log. */
void tls_conn_describe(const struct tls_conn *t, struct buf *out);

#endif
