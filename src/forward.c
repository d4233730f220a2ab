#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include "forward.h"
#include "proxy_proto.h"
#include "tls.h"
#include "worker.h"

/* hdr.drop value of a trusted forwarder's list header that forward_write
 * re-emits merged with sluice's element (1 = dropped for good). */
#define DROP_MERGED 2

/* Single-valued identity headers sluice can add: a trusted forwarder's
 * own copy wins (it saw the client first), otherwise sluice's. */
static const char *const single_names[] = {
	"X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Port", "X-Real-IP",
	"WL-Proxy-SSL", "WL-Proxy-Client-IP", "WL-Proxy-Client-Port", "WL-Proxy-Client-Cert",
};

static int client_sent(const struct msg *m, const char *name)
{
	size_t n = strlen(name);
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		const struct hdr *h = &m->hdrs[i];
		if (h->kind == HDR_IDENTITY && !h->drop && h->name_len == n &&
		    strncasecmp(msg_str(m, h->name_off), name, n) == 0)
			return 1;
	}
	return 0;
}

void forward_filter(const struct client *cl, struct msg *m, const struct cfg_forward *f)
{
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		struct hdr *h = &m->hdrs[i];
		switch (h->kind) {
		case HDR_IDENTITY:
			if (!cl->trusted_fwd)
				h->drop = 1;
			break;
		case HDR_X_FORWARDED_FOR:
			if (!cl->trusted_fwd || f->x_forwarded_for == CFG_XFF_REPLACE)
				h->drop = 1;
			else if (f->x_forwarded_for == CFG_XFF_APPEND && !h->drop)
				h->drop = DROP_MERGED;
			break;
		case HDR_FORWARDED:
			if (!cl->trusted_fwd)
				h->drop = 1;
			else if (f->forwarded && !h->drop)
				h->drop = DROP_MERGED;
			break;
		default:
			break;
		}
	}
}

/* The values of every KIND header a trusted forwarder sent, comma-joined,
 * followed by ", " when there were any. Headers a Connection header named
 * stay dropped: only those forward_filter set aside are merged. */
static void append_chain(const struct client *cl, const struct msg *m, enum hdr_kind kind, struct buf *out)
{
	if (!cl->trusted_fwd)
		return;
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		const struct hdr *h = &m->hdrs[i];
		if (h->kind != kind || h->val_len == 0 || h->drop != DROP_MERGED)
			continue;
		buf_append(out, msg_str(m, h->val_off), h->val_len);
		buf_append(out, ", ", 2);
	}
}

/* RFC 7239 value: a token as is, anything else as a quoted-string. */
static void forwarded_value(struct buf *out, const char *v, size_t n)
{
	size_t i = 0;
	while (i < n && tchar((unsigned char)v[i]))
		i++;
	if (i == n && n > 0) {
		buf_append(out, v, n);
		return;
	}
	buf_append(out, "\"", 1);
	for (i = 0; i < n; i++) {
		if (v[i] == '"' || v[i] == '\\')
			buf_append(out, "\\", 1);
		buf_append(out, v + i, 1);
	}
	buf_append(out, "\"", 1);
}

/* WebLogic treats WL-Proxy-Client-Cert as an authenticated identity, so
 * under client_auth: optional an unverified certificate is not passed on. */
static int client_cert_verified(const struct client *cl)
{
	struct tls_facts tf;
	tls_conn_facts(cl->tls, &tf);
	return tf.peer_cert && tf.verify == 0;
}

