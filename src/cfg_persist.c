/* Pass 3 of cfg_load() for a backend's persistence mapping, and the keys
 * its servers are known by for it (servers[].route, .jvmid, .cookie). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cfg.h"
#include "cfg-int.h"
#include "hash.h"

/* RFC 6265 4.1.1: a cookie name is an RFC 7230 token. */
static int is_token(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (*s <= 0x20 || *s >= 0x7f || strchr("()<>@,;:\\\"/[]?={}", *s))
			return 0;
	return 1;
}

/* A cookie-octet value: no blanks, quotes, commas, semicolons or
 * backslashes. Route ids also may not hold the separators that delimit
 * them in the session id. */
static int is_cookie_value(const char *s, const char *also_not)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (*s <= 0x20 || *s >= 0x7f || strchr("\",;\\", *s) || strchr(also_not, *s))
			return 0;
	return 1;
}

static const char *const types[] = { "cookie", "jvm_route", "weblogic", "app_cookie", "source", NULL };

const char *cfg_persist_type_name(enum cfg_persist_type t)
{
	return t == CFG_PERSIST_NONE ? "none" : types[t - 1];
}

/* A key of servers[] that only one type reads: set under another type, it
 * would silently do nothing. */
static void server_key_unused(struct cfg_load *ld, const char *pre, unsigned i, const char *key,
			      const char *val, const char *type)
{
	char sp[CFG_PATH_MAX], k[CFG_PATH_MAX];
	if (val == NULL)
		return;
	path_index(sp, kp(k, pre, "servers"), i);
	cfg_err_at(ld, kp(k, sp, key), AT_KEY, "%s is read only with persistence type %s", key, type);
}

static void conv_server_keys(struct cfg_load *ld, const char *pre, const struct y_backend *y,
			     struct cfg_backend *b)
{
	const struct cfg_persist *p = &b->persist;
	char sp[CFG_PATH_MAX], k[CFG_PATH_MAX];

	for (unsigned i = 0; i < b->nservers; i++) {
		const struct y_server *ys = &y->servers[i];
		struct cfg_server *s = &b->servers[i];
		path_index(sp, kp(k, pre, "servers"), i);
		if (p->type != CFG_PERSIST_JVM_ROUTE)
			server_key_unused(ld, pre, i, "route", ys->route, "jvm_route");
		if (p->type != CFG_PERSIST_WEBLOGIC)
			server_key_unused(ld, pre, i, "jvmid", ys->jvmid, "weblogic");
		if (p->type != CFG_PERSIST_COOKIE)
			server_key_unused(ld, pre, i, "cookie", ys->cookie, "cookie");

		snprintf(s->route, sizeof(s->route), "%s", s->name);
		cfg_conv_str(ld, kp(k, sp, "route"), ys->route, 0, s->route, sizeof(s->route));
		if (ys->route && !is_cookie_value(s->route, ""))
			cfg_err_at(ld, k, AT_VALUE, "a jvmRoute is cookie characters: no blanks, "
				   "quotes, commas, semicolons or backslashes");
		cfg_conv_str(ld, kp(k, sp, "jvmid"), ys->jvmid, 0, s->jvmid, sizeof(s->jvmid));
		if (ys->jvmid && !is_cookie_value(s->jvmid, "!"))
			cfg_err_at(ld, k, AT_VALUE, "a JVMID is cookie characters without '!'");
		if (ys->cookie) {
			cfg_conv_str(ld, kp(k, sp, "cookie"), ys->cookie, 0, s->cookie, sizeof(s->cookie));
			if (!is_cookie_value(s->cookie, ""))
				cfg_err_at(ld, k, AT_VALUE, "a cookie value is cookie characters: no "
					   "blanks, quotes, commas, semicolons or backslashes");
		} else {
			/* The same in every instance with the same names, so that
			 * a tier of sluices agrees with no shared state; a hash,
			 * so the cookie shows neither names nor addresses. */
			char key[2 * CFG_NAME_MAX + 2];
			int n = snprintf(key, sizeof(key), "%s/%s", b->name, s->name);
			snprintf(s->cookie, sizeof(s->cookie), "%016" PRIx64,
				 hash_bytes(0x736c75696365ull, key, (size_t)n));
		}
		for (unsigned j = 0; j < i; j++) {
			const struct cfg_server *o = &b->servers[j];
			const char *what = NULL;
			if (p->type == CFG_PERSIST_JVM_ROUTE && strcmp(s->route, o->route) == 0)
				what = "route";
			else if (p->type == CFG_PERSIST_COOKIE && strcmp(s->cookie, o->cookie) == 0)
				what = "cookie";
			else if (p->type == CFG_PERSIST_WEBLOGIC && s->jvmid[0] && strcmp(s->jvmid, o->jvmid) == 0)
				what = "jvmid";
			if (what) {
				cfg_err_at(ld, kp(k, sp, what), ys->route || ys->cookie || ys->jvmid ? AT_VALUE : AT_KEY,
					   "servers %s and %s have the same %s \"%s\": persistence could not "
					   "tell them apart", o->name, s->name, what,
					   what[0] == 'r' ? s->route : what[0] == 'c' ? s->cookie : s->jvmid);
				break;
			}
		}
	}
}

