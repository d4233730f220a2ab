/* The Redis store of native rate limits (rlredis.h).
 *
 * Decisions wait in a ring in the order they were sent. Redis answers in
 * that order on one connection, so the oldest pending decision is always
 * the first to reach its deadline: one timer for the ring's head serves
 * them all. A decision carries its sequence number to hiredis as privdata,
 * never a stream pointer: a reply whose ring slot no longer holds that
 * number, or holds it with no stream (timed out, or its client went away),
 * is dropped, so a late reply never touches a stream that has ended.
 *
 * A connection that goes away (Redis stopped, reset) fails every decision
 * still pending (hiredis calls their callbacks with no reply) and is made
 * again after a backoff (100 ms doubling to 2 s). Meanwhile decisions fail
 * at once: the caller applies on_store_error. One that stops answering
 * without closing is dropped once, while decisions are timing out, the
 * oldest one still unanswered was sent over a second (or ten timeouts, if
 * longer) ago: measured from a send, not from the last reply, so that one
 * slow answer after an idle spell does not look like a dead connection. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <openssl/sha.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libuv.h>
#include "rlredis.h"
#include "log.h"
#include "proxy-t.h"
#include "util.h"
#include "worker.h"

/* GCRA in Redis, on Redis's clock (instances need no common clock), in
 * microseconds. KEYS[1]: the key's TAT; ARGV: interval, tau. Returns
 * {1, 0} allowed or {0, microseconds until one would be}. The key expires
 * when its TAT passes: then it carries no information. Numbers are doubles
 * in Redis's Lua: microseconds since 1970 are below 2^53, and %.0f keeps
 * every digit where tostring would not. */
static const char script[] =
	"if redis.replicate_commands then redis.replicate_commands() end\n"
	"local interval = tonumber(ARGV[1])\n"
	"local tau = tonumber(ARGV[2])\n"
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
	"local tat = tonumber(redis.call('GET', KEYS[1])) or 0\n"
	"if tat < now then tat = now end\n"
	"if tat - now > tau then return {0, tat - tau - now} end\n"
	"local new = tat + interval\n"
	"redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', math.floor((new - now) / 1000) + 1)\n"
	"return {1, 0}\n";

#define RING 4096u                 /* decisions waiting per worker; more: overload */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 2000
#define KEY_MAX (2 * CFG_NAME_MAX + 48)

enum rs_state {
	RS_DOWN,        /* no connection; the retry timer makes one */
	RS_CONNECTING,  /* connect under way: commands queue in hiredis */
	RS_UP,          /* connected */
};

struct pending {
	struct stream *s;              /* NULL: answered, timed out or cancelled */
	const struct cfg_rate_limit *rl;
	uint64_t seq;
	uint64_t h;
	uint64_t sent_us;
	uint64_t deadline_us;
};

static struct {
	uv_loop_t *loop;
	const struct cfg_redis *cfg;
	redisAsyncContext *ac;
	enum rs_state state;
	uv_timer_t retry;              /* reconnect after a backoff */
	uv_timer_t deadline;           /* the ring head's deadline; the connect timeout */
	uint32_t backoff_ms;
	uint64_t head, tail;           /* sequence numbers in the ring: [head, tail) */
	uint64_t connect_start_us;
	uint64_t replied;              /* the last sequence Redis answered (in order) */
	char sha[2 * SHA_DIGEST_LENGTH + 1];
	int was_down;                  /* a failure was logged: log the recovery */
	uint64_t log_sec;              /* rate-limited logging: the current second */
	uint32_t log_n, log_dropped;
	struct pending ring[RING];
} R;

static void reconnect_later(void);

/* At most 2 lines a second: a store that fails on every request must not
 * turn the error log into the bottleneck. */
__attribute__((format(printf, 1, 2)))
static void store_log(const char *fmt, ...)
{
	uint64_t sec = now_us() / 1000000u;
	if (sec != R.log_sec) {
		if (R.log_dropped)
			log_warn("rate limit store: %u more message(s) not logged", R.log_dropped);
		R.log_sec = sec;
		R.log_n = R.log_dropped = 0;
	}
	if (R.log_n++ >= 2) {
		R.log_dropped++;
		return;
	}
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	log_warn("rate limit store redis %s: %s", R.cfg->address, line);
}

