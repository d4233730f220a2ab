/* TLS termination over memory BIOs, for AWS-LC and OpenSSL 3.
 *
 * Certificates: one SSL_CTX per configured certificate, all configured the
 * same way. A ClientHello callback (OpenSSL: client_hello_cb; AWS-LC:
 * select_certificate_cb) reads SNI, signature algorithms, versions and
 * suites (tlshello.c) and switches the connection to the SSL_CTX of the best
 * certificate: the name matches (exact, then wildcard, else the default
 * pair) and ECDSA when the client can verify it, RSA otherwise. That is the
 * HAProxy approach and works the same on both libraries. */
#define OPENSSL_SUPPRESS_DEPRECATED 1  /* the ticket key callback, both libraries have it */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include "tls.h"
#include "tlshello.h"
#include "log.h"
#include "util.h"

#define TLS_DEFAULT_CIPHERS \
	"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:" \
	"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:" \
	"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define TLS_DEFAULT_CURVES "X25519:P-256:P-384"
#define MAX_NAMES 64

struct tls_cert {
	SSL_CTX *ctx;
	int ecdsa;                 /* 1: EC key, 0: RSA */
	int curve_bits;            /* 256 / 384 for EC keys */
	char sig_alg[40];          /* "ecdsa-with-SHA256": for the PROXY v2 SSL TLV */
	char key_alg[16];          /* "EC256", "RSA2048" (HAProxy's spelling) */
	char *names[MAX_NAMES];    /* DNS SANs, else the CN */
	unsigned nnames;
};

struct tls_server {
	const struct cfg_tls *cfg;
	struct tls_cert *certs;
	unsigned ncerts;
	int def_ecdsa, def_rsa;    /* default certificate of each type, -1 = none */
	struct tls_ticket_keys keys;
	uint16_t ecdsa_suites[32];  /* TLS 1.2 ECDSA suites the server allows */
	unsigned necdsa_suites;
	uint8_t alpn_h2, alpn_h1;  /* the listener's protocols */
};

struct tls_client {
	SSL_CTX *ctx;
	const struct cfg_backend_tls *cfg;
};

/* AWS-LC keeps the API of BoringSSL, which it derives from: the calls the
 * OpenSSL 3 code paths below replace. */
#if defined(OPENSSL_IS_AWSLC)
#define TLS_BORINGSSL_FAMILY 1
#endif

struct tls_conn {
	SSL *ssl;
	BIO *rbio, *wbio;          /* owned by ssl */
	struct tls_server *srv;    /* server side; NULL on client connections */
	void **session_slot;       /* client side: where resumable sessions go */
	uint8_t failed;            /* a TLS error: the session must not be kept */
	int cert;                  /* index of the certificate chosen, -1 before */
	uint8_t done;
	char error[160];
};

const char *tls_library(void)
{
#if defined(OPENSSL_IS_AWSLC)
	return "AWS-LC " AWSLC_VERSION_NUMBER_STRING;
#else
	return OpenSSL_version(OPENSSL_VERSION);
#endif
}

/* AWS-LC seeds its generator after a fork from CPU jitter entropy: some
 * 5 ms of one core, ten times that under a sanitizer or a loaded CPU. Paid
 * here, before the worker is announced, it does not hold up the first
 * handshakes of a new generation while the old one has stopped accepting. */
void tls_worker_seed(void)
{
	unsigned char b;
	if (RAND_bytes(&b, 1) != 1)
		ERR_clear_error();
}