void cfg_conv_persist(struct cfg_load *ld, const char *pre, const struct y_backend *y,
		      struct cfg_backend *b)
{
	struct cfg_persist *p = &b->persist;
	const struct y_persist *yp = y->persistence;
	char pp[CFG_PATH_MAX], k[CFG_PATH_MAX];

	*p = (struct cfg_persist){ .secure = -1, .http_only = 1, .same_site = CFG_SAMESITE_LAX,
				   .ttl_ms = 30 * 60 * 1000 };
	snprintf(p->path, sizeof(p->path), "/");
	snprintf(p->path_parameter, sizeof(p->path_parameter), "jsessionid");
	kp(pp, pre, "persistence");
	if (yp != NULL) {
		int t = cfg_conv_word(ld, kp(k, pp, "type"), yp->type, types);
		p->type = t < 0 ? CFG_PERSIST_NONE : (enum cfg_persist_type)(t + 1);
	}
	conv_server_keys(ld, pre, y, b);
	if (yp == NULL || p->type == CFG_PERSIST_NONE)
		return;

	const char *only_cookie[] = { "secure", "http_only", "same_site", "max_age", "domain", "path" };
	const char *only_cookie_v[] = { yp->secure, yp->http_only, yp->same_site, yp->max_age,
					yp->domain, yp->path };
	for (unsigned i = 0; i < sizeof(only_cookie) / sizeof(*only_cookie); i++)
		if (only_cookie_v[i] && p->type != CFG_PERSIST_COOKIE)
			cfg_err_at(ld, kp(k, pp, only_cookie[i]), AT_KEY,
				   "%s is an attribute of the cookie sluice sets (type cookie)",
				   only_cookie[i]);
	if (yp->path_parameter && p->type != CFG_PERSIST_JVM_ROUTE && p->type != CFG_PERSIST_WEBLOGIC)
		cfg_err_at(ld, kp(k, pp, "path_parameter"), AT_KEY,
			   "path_parameter is read only with types jvm_route and weblogic");
	if (yp->ttl && p->type != CFG_PERSIST_APP_COOKIE)
		cfg_err_at(ld, kp(k, pp, "ttl"), AT_KEY, "ttl is read only with type app_cookie");
	if (yp->cookie && p->type == CFG_PERSIST_SOURCE)
		cfg_err_at(ld, kp(k, pp, "cookie"), AT_KEY, "type source reads no cookie");

	if (p->type == CFG_PERSIST_COOKIE)
		snprintf(p->cookie, sizeof(p->cookie), "SLUICE_SERVER");
	else if (p->type == CFG_PERSIST_JVM_ROUTE || p->type == CFG_PERSIST_WEBLOGIC)
		snprintf(p->cookie, sizeof(p->cookie), "JSESSIONID");
	else if (p->type == CFG_PERSIST_APP_COOKIE && yp->cookie == NULL)
		cfg_err_at(ld, pp, AT_KEY, "type app_cookie needs the name of the application's "
			   "cookie: cookie: <name>");
	if (yp->cookie) {
		cfg_conv_str(ld, kp(k, pp, "cookie"), yp->cookie, 0, p->cookie, sizeof(p->cookie));
		if (!is_token(p->cookie))
			cfg_err_at(ld, k, AT_VALUE, "a cookie name is a token: letters, digits and "
				   "!#$%%&'*+-.^_`|~");
	}
	cfg_conv_str(ld, kp(k, pp, "path_parameter"), yp->path_parameter, 1, p->path_parameter,
		     sizeof(p->path_parameter));
	if (yp->path_parameter && p->path_parameter[0] && !is_token(p->path_parameter))
		cfg_err_at(ld, k, AT_VALUE, "a path parameter name is a token");

	if (yp->secure && strcmp(yp->secure, "auto") != 0)
		cfg_conv_bool(ld, kp(k, pp, "secure"), yp->secure, &p->secure);
	cfg_conv_bool(ld, kp(k, pp, "http_only"), yp->http_only, &p->http_only);
	if (yp->same_site) {
		static const char *const ss[] = { "off", "lax", "strict", "none", NULL };
		int v = cfg_conv_word(ld, kp(k, pp, "same_site"), yp->same_site, ss);
		if (v >= 0)
			p->same_site = (enum cfg_same_site)v;
		if (p->same_site == CFG_SAMESITE_NONE && p->secure == 0)
			cfg_err_at(ld, k, AT_VALUE, "browsers drop a SameSite=None cookie that is not "
				   "Secure: set secure: true (or auto, behind TLS)");
	}
	if (yp->max_age) {
		uint32_t ms = 0;
		cfg_conv_duration(ld, kp(k, pp, "max_age"), yp->max_age, 1000, &ms);
		p->max_age_s = ms / 1000;
	}
	cfg_conv_str(ld, kp(k, pp, "domain"), yp->domain, 0, p->domain, sizeof(p->domain));
	if (yp->domain && !is_cookie_value(p->domain, "/"))
		cfg_err_at(ld, k, AT_VALUE, "not a cookie domain");
	cfg_conv_str(ld, kp(k, pp, "path"), yp->path, 0, p->path, sizeof(p->path));
	if (yp->path && (p->path[0] != '/' || !is_cookie_value(p->path, "")))
		cfg_err_at(ld, k, AT_VALUE, "a cookie path starts with / and holds no blanks, quotes, "
			   "commas, semicolons or backslashes");
	cfg_conv_duration(ld, kp(k, pp, "ttl"), yp->ttl, 1000, &p->ttl_ms);
}