/* ---- the ring ---- */

static struct pending *slot_of(uint64_t seq)
{
	return &R.ring[seq & (RING - 1)];
}

static void decided(struct pending *p, int outcome, uint64_t retry_us)
{
	struct stream *s = p->s;
	const struct cfg_rate_limit *rl = p->rl;
	p->s = NULL;
	ratelimit_redis_done(s, rl, outcome, retry_us);
}

/* Every decision still waiting fails (the connection is gone). */
static void fail_all(void)
{
	for (uint64_t q = R.head; q < R.tail; q++) {
		struct pending *p = slot_of(q);
		if (p->seq == q && p->s != NULL)
			decided(p, -1, 0);
	}
	R.head = R.tail;
}

/* ---- the connection ---- */

static void drop_connection(const char *why)
{
	redisAsyncContext *ac = R.ac;
	store_log("%s; reconnecting", why);
	R.was_down = 1;
	R.ac = NULL;
	R.state = RS_DOWN;  /* before the free: callbacks it runs must not send on it */
	if (ac)
		redisAsyncFree(ac);
	fail_all();
	reconnect_later();
}

static void deadline_cb(uv_timer_t *t);

static void rearm(void)
{
	while (R.head < R.tail && slot_of(R.head)->s == NULL)
		R.head++;
	uint64_t now = now_us(), d = 0;
	if (R.head < R.tail)
		d = slot_of(R.head)->deadline_us;
	if (R.state == RS_CONNECTING) {
		uint64_t cd = R.connect_start_us + (uint64_t)R.cfg->connect_timeout_ms * 1000u;
		d = d && d < cd ? d : cd;
	}
	if (d == 0) {
		uv_timer_stop(&R.deadline);
		return;
	}
	uv_timer_start(&R.deadline, deadline_cb, d > now ? (d - now + 999) / 1000 : 0, 0);
}

/* The connection is stuck: the oldest decision Redis has not answered
 * (timed out or not) was sent too long ago. Replies come in order, so it
 * is the one after the last answered; a slot reused since (RING later
 * asks) held one older still. */
static int stuck(uint64_t now)
{
	uint64_t q = R.replied + 1;
	if (q >= R.tail)
		return 0;
	uint64_t max = (uint64_t)R.cfg->timeout_ms * 10000u;
	max = max > 1000000u ? max : 1000000u;
	const struct pending *p = slot_of(q);
	return p->seq != q || now - p->sent_us > max;
}

static void deadline_cb(uv_timer_t *t)
{
	(void)t;
	uint64_t now = now_us();
	if (R.state == RS_CONNECTING &&
	    now >= R.connect_start_us + (uint64_t)R.cfg->connect_timeout_ms * 1000u) {
		drop_connection("connect timeout");
		return;
	}
	unsigned n = 0;
	while (R.head < R.tail) {
		struct pending *p = slot_of(R.head);
		if (p->seq == R.head && p->s != NULL) {
			if (p->deadline_us > now)
				break;
			ratelimit_count(W->slot, RLC_ERR_TIMEOUT);
			n++;
			/* The verdict's callback may ask again at once (the
			 * next pipelined request): rlredis_ask moves R.head
			 * past answered slots and appends at the tail. Look at
			 * R.head afresh rather than step over what it holds. */
			decided(p, -1, 0);
			continue;
		}
		R.head++;
	}
	if (n)
		store_log("%u decision(s) timed out after %u ms; on_store_error applied", n, R.cfg->timeout_ms);
	if (n && R.state == RS_UP && stuck(now)) {
		drop_connection("no reply for over a second");
		return;
	}
	rearm();
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv);