static void err_add(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void err_add(char *err, size_t errlen, const char *fmt, ...)
{
	size_t used = strlen(err);
	if (used + 2 >= errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err + used, errlen - used - 1, fmt, ap);
	va_end(ap);
	used = strlen(err);
	err[used] = '\n';
	err[used + 1] = '\0';
}

/* The library's last error, or FALLBACK when it gave none (BoringSSL often
 * does not for list parsing). */
static const char *lib_err_or(const char *fallback)
{
	static char buf[160];
	unsigned long e = ERR_peek_last_error();
	if (e == 0)
		return fallback;
	ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	return buf;
}

static const char *ssl_err_text(void)
{
	static char buf[160];
	unsigned long e = ERR_peek_last_error();
	if (e == 0)
		return "unknown TLS library error";
	ERR_error_string_n(e, buf, sizeof(buf));
	ERR_clear_error();
	return buf;
}

/* ---- session tickets ---- */

void tls_ticket_keys_random(struct tls_ticket_keys *keys)
{
	keys->n = 1;
	AN(RAND_bytes((uint8_t *)&keys->k[0], sizeof(keys->k[0])) == 1);
}

static int ticket_keys_load(const char *path, struct tls_ticket_keys *keys, char *why, size_t whylen)
{
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	char line[256];
	keys->n = 0;
	while (fgets(line, sizeof(line), f)) {
		size_t n = strcspn(line, "\r\n");
		line[n] = '\0';
		if (n == 0 || line[0] == '#')
			continue;
		uint8_t raw[64];
		int len = EVP_DecodeBlock(raw, (const uint8_t *)line, (int)n);
		/* EVP_DecodeBlock counts '=' padding bytes as data */
		while (n > 0 && line[--n] == '=')
			len--;
		if (len != 48) {
			snprintf(why, whylen, "%s: each line must be 48 bytes in base64 (openssl rand -base64 48)", path);
			fclose(f);
			return -1;
		}
		if (keys->n == TLS_MAX_TICKET_KEYS)
			break;
		memcpy(&keys->k[keys->n++], raw, 48);
	}
	fclose(f);
	if (keys->n == 0) {
		snprintf(why, whylen, "%s: no key in the file", path);
		return -1;
	}
	return 0;
}

static int ticket_key_cb(SSL *ssl, uint8_t key_name[16], uint8_t *iv, EVP_CIPHER_CTX *ectx,
			 HMAC_CTX *hctx, int enc)
{
	struct tls_conn *t = SSL_get_app_data(ssl);
	struct tls_ticket_keys *keys = &t->srv->keys;
	if (enc) {
		memcpy(key_name, keys->k[0].name, 16);
		if (RAND_bytes(iv, EVP_MAX_IV_LENGTH) != 1)
			return -1;
		if (!EVP_EncryptInit_ex(ectx, EVP_aes_128_cbc(), NULL, keys->k[0].aes, iv) ||
		    !HMAC_Init_ex(hctx, keys->k[0].hmac, 16, EVP_sha256(), NULL))
			return -1;
		return 1;
	}
	for (unsigned i = 0; i < keys->n; i++) {
		if (memcmp(key_name, keys->k[i].name, 16) != 0)
			continue;
		if (!HMAC_Init_ex(hctx, keys->k[i].hmac, 16, EVP_sha256(), NULL) ||
		    !EVP_DecryptInit_ex(ectx, EVP_aes_128_cbc(), NULL, keys->k[i].aes, iv))
			return -1;
		/* 2: valid, issue a fresh ticket. Always under TLS 1.3: OpenSSL
		 * sends no new ticket after a resumption otherwise, and clients
		 * do not reuse a TLS 1.3 ticket, so every other handshake would
		 * be a full one. */
		return i == 0 && SSL_version(ssl) < TLS1_3_VERSION ? 1 : 2;
	}
	return 0;  /* unknown key: full handshake */
}

/* ---- certificate choice ---- */

static int pick_cert(struct tls_server *srv, const char *sni, int ecdsa_ok_256, int ecdsa_ok_384)
{
	int best_ec = -1, best_rsa = -1;
	for (int pass = 0; pass < 2 && best_ec < 0 && best_rsa < 0 && sni[0]; pass++) {
		for (unsigned i = 0; i < srv->ncerts; i++) {
			struct tls_cert *c = &srv->certs[i];
			for (unsigned k = 0; k < c->nnames; k++) {
				int wild = c->names[k][0] == '*';
				if (wild != pass || !hello_name_match(c->names[k], sni))
					continue;
				if (c->ecdsa && best_ec < 0)
					best_ec = (int)i;
				if (!c->ecdsa && best_rsa < 0)
					best_rsa = (int)i;
			}
		}
	}
	if (best_ec < 0 && best_rsa < 0) {
		best_ec = srv->def_ecdsa;
		best_rsa = srv->def_rsa;
	}
	if (best_ec >= 0) {
		int bits = srv->certs[best_ec].curve_bits;
		if ((bits == 384 ? ecdsa_ok_384 : ecdsa_ok_256) || best_rsa < 0)
			return best_ec;
	}
	return best_rsa;
}

static int choose_and_switch(SSL *ssl, const uint8_t *sni_ext, size_t sni_len, const uint8_t *sig_ext,
			     size_t sig_len, const uint8_t *ver_ext, size_t ver_len, const uint8_t *suites,
			     size_t suites_len)
{
	struct tls_conn *t = SSL_get_app_data(ssl);
	struct tls_server *srv = t->srv;
	char sni[256] = "";
	if (hello_sni(sni_ext, sni_len, sni, sizeof(sni)) < 0)
		return -1;
	/* ECDSA needs an ECDSA signature scheme, and under TLS 1.2 an
	 * ECDHE-ECDSA suite too (TLS 1.3 suites do not name the key type). */
	int tls13 = hello_offers_tls13(ver_ext, ver_len) == 1 && srv->cfg->max_version >= 0x0304;
	int suite_ok = tls13 || hello_any_suite(suites, suites_len, srv->ecdsa_suites, srv->necdsa_suites);
	int ok256 = suite_ok && hello_ecdsa_sigalg(sig_ext, sig_len, 256) == 1;
	int ok384 = suite_ok && hello_ecdsa_sigalg(sig_ext, sig_len, 384) == 1;
	int c = pick_cert(srv, sni, ok256, ok384);
	if (c < 0)
		return -1;
	t->cert = c;
	if (SSL_get_SSL_CTX(ssl) != srv->certs[c].ctx)
		SSL_set_SSL_CTX(ssl, srv->certs[c].ctx);
	return 0;
}

/* The BoringSSL family hands the ClientHello to its own early callback;
 * OpenSSL 3 to the client_hello callback. */
#ifdef TLS_BORINGSSL_FAMILY
static enum ssl_select_cert_result_t select_cert_cb(const SSL_CLIENT_HELLO *ch)
{
	const uint8_t *sni = NULL, *sig = NULL, *ver = NULL;
	size_t sni_len = 0, sig_len = 0, ver_len = 0;
	SSL_early_callback_ctx_extension_get(ch, TLSEXT_SERVER_NAME, &sni, &sni_len);
	SSL_early_callback_ctx_extension_get(ch, TLSEXT_SIG_ALGS, &sig, &sig_len);
	SSL_early_callback_ctx_extension_get(ch, TLSEXT_SUPPORTED_VERSIONS, &ver, &ver_len);
	return choose_and_switch(ch->ssl, sni, sni_len, sig, sig_len, ver, ver_len, ch->cipher_suites,
				 ch->cipher_suites_len) == 0 ? ssl_select_cert_success : ssl_select_cert_error;
}
#else
static int client_hello_cb(SSL *ssl, int *alert, void *arg)
{
	(void)arg;
	const uint8_t *sni = NULL, *sig = NULL, *ver = NULL, *suites = NULL;
	size_t sni_len = 0, sig_len = 0, ver_len = 0;
	SSL_client_hello_get0_ext(ssl, TLSEXT_SERVER_NAME, &sni, &sni_len);
	SSL_client_hello_get0_ext(ssl, TLSEXT_SIG_ALGS, &sig, &sig_len);
	SSL_client_hello_get0_ext(ssl, TLSEXT_SUPPORTED_VERSIONS, &ver, &ver_len);
	size_t suites_len = SSL_client_hello_get0_ciphers(ssl, &suites);
	if (choose_and_switch(ssl, sni, sni_len, sig, sig_len, ver, ver_len, suites, suites_len) < 0) {
		*alert = SSL_AD_UNRECOGNIZED_NAME;
		return SSL_CLIENT_HELLO_ERROR;
	}
	return SSL_CLIENT_HELLO_SUCCESS;
}
#endif

/* The client's protocol ID NAME (LEN bytes) in its ALPN list IN, or NULL. */
static const uint8_t *alpn_find(const uint8_t *in, unsigned inlen, const char *name, unsigned len)
{
	for (unsigned i = 0; i < inlen;) {
		unsigned n = in[i];
		if (i + 1 + n > inlen)
			break;
		if (n == len && memcmp(in + i + 1, name, len) == 0)
			return in + i + 1;
		i += 1 + n;
	}
	return NULL;
}

/* The server's preference: h2, then http/1.1, among what the listener
 * offers. h2 needs TLS 1.2 or later (RFC 9113 9.2). A client whose list has
 * neither goes on without ALPN and speaks HTTP/1.1, unless the listener
 * offers h2 only: then the handshake fails with no_application_protocol. */
static int alpn_cb(SSL *ssl, const uint8_t **out, uint8_t *outlen, const uint8_t *in, unsigned inlen,
		   void *arg)
{
	const struct tls_server *srv = arg;
	const uint8_t *p;
	if (srv->alpn_h2 && SSL_version(ssl) >= TLS1_2_VERSION && (p = alpn_find(in, inlen, "h2", 2)) != NULL) {
		*out = p;
		*outlen = 2;
		return SSL_TLSEXT_ERR_OK;
	}
	if (srv->alpn_h1 && (p = alpn_find(in, inlen, "http/1.1", 8)) != NULL) {
		*out = p;
		*outlen = 8;
		return SSL_TLSEXT_ERR_OK;
	}
	return srv->alpn_h1 ? SSL_TLSEXT_ERR_NOACK : SSL_TLSEXT_ERR_ALERT_FATAL;
}

int tls_conn_h2(const struct tls_conn *t)
{
	const uint8_t *alpn = NULL;
	unsigned len = 0;
	SSL_get0_alpn_selected(t->ssl, &alpn, &len);
	return len == 2 && memcmp(alpn, "h2", 2) == 0;
}

/* Optional client certificates: verify, record, never fail the handshake. */
static int verify_optional_cb(int ok, X509_STORE_CTX *store)
{
	(void)ok;
	(void)store;
	return 1;
}

static int passwd_cb(char *buf, int size, int rwflag, void *userdata)
{
	(void)rwflag;
	const char *pw = userdata;
	int n = (int)strlen(pw);
	if (n >= size)
		return 0;
	memcpy(buf, pw, (size_t)n);
	return n;
}

/* ---- building contexts ---- */

/* WHERE is the tls mapping ("FILE:L:C: listeners[N].tls"); errors are only
 * written when ERR is non-NULL (the probe context checks the lists once). */
static int ctx_configure(SSL_CTX *ctx, const struct cfg_tls *tc, struct tls_server *srv,
			 const char *where, char *err, size_t errlen)
{
	SSL_CTX_set_min_proto_version(ctx, (uint16_t)tc->min_version);
	SSL_CTX_set_max_proto_version(ctx, (uint16_t)tc->max_version);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE
#ifdef SSL_OP_NO_RENEGOTIATION
			    | SSL_OP_NO_RENEGOTIATION
#endif
	);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	const char *ciphers = tc->ciphers[0] ? tc->ciphers : TLS_DEFAULT_CIPHERS;
	if (!SSL_CTX_set_cipher_list(ctx, ciphers)) {
		if (err)
			err_add(err, errlen, "%s.ciphers: no usable cipher in \"%s\": %s", where, ciphers,
				lib_err_or("no cipher name recognised"));
		return -1;
	}
	if (tc->ciphersuites[0] && !SSL_CTX_set_ciphersuites(ctx, tc->ciphersuites)) {
		if (err)
			err_add(err, errlen, "%s.ciphersuites: bad list \"%s\": %s", where,
				tc->ciphersuites, lib_err_or("no suite name recognised"));
		return -1;
	}
	const char *curves = tc->curves[0] ? tc->curves : TLS_DEFAULT_CURVES;
	if (!SSL_CTX_set1_curves_list(ctx, curves)) {
		if (err)
			err_add(err, errlen, "%s.curves: bad list \"%s\": %s", where, curves,
				lib_err_or("unknown curve name (use X25519, P-256, P-384, P-521)"));
		return -1;
	}
	static const uint8_t sid_ctx[] = "sluice";
	SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof(sid_ctx) - 1);
	if (tc->session_cache) {
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
		SSL_CTX_sess_set_cache_size(ctx, tc->session_cache);
	} else {
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	}
	if (!tc->tickets) {
		SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
		SSL_CTX_set_num_tickets(ctx, 0);  /* TLS 1.3 would send them anyway */
	} else
		SSL_CTX_set_tlsext_ticket_key_cb(ctx, ticket_key_cb);
	SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, srv);