void forward_write(const struct client *cl, const struct msg *m, const struct cfg_forward *f, struct buf *out)
{
	char ip[NETADDR_IP_MAX];
	struct netaddr src;
	netaddr_unmap(&src, &cl->src);
	size_t iplen = netaddr_ip_text(&src, ip, sizeof(ip));
	const char *proto = cl->tls ? "https" : "http";
	const struct hdr *host = msg_find(m, HDR_HOST);
	int keep_single[ARRAY_SIZE(single_names)] = { 0 };
	if (cl->trusted_fwd)
		for (size_t i = 0; i < ARRAY_SIZE(single_names); i++)
			keep_single[i] = client_sent(m, single_names[i]);

	if (f->x_forwarded_for != CFG_XFF_OFF) {
		buf_append_str(out, "X-Forwarded-For: ");
		if (f->x_forwarded_for == CFG_XFF_APPEND)
			append_chain(cl, m, HDR_X_FORWARDED_FOR, out);
		buf_append(out, ip, iplen);
		buf_append(out, "\r\n", 2);
	}
	if (f->forwarded) {
		buf_append_str(out, "Forwarded: ");
		append_chain(cl, m, HDR_FORWARDED, out);
		buf_append_str(out, "for=");
		if (src.family == AF_INET6)
			buf_appendf(out, "\"[%s]\"", ip);
		else if (src.family == AF_INET)
			buf_append_str(out, ip);
		else
			buf_append_str(out, "unknown");
		buf_appendf(out, ";proto=%s", proto);
		if (host && host->val_len) {
			buf_append_str(out, ";host=");
			forwarded_value(out, msg_str(m, host->val_off), host->val_len);
		}
		buf_append(out, "\r\n", 2);
	}
	if (f->x_forwarded_proto && !keep_single[0]) {
		buf_append_str(out, "X-Forwarded-Proto: ");
		buf_append_str(out, proto);
		buf_append(out, "\r\n", 2);
	}
	if (f->x_forwarded_host && !keep_single[1] && host && host->val_len) {
		buf_append_str(out, "X-Forwarded-Host: ");
		buf_append(out, msg_str(m, host->val_off), host->val_len);
		buf_append(out, "\r\n", 2);
	}
	if (f->x_forwarded_port && !keep_single[2]) {
		buf_append_str(out, "X-Forwarded-Port: ");
		buf_append_u64(out, netaddr_port(&cl->dst));
		buf_append(out, "\r\n", 2);
	}
	if (f->x_real_ip && !keep_single[3]) {
		buf_append_str(out, "X-Real-IP: ");
		buf_append(out, ip, iplen);
		buf_append(out, "\r\n", 2);
	}
	if (f->wl_proxy_ssl && !keep_single[4])
		buf_append_str(out, cl->tls ? "WL-Proxy-SSL: true\r\n" : "WL-Proxy-SSL: false\r\n");
	if (f->wl_proxy_client_ip && !keep_single[5]) {
		buf_append_str(out, "WL-Proxy-Client-IP: ");
		buf_append(out, ip, iplen);
		buf_append(out, "\r\n", 2);
	}
	if (f->wl_proxy_client_port && !keep_single[6]) {
		buf_append_str(out, "WL-Proxy-Client-Port: ");
		buf_append_u64(out, netaddr_port(&cl->src));
		buf_append(out, "\r\n", 2);
	}
	if (f->wl_proxy_client_cert && !keep_single[7] && cl->tls && client_cert_verified(cl)) {
		struct buf *der = &W->scratch;
		der->len = 0;
		if (tls_conn_peer_der(cl->tls, der)) {
			buf_append_str(out, "WL-Proxy-Client-Cert: ");
			buf_append_base64(out, der->data, der->len);
			buf_append(out, "\r\n", 2);
		}
	}
}

static void proxy_encode(const struct cfg_server *srv, const struct pp_header *h, struct buf *out)
{
	buf_reserve(out, PP_V2_MAX);
	size_t n = srv->proxy_protocol == CFG_PP_V1
		? pp_encode_v1(h, out->data + out->len, out->cap - out->len)
		: pp_encode_v2(h, (uint8_t *)out->data + out->len, out->cap - out->len);
	AN(n > 0);
	out->len += n;
}

void forward_proxy_header(const struct client *cl, const struct cfg_server *srv, struct buf *out)
{
	if (srv->proxy_protocol == CFG_PP_OFF)
		return;
	struct pp_header h = { .src = &cl->src, .dst = &cl->dst, .tlvs = srv->proxy_tlvs };
	char uid[48], cn[256];
	struct pp_ssl ssl;
	if (srv->proxy_protocol == CFG_PP_V2 && h.tlvs) {
		int n = snprintf(uid, sizeof(uid), "%013llx-%02x-%llx", (unsigned long long)W->boot_us,
				 (unsigned)W->index & 0xff, (unsigned long long)cl->serial);
		h.unique_id = uid;
		h.unique_id_len = (size_t)n;
		if (cl->tls && tls_conn_handshake_done(cl->tls)) {
			struct tls_facts tf;
			tls_conn_facts(cl->tls, &tf);
			h.alpn = (const char *)tf.alpn;
			h.alpn_len = tf.alpn_len;
			h.authority = tf.sni;
			h.authority_len = tf.sni ? strlen(tf.sni) : 0;
			memset(&ssl, 0, sizeof(ssl));
			ssl.client = PP2_CLIENT_SSL;
			if (tf.peer_cert)
				ssl.client |= PP2_CLIENT_CERT_SESS | (tf.resumed ? 0 : PP2_CLIENT_CERT_CONN);
			/* The spec: zero only for a presented and verified certificate. */
			ssl.verify = tf.peer_cert ? (uint32_t)tf.verify : 1;
			ssl.version = tf.version;
			ssl.cipher = tf.cipher;
			ssl.sig_alg = tf.sig_alg;
			ssl.key_alg = tf.key_alg;
			if (tls_conn_peer_cn(cl->tls, cn, sizeof(cn)))
				ssl.cn = cn;
			h.ssl = &ssl;
		}
	}
	proxy_encode(srv, &h, out);
}

void forward_proxy_local(const struct cfg_server *srv, struct buf *out)
{
	if (srv->proxy_protocol == CFG_PP_OFF)
		return;
	struct pp_header h = { 0 };
	proxy_encode(srv, &h, out);
}