static int send_decision(struct pending *p, int eval)
{
	char key[KEY_MAX], iv[24], tau[24];
	const struct cfg_rate_limit *rl = p->rl;
	snprintf(key, sizeof(key), "sluice:rl:%s:%016" PRIx64, rl->scope, p->h);
	snprintf(iv, sizeof(iv), "%" PRIu64, rl->interval_us);
	snprintf(tau, sizeof(tau), "%" PRIu64, (uint64_t)(rl->burst - 1) * rl->interval_us);
	const char *argv[6] = { eval ? "EVAL" : "EVALSHA", eval ? script : R.sha, "1", key, iv, tau };
	size_t lens[6];
	for (int i = 0; i < 6; i++)
		lens[i] = strlen(argv[i]);
	return redisAsyncCommandArgv(R.ac, on_reply, (void *)(uintptr_t)p->seq, 6, argv, lens);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
	(void)ac;
	uint64_t seq = (uintptr_t)priv;
	redisReply *rep = r;
	struct pending *p = slot_of(seq);
	if (rep && seq > R.replied)
		R.replied = seq;
	if (p->seq != seq || p->s == NULL)
		return;  /* timed out or cancelled: nobody waits for it */
	if (rep == NULL) {
		ratelimit_count(W->slot, RLC_ERR_CONNECT);
		decided(p, -1, 0);
		return;
	}
	if (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "NOSCRIPT", 8) == 0 && R.state == RS_UP &&
	    send_decision(p, 1) == REDIS_OK)
		return;  /* the script cache was flushed: the whole script, once */
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 && rep->element[0]->type == REDIS_REPLY_INTEGER &&
	    rep->element[1]->type == REDIS_REPLY_INTEGER) {
		long long ok = rep->element[0]->integer, retry = rep->element[1]->integer;
		decided(p, ok ? 1 : 0, retry > 0 ? (uint64_t)retry : 0);
	} else {
		ratelimit_count(W->slot, RLC_ERR_REPLY);
		store_log("unexpected reply to the rate limit script: %.200s",
			  rep->type == REDIS_REPLY_ERROR || rep->type == REDIS_REPLY_STATUS ? rep->str : "(not {n, n})");
		decided(p, -1, 0);
	}
	rearm();
}

static void on_setup_reply(redisAsyncContext *ac, void *r, void *priv)
{
	(void)ac;
	redisReply *rep = r;
	if (rep == NULL)
		return;
	if (rep->type == REDIS_REPLY_ERROR)
		store_log("%s failed: %.200s", (const char *)priv, rep->str);
	else if (strcmp((const char *)priv, "SCRIPT LOAD") == 0 && rep->type == REDIS_REPLY_STRING &&
		 strcmp(rep->str, R.sha) != 0)
		store_log("SCRIPT LOAD returned %.64s, expected %s", rep->str, R.sha);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	if (ac != R.ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees the context after this returns, failing the
		 * commands queued on it. */
		store_log("cannot connect: %s", ac->errstr);
		R.was_down = 1;
		R.ac = NULL;
		R.state = RS_DOWN;
		reconnect_later();
		return;
	}
	R.state = RS_UP;
	R.backoff_ms = BACKOFF_MIN_MS;
	ratelimit_count(W->slot, RLC_REDIS_CONNECTS);
	if (R.was_down)
		log_info("rate limit store redis %s: connected again", R.cfg->address);
	R.was_down = 0;
	rearm();
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	if (ac != R.ac)
		return;
	/* Pending callbacks have had their NULL replies already. */
	store_log("connection lost: %s", status == REDIS_OK ? "closed" : ac->errstr);
	R.was_down = 1;
	R.ac = NULL;
	R.state = RS_DOWN;
	reconnect_later();
}