#ifdef TLS_BORINGSSL_FAMILY
	SSL_CTX_set_select_certificate_cb(ctx, select_cert_cb);
#else
	SSL_CTX_set_client_hello_cb(ctx, client_hello_cb, NULL);
#endif
	if (tc->client_auth != CFG_CLIENT_AUTH_OFF) {
		if (!SSL_CTX_load_verify_locations(ctx, tc->client_ca, NULL)) {
			if (err)
				err_add(err, errlen, "%s.client_ca: cannot load %s: %s", where, tc->client_ca,
					lib_err_or("no certificate in the file"));
			return -1;
		}
		STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(tc->client_ca);
		if (names)
			SSL_CTX_set_client_CA_list(ctx, names);
		SSL_CTX_set_verify_depth(ctx, (int)tc->verify_depth);
		if (tc->client_auth == CFG_CLIENT_AUTH_REQUIRED)
			SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
		else
			SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_optional_cb);
	}
	(void)srv;
	return 0;
}

static void cert_names(struct tls_cert *c, X509 *x)
{
	GENERAL_NAMES *sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	if (sans) {
		for (size_t i = 0; i < (size_t)sk_GENERAL_NAME_num(sans) && c->nnames < MAX_NAMES; i++) {
			const GENERAL_NAME *g = sk_GENERAL_NAME_value(sans, i);
			if (g->type != GEN_DNS)
				continue;
			const unsigned char *d = ASN1_STRING_get0_data(g->d.dNSName);
			int n = ASN1_STRING_length(g->d.dNSName);
			c->names[c->nnames] = strndup((const char *)d, (size_t)n);
			AN(c->names[c->nnames]);
			c->nnames++;
		}
		GENERAL_NAMES_free(sans);
	}
	if (c->nnames == 0) {
		char cn[256];
		if (X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn, sizeof(cn)) > 0) {
			c->names[0] = strdup(cn);
			AN(c->names[0]);
			c->nnames = 1;
		}
	}
}