static void connect_now(void)
{
	const struct cfg_redis *c = R.cfg;
	redisAsyncContext *ac;
	if (c->unix_socket) {
		ac = redisAsyncConnectUnix(c->address);
	} else {
		char ip[INET6_ADDRSTRLEN];
		int port;
		if (c->addr.ss.ss_family == AF_INET6) {
			const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&c->addr.ss;
			inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
			port = ntohs(a->sin6_port);
		} else {
			const struct sockaddr_in *a = (const struct sockaddr_in *)&c->addr.ss;
			inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
			port = ntohs(a->sin_port);
		}
		ac = redisAsyncConnect(ip, port);
	}
	if (ac == NULL || ac->err) {
		store_log("cannot connect: %s", ac ? ac->errstr : "out of memory");
		R.was_down = 1;
		if (ac)
			redisAsyncFree(ac);
		reconnect_later();
		return;
	}
	if (redisLibuvAttach(ac, R.loop) != REDIS_OK) {
		store_log("cannot attach the connection to the loop");
		redisAsyncFree(ac);
		reconnect_later();
		return;
	}
	R.ac = ac;
	R.state = RS_CONNECTING;
	R.connect_start_us = now_us();
	R.replied = R.tail - 1;  /* nothing asked before is answered on this connection */
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	/* Queued now, sent first once connected: decisions asked meanwhile
	 * follow them on the same connection. */
	if (c->password[0]) {
		const char *argv[2] = { "AUTH", c->password };
		size_t lens[2] = { 4, strlen(c->password) };
		redisAsyncCommandArgv(ac, on_setup_reply, (void *)"AUTH", 2, argv, lens);
	}
	if (c->db)
		redisAsyncCommand(ac, on_setup_reply, (void *)"SELECT", "SELECT %u", c->db);
	redisAsyncCommand(ac, on_setup_reply, (void *)"SCRIPT LOAD", "SCRIPT LOAD %s", script);
	rearm();
}

static void retry_cb(uv_timer_t *t)
{
	(void)t;
	if (R.state == RS_DOWN)
		connect_now();
}

static void reconnect_later(void)
{
	uv_timer_start(&R.retry, retry_cb, R.backoff_ms, 0);
	R.backoff_ms = R.backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : R.backoff_ms * 2;
	rearm();
}

void rlredis_start(uv_loop_t *loop, const struct cfg_redis *c)
{
	unsigned char md[SHA_DIGEST_LENGTH];
	R.loop = loop;
	R.cfg = c;
	R.head = R.tail = 1;  /* sequence 0 means "none" (s->rl_seq) */
	R.backoff_ms = BACKOFF_MIN_MS;
	SHA1((const unsigned char *)script, sizeof(script) - 1, md);
	for (int i = 0; i < SHA_DIGEST_LENGTH; i++)
		snprintf(R.sha + 2 * i, 3, "%02x", md[i]);
	uv_timer_init(loop, &R.retry);
	uv_timer_init(loop, &R.deadline);
	uv_unref((uv_handle_t *)&R.retry);
	uv_unref((uv_handle_t *)&R.deadline);
	connect_now();
}

enum rl_verdict rlredis_ask(struct stream *s, const struct cfg_rate_limit *rl, uint64_t h)
{
	if (R.state == RS_DOWN || R.ac == NULL) {
		ratelimit_count(W->slot, RLC_ERR_CONNECT);
		store_log("not connected; on_store_error %s applied", rl->on_store_error_deny ? "deny" : "allow");
		return RL_STORE_DENY;
	}
	while (R.head < R.tail && slot_of(R.head)->s == NULL)
		R.head++;  /* answered or cancelled: their slots may be reused (replies check seq) */
	int first = R.head == R.tail;
	if (R.tail - R.head >= RING) {
		ratelimit_count(W->slot, RLC_ERR_OVERLOAD);
		store_log("%u decisions already waiting; on_store_error applied", RING);
		return RL_STORE_DENY;
	}
	uint64_t seq = R.tail;
	struct pending *p = slot_of(seq);
	p->s = s;
	p->rl = rl;
	p->seq = seq;
	p->h = h;
	p->sent_us = now_us();
	p->deadline_us = p->sent_us + (uint64_t)R.cfg->timeout_ms * 1000u;
	if (send_decision(p, 0) != REDIS_OK) {
		p->s = NULL;
		ratelimit_count(W->slot, RLC_ERR_CONNECT);
		return RL_STORE_DENY;
	}
	R.tail++;
	s->rl_seq = seq;
	if (first)  /* later ones are due after the head, whose deadline the timer has */
		rearm();
	return RL_PENDING;
}

void rlredis_cancel(uint64_t seq)
{
	struct pending *p = slot_of(seq);
	if (p->seq == seq)
		p->s = NULL;
}