static int file_contains(const char *path, const char *needle)
{
	FILE *f = fopen(path, "r");
	char line[512];
	int found = 0;
	if (f == NULL)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	fclose(f);
	return found;
}

static int cert_load(struct tls_cert *c, const struct cfg_tls *tc, const struct cfg_tls_cert *cc,
		     struct tls_server *srv, const char *cfgpath, const char *where, char *err, size_t errlen)
{
	char at[700];
	snprintf(at, sizeof(at), "%s:%d:%d: %s", cfgpath, cc->line, cc->col, where);
	c->ctx = SSL_CTX_new(TLS_method());
	AN(c->ctx);
	SSL_CTX_set_app_data(c->ctx, srv);
	if (ctx_configure(c->ctx, tc, srv, at, NULL, 0) < 0)
		return -1;  /* the probe in tls_server_new reported why */
	FILE *f = fopen(cc->cert, "r");
	if (f == NULL) {
		err_add(err, errlen, "%s.cert: cannot open %s: %s", at, cc->cert, strerror(errno));
		return -1;
	}
	fclose(f);
	if (!SSL_CTX_use_certificate_chain_file(c->ctx, cc->cert)) {
		err_add(err, errlen, "%s.cert: no usable certificate in %s: %s", at, cc->cert, ssl_err_text());
		return -1;
	}
	const char *keyfile = cc->key[0] ? cc->key : cc->cert;
	const char *keykey = cc->key[0] ? "key" : "cert";
	f = fopen(keyfile, "r");
	if (f == NULL) {
		err_add(err, errlen, "%s.%s: cannot open %s: %s", at, keykey, keyfile, strerror(errno));
		return -1;
	}
	EVP_PKEY *pkey = PEM_read_PrivateKey(f, NULL, passwd_cb, (void *)cc->passphrase);
	fclose(f);
	if (pkey == NULL) {
		/* Library error codes differ between versions and key formats;
		 * what the operator needs follows from the file and the config. */
		ERR_clear_error();
		int encrypted = file_contains(keyfile, "ENCRYPTED");
		if (encrypted && cc->passphrase[0])
			err_add(err, errlen, "%s.passphrase: cannot decrypt the private key in %s: wrong passphrase",
				at, keyfile);
		else if (encrypted)
			err_add(err, errlen, "%s.%s: the private key in %s is encrypted and no passphrase is set",
				at, keykey, keyfile);
		else
			err_add(err, errlen, "%s.%s: no private key in %s", at, keykey, keyfile);
		return -1;
	}
	int ok = SSL_CTX_use_PrivateKey(c->ctx, pkey) && SSL_CTX_check_private_key(c->ctx);
	int type = EVP_PKEY_id(pkey);
	c->ecdsa = type == EVP_PKEY_EC;
	c->curve_bits = c->ecdsa ? EVP_PKEY_bits(pkey) : 0;
	snprintf(c->key_alg, sizeof(c->key_alg), "%s%d", c->ecdsa ? "EC" : "RSA", EVP_PKEY_bits(pkey));
	X509 *leaf = SSL_CTX_get0_certificate(c->ctx);
	const char *sig = leaf ? OBJ_nid2sn(X509_get_signature_nid(leaf)) : NULL;
	snprintf(c->sig_alg, sizeof(c->sig_alg), "%s", sig ? sig : "");
	EVP_PKEY_free(pkey);
	if (!ok) {
		ERR_clear_error();
		err_add(err, errlen, "%s.%s: the key in %s does not match the certificate in %s", at, keykey,
			keyfile, cc->cert);
		return -1;
	}
	if (type != EVP_PKEY_EC && type != EVP_PKEY_RSA) {
		err_add(err, errlen, "%s.cert: only ECDSA and RSA keys are supported", at);
		return -1;
	}
	X509 *x = SSL_CTX_get0_certificate(c->ctx);
	cert_names(c, x);
	if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0)
		log_warn("%s.cert: certificate %s has expired; serving it anyway", at, cc->cert);
	return 0;
}

struct tls_server *tls_server_new(const struct cfg *cfg, const struct cfg_listener *l,
				  const struct tls_ticket_keys *keys, char *err, size_t errlen)
{
	const struct cfg_tls *tc = &l->tls;
	struct tls_server *srv = calloc(1, sizeof(*srv));
	AN(srv);
	srv->cfg = tc;
	srv->def_ecdsa = srv->def_rsa = -1;
	srv->alpn_h2 = l->alpn_h2;
	srv->alpn_h1 = l->alpn_h1;
	srv->certs = calloc(tc->ncerts, sizeof(*srv->certs));
	AN(srv->certs);
	srv->ncerts = tc->ncerts;
	int failed = 0;
	unsigned li = (unsigned)(l - cfg->listeners);
	if (tc->tickets) {
		if (tc->ticket_keys[0]) {
			char why[600];
			if (ticket_keys_load(tc->ticket_keys, &srv->keys, why, sizeof(why)) < 0) {
				err_add(err, errlen, "%s:%d:%d: listeners[%u].tls.ticket_keys: %s", cfg->path,
					tc->line, tc->col, li, why);
				failed = 1;
			}
		} else if (keys) {
			srv->keys = *keys;
		} else {
			tls_ticket_keys_random(&srv->keys);
		}
	}
	/* Check the lists once, against the tls mapping, before the certificates
	 * (each gets a context configured the same way). */
	char tls_at[700];
	snprintf(tls_at, sizeof(tls_at), "%s:%d:%d: listeners[%u].tls", cfg->path, tc->line, tc->col, li);
	SSL_CTX *probe = SSL_CTX_new(TLS_method());
	AN(probe);
	if (ctx_configure(probe, tc, srv, tls_at, err, errlen) < 0) {
		SSL_CTX_free(probe);
		tls_server_free(srv);
		return NULL;
	}
	STACK_OF(SSL_CIPHER) *ciphers = SSL_CTX_get_ciphers(probe);
	for (size_t i = 0; i < (size_t)sk_SSL_CIPHER_num(ciphers); i++) {
		const SSL_CIPHER *ci = sk_SSL_CIPHER_value(ciphers, i);
		if (SSL_CIPHER_get_auth_nid(ci) == NID_auth_ecdsa && srv->necdsa_suites < 32)
			srv->ecdsa_suites[srv->necdsa_suites++] = SSL_CIPHER_get_protocol_id(ci);
	}
	SSL_CTX_free(probe);
	for (unsigned i = 0; i < tc->ncerts; i++) {
		char where[96];
		snprintf(where, sizeof(where), "listeners[%u].tls.certificates[%u]", li, i);
		if (cert_load(&srv->certs[i], tc, &tc->certs[i], srv, cfg->path, where, err, errlen) < 0) {
			failed = 1;
			continue;
		}
		if (srv->certs[i].ecdsa && srv->def_ecdsa < 0)
			srv->def_ecdsa = (int)i;
		if (!srv->certs[i].ecdsa && srv->def_rsa < 0)
			srv->def_rsa = (int)i;
	}
	if (failed) {
		tls_server_free(srv);
		return NULL;
	}
	return srv;
}

void tls_server_free(struct tls_server *srv)
{
	if (srv == NULL)
		return;
	for (unsigned i = 0; i < srv->ncerts; i++) {
		SSL_CTX_free(srv->certs[i].ctx);
		for (unsigned k = 0; k < srv->certs[i].nnames; k++)
			free(srv->certs[i].names[k]);
	}
	free(srv->certs);
	OPENSSL_cleanse(&srv->keys, sizeof(srv->keys));
	free(srv);
}

/* ---- client side (towards backends) ---- */

/* Called when the server issues a session (TLS 1.3: after the handshake,
 * in a NewSessionTicket): keep the newest for the next connection. */
static int new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
	struct tls_conn *t = SSL_get_app_data(ssl);
	if (t == NULL || t->session_slot == NULL)
		return 0;
	if (*t->session_slot)
		SSL_SESSION_free(*t->session_slot);
	*t->session_slot = sess;
	return 1;  /* we own it now */
}

struct tls_client *tls_client_new(const struct cfg *cfg, const struct cfg_backend *b, char *err,
				  size_t errlen)
{
	const struct cfg_backend_tls *tc = &b->tls;
	char at[700];
	unsigned bi = (unsigned)(b - cfg->backends);
	snprintf(at, sizeof(at), "%s:%d:%d: backends[%u].tls", cfg->path, tc->line, tc->col, bi);
	struct tls_client *c = calloc(1, sizeof(*c));
	AN(c);
	c->cfg = tc;
	c->ctx = SSL_CTX_new(TLS_method());
	AN(c->ctx);
	SSL_CTX_set_min_proto_version(c->ctx, (uint16_t)tc->min_version);
	SSL_CTX_set_max_proto_version(c->ctx, (uint16_t)tc->max_version);
	SSL_CTX_set_mode(c->ctx, SSL_MODE_RELEASE_BUFFERS);
	if (!SSL_CTX_set_cipher_list(c->ctx, TLS_DEFAULT_CIPHERS ":ECDHE-RSA-AES128-SHA:AES128-GCM-SHA256"))
		ERR_clear_error();
	static const uint8_t alpn[] = "\x08http/1.1";
	SSL_CTX_set_alpn_protos(c->ctx, alpn, sizeof(alpn) - 1);
	if (tc->session_reuse) {
		SSL_CTX_set_session_cache_mode(c->ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
		SSL_CTX_sess_set_new_cb(c->ctx, new_session_cb);
	} else {
		SSL_CTX_set_options(c->ctx, SSL_OP_NO_TICKET);
		SSL_CTX_set_session_cache_mode(c->ctx, SSL_SESS_CACHE_OFF);
	}
	if (tc->verify) {
		if (!SSL_CTX_load_verify_locations(c->ctx, tc->ca, NULL)) {
			err_add(err, errlen, "%s.ca: cannot load %s: %s", at, tc->ca, ssl_err_text());
			goto fail;
		}
		SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
	} else {
		SSL_CTX_set_verify(c->ctx, SSL_VERIFY_NONE, NULL);
	}
	if (tc->cert[0]) {
		if (!SSL_CTX_use_certificate_chain_file(c->ctx, tc->cert)) {
			err_add(err, errlen, "%s.cert: no usable certificate in %s: %s", at, tc->cert, ssl_err_text());
			goto fail;
		}
		const char *kf = tc->key[0] ? tc->key : tc->cert;
		if (!SSL_CTX_use_PrivateKey_file(c->ctx, kf, SSL_FILETYPE_PEM) || !SSL_CTX_check_private_key(c->ctx)) {
			ERR_clear_error();
			err_add(err, errlen, "%s.key: the key in %s does not match the certificate in %s (or cannot be read)",
				at, kf, tc->cert);
			goto fail;
		}
	}
	return c;
fail:
	tls_client_free(c);
	return NULL;
}

void tls_client_free(struct tls_client *c)
{
	if (c == NULL)
		return;
	SSL_CTX_free(c->ctx);
	free(c);
}

void tls_session_free(void *session)
{
	if (session)
		SSL_SESSION_free(session);
}

struct tls_conn *tls_conn_new_client(struct tls_client *c, void **session_slot)
{
	struct tls_conn *t = calloc(1, sizeof(*t));
	AN(t);
	t->cert = -1;
	t->session_slot = c->cfg->session_reuse ? session_slot : NULL;
	t->ssl = SSL_new(c->ctx);
	AN(t->ssl);
	t->rbio = BIO_new(BIO_s_mem());
	t->wbio = BIO_new(BIO_s_mem());
	AN(t->rbio && t->wbio);
	SSL_set_bio(t->ssl, t->rbio, t->wbio);
	SSL_set_app_data(t->ssl, t);
	SSL_set_connect_state(t->ssl);
	if (c->cfg->sni[0]) {
		SSL_set_tlsext_host_name(t->ssl, c->cfg->sni);
		if (c->cfg->verify)
			X509_VERIFY_PARAM_set1_host(SSL_get0_param(t->ssl), c->cfg->sni, strlen(c->cfg->sni));
	}
	if (t->session_slot && *t->session_slot)
		SSL_set_session(t->ssl, *t->session_slot);
	return t;
}

int tls_conn_trim(struct tls_conn *t)
{
	/* Memory BIOs keep the capacity of the largest flight they carried
	 * (a handshake's: kilobytes) for the connection's life. Idle and
	 * empty, they are swapped for new ones, which hold nothing until the
	 * next record. */
	if (!t->done || BIO_ctrl_pending(t->rbio) || BIO_ctrl_pending(t->wbio))
		return 0;
	BIO *r = BIO_new(BIO_s_mem()), *w = BIO_new(BIO_s_mem());
	if (r == NULL || w == NULL) {
		BIO_free(r);
		BIO_free(w);
		return 0;
	}
	SSL_set_bio(t->ssl, r, w);  /* frees the old pair */
	t->rbio = r;
	t->wbio = w;
	return 1;
}

int tls_conn_resumed(const struct tls_conn *t)
{
	return SSL_session_reused(t->ssl);
}

/* ---- connections ---- */

struct tls_conn *tls_conn_new(struct tls_server *srv)
{
	struct tls_conn *t = calloc(1, sizeof(*t));
	AN(t);
	t->srv = srv;
	t->cert = -1;
	int first = srv->def_ecdsa >= 0 ? srv->def_ecdsa : srv->def_rsa;
	t->ssl = SSL_new(srv->certs[first].ctx);
	AN(t->ssl);
	t->rbio = BIO_new(BIO_s_mem());
	t->wbio = BIO_new(BIO_s_mem());
	AN(t->rbio && t->wbio);
	SSL_set_bio(t->ssl, t->rbio, t->wbio);
	SSL_set_app_data(t->ssl, t);
	SSL_set_accept_state(t->ssl);
#ifdef TLS_BORINGSSL_FAMILY
	/* Certificates, suites and the rest of the handshake's settings are
	 * not needed once it is done: an idle connection holds less. */
	SSL_set_shed_handshake_config(t->ssl, 1);
#endif
	return t;
}

void tls_conn_free(struct tls_conn *t)
{
	if (t == NULL)
		return;
	/* OpenSSL drops a session from the cache when its connection is freed
	 * without a shutdown; a clean close (however it happened) keeps it. */
	if (t->done && !t->failed)
		SSL_set_shutdown(t->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
	SSL_free(t->ssl);  /* frees both BIOs */
	free(t);
}

int tls_conn_handshake_done(const struct tls_conn *t)
{
	return t->done;
}

const char *tls_conn_error(const struct tls_conn *t)
{
	return t->error[0] ? t->error : "TLS error";
}

static void drain_wbio(struct tls_conn *t, struct buf *wire)
{
	size_t n;
	while ((n = BIO_ctrl_pending(t->wbio)) > 0) {
		buf_reserve(wire, n);
		int r = BIO_read(t->wbio, wire->data + wire->len, (int)n);
		if (r <= 0)
			break;
		wire->len += (size_t)r;
	}
}

static enum tls_status fail(struct tls_conn *t, int ret)
{
	t->failed = 1;
	int e = SSL_get_error(t->ssl, ret);
	unsigned long le = ERR_peek_last_error();
	long vr = SSL_get_verify_result(t->ssl);
	if (le && vr != X509_V_OK) {
		char e1[120];
		ERR_error_string_n(le, e1, sizeof(e1));
		snprintf(t->error, sizeof(t->error), "%s (%s)", e1, X509_verify_cert_error_string(vr));
	} else if (le) {
		ERR_error_string_n(le, t->error, sizeof(t->error));
	} else {
		snprintf(t->error, sizeof(t->error), "SSL_get_error %d%s", e,
			 e == SSL_ERROR_SYSCALL ? " (truncated or unexpected EOF)" : "");
	}
	ERR_clear_error();
	return TLS_ERROR;
}

enum tls_status tls_conn_feed(struct tls_conn *t, const char *in, size_t len, struct buf *plain,
			      struct buf *wire)
{
	if (len && BIO_write(t->rbio, in, (int)len) != (int)len)
		return fail(t, -1);
	if (!t->done) {
		int r = SSL_do_handshake(t->ssl);
		drain_wbio(t, wire);  /* alerts too: the peer learns why */
		if (r != 1) {
			int e = SSL_get_error(t->ssl, r);
			if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
				return TLS_OK;
			return fail(t, r);
		}
		t->done = 1;
	}
	for (;;) {
		buf_reserve(plain, 16384);
		int r = SSL_read(t->ssl, plain->data + plain->len, (int)(plain->cap - plain->len));
		if (r > 0) {
			plain->len += (size_t)r;
			/* The library reads a record from the BIO only as far as
			 * that record goes: with the BIO empty and nothing
			 * decrypted left over, another SSL_read would only say
			 * WANT_READ (and cost as much as a small record). */
			if (BIO_ctrl_pending(t->rbio) == 0 && SSL_pending(t->ssl) == 0) {
				drain_wbio(t, wire);
				return TLS_OK;
			}
			continue;
		}
		int e = SSL_get_error(t->ssl, r);
		drain_wbio(t, wire);
		if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
			return TLS_OK;
		if (e == SSL_ERROR_ZERO_RETURN)
			return TLS_CLOSED;
		return fail(t, r);
	}
}

int tls_conn_encrypt(struct tls_conn *t, const char *plain, size_t len, struct buf *wire)
{
	while (len > 0) {
		int chunk = len > 65536 ? 65536 : (int)len;
		int r = SSL_write(t->ssl, plain, chunk);
		if (r <= 0) {
			fail(t, r);
			return -1;
		}
		plain += r;
		len -= (size_t)r;
		drain_wbio(t, wire);
	}
	drain_wbio(t, wire);
	return 0;
}

void tls_conn_shutdown(struct tls_conn *t, struct buf *wire)
{
	if (!t->done || (SSL_get_shutdown(t->ssl) & SSL_SENT_SHUTDOWN))
		return;
	SSL_shutdown(t->ssl);
	ERR_clear_error();
	drain_wbio(t, wire);
}

void tls_conn_facts(const struct tls_conn *t, struct tls_facts *f)
{
	memset(f, 0, sizeof(*f));
	f->verify = -1;
	if (!t->done)
		return;
	const SSL_CIPHER *c = SSL_get_current_cipher(t->ssl);
	f->version = SSL_get_version(t->ssl);
	f->cipher = c ? SSL_CIPHER_get_name(c) : NULL;
	f->cipher_std = c ? SSL_CIPHER_standard_name(c) : NULL;
	f->sni = SSL_get_servername(t->ssl, TLSEXT_NAMETYPE_host_name);
	SSL_get0_alpn_selected(t->ssl, &f->alpn, &f->alpn_len);
	f->resumed = SSL_session_reused(t->ssl);
	X509 *peer = SSL_get_peer_certificate(t->ssl);
	if (peer) {
		f->peer_cert = 1;
		f->verify = SSL_get_verify_result(t->ssl);
		X509_free(peer);
	}
	if (t->srv && t->cert >= 0) {
		const struct tls_cert *tc = &t->srv->certs[t->cert];
		f->sig_alg = tc->sig_alg[0] ? tc->sig_alg : NULL;
		f->key_alg = tc->key_alg;
	}
}

size_t tls_conn_peer_cn(const struct tls_conn *t, char *out, size_t cap)
{
	if (cap)
		out[0] = '\0';
	X509 *peer = t->done ? SSL_get_peer_certificate(t->ssl) : NULL;
	if (peer == NULL)
		return 0;
	int n = X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, out, (int)cap);
	X509_free(peer);
	return n > 0 ? (size_t)n : 0;
}

size_t tls_conn_peer_subject(const struct tls_conn *t, char *out, size_t cap)
{
	if (cap)
		out[0] = '\0';
	X509 *peer = t->done ? SSL_get_peer_certificate(t->ssl) : NULL;
	if (peer == NULL)
		return 0;
	size_t n = 0;
	if (SSL_get_verify_result(t->ssl) == X509_V_OK) {
		BIO *b = BIO_new(BIO_s_mem());
		if (b && X509_NAME_print_ex(b, X509_get_subject_name(peer), 0, XN_FLAG_RFC2253) >= 0) {
			int r = BIO_read(b, out, (int)cap - 1);
			n = r > 0 ? (size_t)r : 0;
			out[n] = '\0';
		}
		BIO_free(b);
	}
	X509_free(peer);
	return n;
}

size_t tls_conn_peer_der(const struct tls_conn *t, struct buf *out)
{
	X509 *peer = t->done ? SSL_get_peer_certificate(t->ssl) : NULL;
	if (peer == NULL)
		return 0;
	int n = i2d_X509(peer, NULL);
	if (n > 0) {
		buf_reserve(out, (size_t)n);
		uint8_t *p = (uint8_t *)out->data + out->len;
		n = i2d_X509(peer, &p);
		if (n > 0)
			out->len += (size_t)n;
	}
	X509_free(peer);
	return n > 0 ? (size_t)n : 0;
}

void tls_conn_describe(const struct tls_conn *t, struct buf *out)
{
	if (!t->done) {
		buf_append_str(out, " tls=handshake");
		return;
	}
	const SSL_CIPHER *c = SSL_get_current_cipher(t->ssl);
	const char *sni = SSL_get_servername(t->ssl, TLSEXT_NAMETYPE_host_name);
	const uint8_t *alpn = NULL;
	unsigned alpn_len = 0;
	SSL_get0_alpn_selected(t->ssl, &alpn, &alpn_len);
	buf_appendf(out, " tls=%s cipher=%s sni=%s alpn=%.*s resumed=%d cert=%s", SSL_get_version(t->ssl),
		    c ? SSL_CIPHER_get_name(c) : "-", sni && sni[0] ? sni : "-", alpn_len ? (int)alpn_len : 1,
		    alpn_len ? (const char *)alpn : "-", SSL_session_reused(t->ssl),
		    t->cert < 0 || !t->srv ? "-" : t->srv->certs[t->cert].ecdsa ? "ecdsa" : "rsa");
	X509 *peer = SSL_get_peer_certificate(t->ssl);
	if (peer) {
		char subj[256];
		X509_NAME_oneline(X509_get_subject_name(peer), subj, sizeof(subj));
		for (char *p = subj; *p; p++)
			if (*p == '"' || *p < 0x20)
				*p = '?';
		buf_appendf(out, " ccert=\"%s\" verify=%ld", subj, SSL_get_verify_result(t->ssl));
		X509_free(peer);
	} else {
		buf_append_str(out, " ccert=-");
	}
}

void tls_conn_describe_json(const struct tls_conn *t, struct buf *out)
{
	if (!t->done) {
		buf_append_str(out, ",\"tls\":{\"version\":null}");
		return;
	}
	struct tls_facts f;
	tls_conn_facts(t, &f);
	buf_append_str(out, ",\"tls\":{\"version\":");
	buf_append_json(out, f.version, strlen(f.version));
	buf_append_str(out, ",\"cipher\":");
	buf_append_json(out, f.cipher ? f.cipher : "", f.cipher ? strlen(f.cipher) : 0);
	buf_append_str(out, ",\"sni\":");
	if (f.sni)
		buf_append_json(out, f.sni, strlen(f.sni));
	else
		buf_append_str(out, "null");
	buf_append_str(out, ",\"alpn\":");
	if (f.alpn_len)
		buf_append_json(out, (const char *)f.alpn, f.alpn_len);
	else
		buf_append_str(out, "null");
	buf_appendf(out, ",\"resumed\":%s,\"cert\":\"%s\"", f.resumed ? "true" : "false",
		    t->cert < 0 || !t->srv ? "-" : t->srv->certs[t->cert].ecdsa ? "ecdsa" : "rsa");
	X509 *peer = SSL_get_peer_certificate(t->ssl);
	if (peer) {
		char subj[256];
		X509_NAME_oneline(X509_get_subject_name(peer), subj, sizeof(subj));
		buf_append_str(out, ",\"client_cert\":");
		buf_append_json(out, subj, strlen(subj));
		buf_appendf(out, ",\"verify\":%ld", f.verify);
		X509_free(peer);
	}
	buf_append_str(out, "}");
}
