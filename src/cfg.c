/* Configuration loading and validation.
 *
 * cfg_load() works in four passes over one in-memory copy of the file:
 *
 *  1. scan: libyaml's event parser walks the document once and records, for
 *     every key and sequence entry, its dotted path ("backends[0].name") and
 *     the line/column of the key and of the value. This pass also reports
 *     YAML syntax errors, duplicate keys and non-scalar keys, which libcyaml
 *     either reports without a position or not at all.
 *  2. load: libcyaml fills an intermediate tree (struct y_*) in which every
 *     leaf is a string. The schema rejects unknown keys, wrong node types,
 *     missing required keys and bad sequence lengths. libcyaml only logs
 *     those errors; cyaml_log_capture() collects the log and
 *     cyaml_error_report() turns the message and its backtrace into our
 *     "FILE:LINE:COL: KEY: message" form, using the pass 1 positions.
 *  3. convert: strings become numbers, durations, sizes and addresses, with
 *     defaults for absent keys and range checks.
 *  4. link: name uniqueness, listener -> backend references.
 *
 * Passes 3 and 4 report every error they find, not only the first one.
 * Leaves stay strings in pass 2 so that "2s" and "2000" are both durations
 * and every bad value gets the same kind of message, with a position.
 *
 * The passes and the entry points are here. The other cfg files:
 * cfg_schema.c (the pass 2 schema), cfg_value.c (value parsers, the error
 * sink and key positions, the converters every section shares),
 * cfg_listener.c and cfg_backend.c (pass 3 for listeners[] and backends[]);
 * cfg-int.h declares what they share. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cyaml/cyaml.h>
#include <yaml.h>

#include "cfg.h"
#include "cfg-int.h"
#include "inspect.h"
#include "privs.h"
#include "shdict.h"
#include "ratelimit.h"

#define CFG_FILE_MAX (4u << 20) /* refuse larger files: surely not a config */
#define CFG_DEPTH_MAX 32        /* deepest nesting the scanner accepts */
#define CFG_WORKERS_MAX 128

/* ------------------------------------------------------------------------ */
/* Key positions: pass 1 records them                                       */

/* A libyaml mark as the 1-based "line, column" argument pair. */
#define MARK(m) (unsigned)(m).line + 1, (unsigned)(m).column + 1

static int pos_add(struct cfg_load *ld, const char *path, const yaml_mark_t *key,
		   const yaml_event_t *val)
{
	struct cfg_pos *p;

	if (ld->npos == ld->cappos) {
		size_t ncap = ld->cappos ? ld->cappos * 2 : 64;
		p = realloc(ld->pos, ncap * sizeof(*p));
		if (p == NULL)
			return -1;
		ld->pos = p;
		ld->cappos = ncap;
	}
	p = &ld->pos[ld->npos];
	p->path = strdup(path);
	if (p->path == NULL)
		return -1;
	p->kline = (unsigned)key->line + 1;
	p->kcol = (unsigned)key->column + 1;
	p->vline = (unsigned)val->start_mark.line + 1;
	p->vcol = (unsigned)val->start_mark.column + 1;
	p->vempty = val->type == YAML_SCALAR_EVENT && val->data.scalar.length == 0 &&
		    val->data.scalar.plain_implicit;
	ld->npos++;
	return 0;
}

static void pos_free(struct cfg_load *ld)
{
	size_t i;

	for (i = 0; i < ld->npos; i++)
		free(ld->pos[i].path);
	free(ld->pos);
	ld->pos = NULL;
	ld->npos = ld->cappos = 0;
}

/* ------------------------------------------------------------------------ */
/* Pass 1: scan events, record positions, catch syntax errors and duplicates */

static int scan_next(struct cfg_load *ld, yaml_parser_t *parser, yaml_event_t *ev,
		     const char *path)
{
	if (yaml_parser_parse(parser, ev))
		return 0;
	if (parser->error == YAML_MEMORY_ERROR) {
		ld->oom = 1;
	} else if (parser->error == YAML_READER_ERROR) {
		/* Bad bytes or encoding: libyaml gives an offset, not a mark. */
		unsigned line = 1, col = 1;
		size_t i;
		for (i = 0; i < parser->problem_offset && i < ld->datalen; i++) {
			if (ld->data[i] == '\n') {
				line++;
				col = 1;
			} else if (((unsigned char)ld->data[i] & 0xc0) != 0x80) {
				col++; /* count characters, not UTF-8 continuation bytes */
			}
		}
		cfg_err_pos(ld, line, col, path, "bad character: %s (byte 0x%02x)",
			    parser->problem ? parser->problem : "unknown",
			    (unsigned)parser->problem_value & 0xff);
	} else if (parser->context != NULL)
		cfg_err_pos(ld, MARK(parser->problem_mark), path,
			    "syntax error: %s (%s at line %u, column %u)",
			    parser->problem ? parser->problem : "unknown", parser->context,
			    MARK(parser->context_mark));
	else
		cfg_err_pos(ld, MARK(parser->problem_mark), path, "syntax error: %s",
			    parser->problem ? parser->problem : "unknown");
	return -1;
}

/* Consumes the node that EV starts (EV is deleted here), whose path is PATH.
 * Returns 0, or -1 after reporting an error. */
static int scan_node(struct cfg_load *ld, yaml_parser_t *parser, yaml_event_t *ev,
		     const char *path, unsigned depth)
{
	char child[CFG_PATH_MAX];
	yaml_event_t k, v;
	size_t first, i;
	unsigned idx;
	int type = ev->type;

	if (type != YAML_SEQUENCE_START_EVENT && type != YAML_MAPPING_START_EVENT) {
		yaml_event_delete(ev); /* scalar or alias: a leaf */
		return 0;
	}
	if (depth >= CFG_DEPTH_MAX) {
		cfg_err_pos(ld, MARK(ev->start_mark), path, "nested too deeply");
		yaml_event_delete(ev);
		return -1;
	}
	yaml_event_delete(ev);

	if (type == YAML_SEQUENCE_START_EVENT) {
		for (idx = 0;; idx++) {
			if (scan_next(ld, parser, &v, path) < 0)
				return -1;
			if (v.type == YAML_SEQUENCE_END_EVENT) {
				yaml_event_delete(&v);
				return 0;
			}
			if (path_index(child, path, idx) < 0) {
				cfg_err_pos(ld, MARK(v.start_mark), path, "nested too deeply");
				yaml_event_delete(&v);
				return -1;
			}
			if (pos_add(ld, child, &v.start_mark, &v) < 0) {
				ld->oom = 1;
				yaml_event_delete(&v);
				return -1;
			}
			if (scan_node(ld, parser, &v, child, depth + 1) < 0)
				return -1;
		}
	}

	/* Mapping: the direct children of this mapping are the entries added
	 * from FIRST on whose path is exactly PATH.key; checking only those
	 * keeps duplicate detection linear in the mapping size. */
	first = ld->npos;
	for (;;) {
		if (scan_next(ld, parser, &k, path) < 0)
			return -1;
		if (k.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&k);
			return 0;
		}
		if (k.type != YAML_SCALAR_EVENT) {
			cfg_err_pos(ld, MARK(k.start_mark), path, "keys must be plain scalars");
			yaml_event_delete(&k);
			return -1;
		}
		if (path_child(child, path, (const char *)k.data.scalar.value) < 0) {
			cfg_err_pos(ld, MARK(k.start_mark), path, "key too long");
			yaml_event_delete(&k);
			return -1;
		}
		for (i = first; i < ld->npos; i++) {
			if (strcmp(ld->pos[i].path, child) == 0) {
				cfg_err_pos(ld, MARK(k.start_mark), child,
					    "duplicate key (first at line %u)", ld->pos[i].kline);
				yaml_event_delete(&k);
				return -1;
			}
		}
		if (scan_next(ld, parser, &v, child) < 0) {
			yaml_event_delete(&k);
			return -1;
		}
		if (pos_add(ld, child, &k.start_mark, &v) < 0) {
			ld->oom = 1;
			yaml_event_delete(&k);
			yaml_event_delete(&v);
			return -1;
		}
		yaml_event_delete(&k);
		if (scan_node(ld, parser, &v, child, depth + 1) < 0)
			return -1;
	}
}

/* Returns 0 when the file is well-formed YAML with a single document (or
 * none), else -1 after reporting. */
static int scan_file(struct cfg_load *ld, const char *data, size_t len)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	int ndocs = 0, rc = -1;

	if (!yaml_parser_initialize(&parser)) {
		ld->oom = 1;
		return -1;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
	for (;;) {
		if (scan_next(ld, &parser, &ev, "") < 0)
			break;
		if (ev.type == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			rc = 0;
			break;
		}
		if (ev.type == YAML_DOCUMENT_START_EVENT && ++ndocs > 1) {
			cfg_err_pos(ld, MARK(ev.start_mark), "",
				    "only one YAML document is allowed");
			yaml_event_delete(&ev);
			break;
		}
		if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT ||
		    ev.type == YAML_SCALAR_EVENT || ev.type == YAML_ALIAS_EVENT) {
			if (pos_add(ld, "", &ev.start_mark, &ev) < 0) {
				ld->oom = 1;
				yaml_event_delete(&ev);
				break;
			}
			if (scan_node(ld, &parser, &ev, "", 0) < 0)
				break;
			continue;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&parser);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Pass 2: libcyaml, with its log captured and translated                    */

struct cyaml_log_buf {
	char text[8192];
	size_t len;
};

static void cyaml_log_capture(cyaml_log_t level, void *ctx, const char *fmt, va_list args)
{
	struct cyaml_log_buf *lb = ctx;
	size_t room = sizeof(lb->text) - lb->len;
	int n;

	if (level < CYAML_LOG_ERROR || room <= 1)
		return;
	n = vsnprintf(lb->text + lb->len, room, fmt, args);
	if (n > 0)
		lb->len += (size_t)n < room ? (size_t)n : room - 1;
}

/* One backtrace line: "in mapping field 'K'", "in mapping" or
 * "in sequence entry 'N'" (N counts entries, so the index is N - 1). */
struct cy_frame {
	enum { FR_FIELD, FR_MAP, FR_SEQ } kind;
	char key[CFG_NAME_MAX];
	unsigned n;
	size_t line, col;
};

#define CY_FRAMES_MAX 16

static const char *cyaml_type_text(const char *t)
{
	if (strcmp(t, "STRING") == 0 || strcmp(t, "SCALAR") == 0)
		return "a scalar value";
	if (strcmp(t, "MAPPING") == 0 || strcmp(t, "MAPPING_START") == 0)
		return "a mapping";
	if (strcmp(t, "SEQUENCE") == 0 || strcmp(t, "SEQUENCE_START") == 0)
		return "a list";
	return t;
}

/* Reports libcyaml's error from its captured log LOG. The first "Load: "
 * line is the message; the backtrace lists the frames innermost first. The
 * dotted path is rebuilt from the frames and positioned with pass 1's
 * index, which is more precise than libcyaml's own marks (those are kept as
 * a fallback when the path is unknown). */
static void cyaml_error_report(struct cfg_load *ld, const char *log, cyaml_err_t rc)
{
	struct cy_frame fr[CY_FRAMES_MAX];
	char msg[256] = "", path[CFG_PATH_MAX] = "", key[CFG_PATH_MAX] = "", a[32], b[32];
	unsigned nfr = 0, skip = 0, u1, u2, i;
	const char *p, *eol;
	const struct cfg_pos *vp;
	int at = AT_VALUE, missing = 0, type_err = 0;

	for (p = log; *p; p = *eol ? eol + 1 : eol) {
		struct cy_frame *f = &fr[nfr];
		eol = strchr(p, '\n');
		if (eol == NULL)
			eol = p + strlen(p);
		if (strncmp(p, "Load: ", 6) == 0 && strncmp(p, "Load: Backtrace:", 16) != 0) {
			if (msg[0] == '\0')
				snprintf(msg, sizeof(msg), "%.*s", (int)(eol - p - 6), p + 6);
			continue;
		}
		if (nfr == CY_FRAMES_MAX)
			continue;
		f->line = f->col = 0;
		f->n = 0;
		if (sscanf(p, "  in mapping field '%63[^']' (line: %zu, column: %zu)", f->key,
			   &f->line, &f->col) >= 1) {
			f->kind = FR_FIELD;
			nfr++;
		} else if (sscanf(p, "  in sequence entry '%u' (line: %zu, column: %zu)", &f->n,
				  &f->line, &f->col) >= 1) {
			f->kind = FR_SEQ;
			nfr++;
		} else if (strncmp(p, "  in mapping", 12) == 0) {
			f->key[0] = '\0';
			if (sscanf(p, "  in mapping (line: %zu, column: %zu)", &f->line, &f->col) != 2)
				f->line = f->col = 0;
			f->kind = FR_MAP;
			nfr++;
		}
	}

	/* Say it our way; decide whether the innermost frame belongs in the
	 * path and whether a key name from the message must be appended. */
	if (sscanf(msg, "Unexpected key: %255[^\n]", key) == 1) {
		snprintf(msg, sizeof(msg), "unknown key");
		at = AT_KEY;
	} else if (sscanf(msg, "Missing required mapping field: %255[^\n]", key) == 1) {
		/* The innermost frame is the mapping being closed, labelled
		 * with whichever field it saw last: not part of the path. */
		snprintf(msg, sizeof(msg), "missing required key");
		skip = nfr > 0 && fr[0].kind != FR_SEQ;
		missing = 1;
	} else if (sscanf(msg, "Mapping field already seen: %255[^\n]", key) == 1) {
		snprintf(msg, sizeof(msg), "duplicate key");
		skip = nfr > 0 && fr[0].kind == FR_FIELD;
		at = AT_KEY;
	} else if (sscanf(msg, "Expecting %31[A-Z_], got event: %31[A-Z_]", a, b) == 2) {
		snprintf(msg, sizeof(msg), "expected %s, got %s", cyaml_type_text(a),
			 cyaml_type_text(b));
		type_err = 1;
	} else if (sscanf(msg, "Insufficient entries (%u of %u min)", &u1, &u2) == 2) {
		snprintf(msg, sizeof(msg), "needs at least %u entr%s", u2, u2 == 1 ? "y" : "ies");
		skip = nfr > 0 && fr[0].kind == FR_SEQ;
	} else if (sscanf(msg, "Excessive entries (%u max)", &u1) == 1) {
		snprintf(msg, sizeof(msg), "too many entries (at most %u)", u1);
		skip = nfr > 0 && fr[0].kind == FR_SEQ;
	} else if (sscanf(msg, "No anchor found for alias: '%200[^']'", key) == 1) {
		snprintf(msg, sizeof(msg), "undefined alias \"*%.200s\"", key);
		key[0] = '\0'; /* a value, not a key to append to the path */
	} else if (msg[0] == '\0') {
		snprintf(msg, sizeof(msg), "%s", cyaml_strerror(rc));
	}

	/* Frames are innermost first: build the path from the last one. */
	for (i = nfr; i > skip; i--) {
		const struct cy_frame *f = &fr[i - 1];
		char num[16];
		if (f->kind == FR_FIELD) {
			path_child(path, path, f->key);
		} else if (f->kind == FR_SEQ && f->n > 0) {
			snprintf(num, sizeof(num), "[%u]", f->n - 1);
			path_join(path, path, "", num);
		}
	}

	if (missing) {
		/* No position of its own: point at the mapping that lacks it. */
		unsigned line, col;
		cfg_pos_lookup(ld, path, AT_VALUE, &line, &col);
		path_child(path, path, key);
		cfg_err_pos(ld, line, col, path, "%s", msg);
		return;
	}
	if (key[0] != '\0')
		path_child(path, path, key);

	vp = cfg_pos_find(ld, path);
	if (type_err && vp != NULL && vp->vempty)
		snprintf(msg, sizeof(msg), "expected %s, got an empty value", cyaml_type_text(a));
	if (vp == NULL && nfr > 0 && fr[0].line > 0) {
		/* Not in the index (inside an alias, say): libcyaml's mark. */
		cfg_err_pos(ld, (unsigned)fr[0].line, (unsigned)fr[0].col, path, "%s", msg);
		return;
	}
	cfg_err_at(ld, path, at, "%s", msg);
}

/* ------------------------------------------------------------------------ */
/* Pass 3: the top level (sections: cfg_listener.c, cfg_backend.c)          */

/* user/group are account names, resolved now so that `sluice -t` catches a
 * typo before a reload would start workers that cannot switch. */
static void conv_user(struct cfg_load *ld, const struct y_root *y, struct cfg *c)
{
	if (y->group != NULL && y->user == NULL) {
		cfg_err_at(ld, "group", AT_KEY, "needs `user:` (the account workers switch to)");
		return;
	}
	if (y->user == NULL)
		return;
	cfg_conv_str(ld, "user", y->user, 0, c->user, sizeof(c->user));
	cfg_conv_str(ld, "group", y->group, 0, c->group, sizeof(c->group));
	if (c->user[0] == '\0' || (y->group != NULL && c->group[0] == '\0'))
		return;
	char why[160];
	uid_t uid;
	gid_t gid;
	if (privs_lookup(c->user, NULL, &uid, &gid, why, sizeof(why)) < 0) {
		cfg_err_at(ld, "user", AT_VALUE, "%s", why);
		return;
	}
	if (c->group[0] && privs_lookup(c->user, c->group, &uid, &gid, why, sizeof(why)) < 0) {
		cfg_err_at(ld, "group", AT_VALUE, "%s", why);
		return;
	}
	if (c->group[0] && uid == 0) {
		/* Root workers switch nothing; a group here would be ignored. */
		cfg_err_at(ld, "group", AT_KEY, "applies only with a user other than root");
		return;
	}
	c->uid = uid;
	c->gid = gid;
}

static int conv_root(struct cfg_load *ld, const struct y_root *y, struct cfg *c)
{
	char k[CFG_PATH_MAX];
	unsigned i;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	c->workers = ncpu < 1 ? 1 : ncpu > CFG_WORKERS_MAX ? CFG_WORKERS_MAX : (unsigned)ncpu;
	snprintf(c->error_log, sizeof(c->error_log), "stderr");
	snprintf(c->access_log, sizeof(c->access_log), "stderr");
	c->timeouts.client_header_ms = 10000;
	c->timeouts.client_keepalive_ms = 60000;
	c->timeouts.client_body_ms = 30000;
	c->timeouts.client_send_ms = 60000;
	c->timeouts.drain_ms = 10000;
	c->limits.max_request_line = 8192;
	c->limits.max_header_size = 32768;
	c->limits.max_headers = 100;
	c->limits.max_body_size = 0;
	c->limits.max_connections = 100000;
	c->limits.rate_limit_entries = 65536;

	{
		uint32_t w = c->workers;
		cfg_conv_uint(ld, "workers", y->workers, 1, CFG_WORKERS_MAX, &w);
		c->workers = w;
	}
	c->instances = 1;
	cfg_conv_uint(ld, "instances", y->instances, 1, 1024, &c->instances);
	cfg_conv_str(ld, "error_log", y->error_log, 0, c->error_log, sizeof(c->error_log));
	if (strcmp(c->error_log, "off") == 0)
		cfg_err_at(ld, "error_log", AT_VALUE, "cannot be off (use stderr or a file path)");
	cfg_conv_str(ld, "access_log", y->access_log, 0, c->access_log, sizeof(c->access_log));
	cfg_conv_str(ld, "pid_file", y->pid_file, 1, c->pid_file, sizeof(c->pid_file));
	snprintf(c->syslog_facility, sizeof(c->syslog_facility), "daemon");
	if (y->syslog_facility != NULL) {
		static const char *const facilities[] = { "daemon", "user", "local0", "local1", "local2",
							  "local3", "local4", "local5", "local6", "local7" };
		int ok = 0;
		for (size_t f = 0; f < sizeof(facilities) / sizeof(facilities[0]); f++)
			ok |= strcmp(y->syslog_facility, facilities[f]) == 0;
		if (ok)
			snprintf(c->syslog_facility, sizeof(c->syslog_facility), "%s", y->syslog_facility);
		else
			cfg_err_at(ld, "syslog_facility", AT_VALUE,
				   "unknown facility \"%.40s\" (expected daemon, user or local0..local7)",
				   y->syslog_facility);
	}
	conv_user(ld, y, c);
	if (y->access_log_format != NULL) {
		if (strcmp(y->access_log_format, "text") == 0)
			c->access_log_format = CFG_LOG_TEXT;
		else if (strcmp(y->access_log_format, "json") == 0)
			c->access_log_format = CFG_LOG_JSON;
		else
			cfg_err_at(ld, "access_log_format", AT_VALUE, "unknown format \"%.40s\" (expected text or json)",
				   y->access_log_format);
	}
	c->inspection = 1;
	if (y->inspection != NULL)
		cfg_conv_bool(ld, "inspection", y->inspection, &c->inspection);
	c->lua_memory_max = 64u << 20;
	cfg_conv_size(ld, "lua_memory_max", y->lua_memory_max, 1u << 20, 1ull << 40, &c->lua_memory_max);
	ld->lua_memory_max = c->lua_memory_max;
	c->lua_shared_memory = SHDICT_SIZE_DEFAULT;
	cfg_conv_size(ld, "lua_shared_memory", y->lua_shared_memory, SHDICT_SIZE_MIN, SHDICT_SIZE_MAX,
		      &c->lua_shared_memory);
	if (y->admin != NULL) {
		c->admin.enabled = 1;
		if (y->admin->address != NULL)
			cfg_conv_addr(ld, "admin.address", y->admin->address, &c->admin.addr);
		else
			cfg_parse_addr("127.0.0.1:9901", &c->admin.addr);
		cfg_conv_str(ld, "admin.token", y->admin->token, 1, c->admin.token, sizeof(c->admin.token));
	}

	if (y->timeouts != NULL) {
		const struct y_timeouts *t = y->timeouts;
		cfg_conv_duration(ld, "timeouts.client_header", t->client_header, 1,
				  &c->timeouts.client_header_ms);
		cfg_conv_duration(ld, "timeouts.client_keepalive", t->client_keepalive, 1,
				  &c->timeouts.client_keepalive_ms);
		cfg_conv_duration(ld, "timeouts.client_body", t->client_body, 1,
				  &c->timeouts.client_body_ms);
		cfg_conv_duration(ld, "timeouts.client_send", t->client_send, 1,
				  &c->timeouts.client_send_ms);
		cfg_conv_duration(ld, "timeouts.drain", t->drain, 0, &c->timeouts.drain_ms);
		cfg_conv_duration(ld, "timeouts.drain_notice", t->drain_notice, 0, &c->timeouts.drain_notice_ms);
		/* Minutes where seconds were meant would hold every stop that long. */
		if (c->timeouts.drain_notice_ms > CFG_DRAIN_NOTICE_MAX_MS)
			cfg_err_at(ld, "timeouts.drain_notice", AT_VALUE, "%ums is too long (at most 10m): a stop "
				   "waits this long before it closes the listeners", (unsigned)c->timeouts.drain_notice_ms);
	}
	if (y->limits != NULL) {
		const struct y_limits *m = y->limits;
		cfg_conv_size32(ld, "limits.max_request_line", m->max_request_line,
				&c->limits.max_request_line);
		cfg_conv_size32(ld, "limits.max_header_size", m->max_header_size,
				&c->limits.max_header_size);
		cfg_conv_uint(ld, "limits.max_headers", m->max_headers, 1, UINT32_MAX,
			      &c->limits.max_headers);
		cfg_conv_size(ld, "limits.max_body_size", m->max_body_size, 0, UINT64_MAX,
			      &c->limits.max_body_size);
		cfg_conv_uint(ld, "limits.max_connections", m->max_connections, 1, UINT32_MAX,
			      &c->limits.max_connections);
		cfg_conv_uint(ld, "limits.rate_limit_entries", m->rate_limit_entries, RL_ENTRIES_MIN,
			      RL_ENTRIES_MAX, &c->limits.rate_limit_entries);
	}

	if (y->redis != NULL)
		cfg_conv_redis(ld, y->redis, &c->redis);
	c->backends = calloc(y->backends_count, sizeof(*c->backends));
	c->listeners = calloc(y->listeners_count, sizeof(*c->listeners));
	if (c->backends == NULL || c->listeners == NULL)
		return -1;
	c->nbackends = y->backends_count;
	c->nlisteners = y->listeners_count;
	for (i = 0; i < c->nbackends; i++) {
		path_index(k, "backends", i);
		if (cfg_conv_backend(ld, k, &y->backends[i], &c->backends[i]) < 0)
			return -1;
		/* A share of 0 connections could never serve: rounding it up
		 * instead would let the tier exceed the server's threads. */
		for (unsigned j = 0; j < c->backends[i].nservers; j++)
			if (c->backends[i].servers[j].max_connections < c->instances) {
				char sk[CFG_PATH_MAX];
				snprintf(sk, sizeof(sk), "%s.servers[%u].max_connections", k, j);
				cfg_err_at(ld, sk, AT_VALUE, "%u is below instances (%u): each instance "
					   "needs a share of at least 1", c->backends[i].servers[j].max_connections,
					   c->instances);
			}
	}
	inspect_check_begin();
	for (i = 0; i < c->nlisteners; i++) {
		path_index(k, "listeners", i);
		if (cfg_conv_listener(ld, k, i, &y->listeners[i], &c->listeners[i]) < 0) {
			inspect_check_end();
			return -1;
		}
	}
	inspect_check_end();
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Pass 4: cross references                                                  */

static int addr_equal(const struct cfg_addr *a, const struct cfg_addr *b)
{
	return a->len == b->len && memcmp(&a->ss, &b->ss, a->len) == 0;
}

/* Path of a name for error messages: the "name" key when it was written,
 * else the entry itself (the name was a default). */
static const char *name_path(char *buf, const char *entry, const char *written)
{
	return written != NULL ? kp(buf, entry, "name") : entry;
}

static unsigned entry_line(const struct cfg_load *ld, const char *entry)
{
	unsigned line, col;

	cfg_pos_lookup(ld, entry, AT_KEY, &line, &col);
	return line;
}

static void link_root(struct cfg_load *ld, const struct y_root *y, struct cfg *c)
{
	char e1[CFG_PATH_MAX], e2[CFG_PATH_MAX], k[CFG_PATH_MAX], s1[CFG_PATH_MAX];
	unsigned i, j, n;

	for (i = 0; i < c->nbackends; i++) {
		const struct cfg_backend *b = &c->backends[i];
		path_index(e1, "backends", i);
		for (j = 0; j < i; j++) {
			if (b->name[0] && strcmp(b->name, c->backends[j].name) == 0) {
				path_index(e2, "backends", j);
				cfg_err_at(ld, name_path(k, e1, y->backends[i].name), AT_VALUE,
					   "duplicate backend name \"%s\" (first at line %u)",
					   b->name, entry_line(ld, e2));
				break;
			}
		}
		for (n = 0; n < b->nservers; n++) {
			const char *written = y->backends[i].servers[n].name;
			path_index(e2, kp(s1, e1, "servers"), n);
			for (j = 0; j < n; j++) {
				if (strcmp(b->servers[n].name, b->servers[j].name) == 0) {
					char e3[CFG_PATH_MAX];
					path_index(e3, s1, j);
					cfg_err_at(ld, name_path(k, e2, written), AT_VALUE,
						   "duplicate server name \"%s\" (first at line %u)",
						   b->servers[n].name, entry_line(ld, e3));
					break;
				}
			}
		}
	}

	for (i = 0; i < c->nlisteners; i++) {
		struct cfg_listener *l = &c->listeners[i];
		path_index(e1, "listeners", i);
		for (j = 0; j < i; j++) {
			path_index(e2, "listeners", j);
			if (strcmp(l->name, c->listeners[j].name) == 0) {
				cfg_err_at(ld, name_path(k, e1, y->listeners[i].name), AT_VALUE,
					   "duplicate listener name \"%s\" (first at line %u)",
					   l->name, entry_line(ld, e2));
			}
			if (l->addr.len != 0 && addr_equal(&l->addr, &c->listeners[j].addr)) {
				cfg_err_at(ld, kp(k, e1, "address"), AT_VALUE,
					   "same address as %s (line %u)", e2, entry_line(ld, e2));
			}
		}
		if (c->admin.enabled && c->admin.addr.len != 0 && l->addr.len != 0 && addr_equal(&l->addr, &c->admin.addr))
			cfg_err_at(ld, "admin.address", AT_VALUE, "same address as %s (line %u)", e1, entry_line(ld, e1));
		cfg_resolve_routes(ld, e1, c, l);
		cfg_link_rate_limits(ld, e1, c, l);
		if (l->backend_name[0] == '\0')
			continue; /* already reported */
		for (j = 0; j < c->nbackends; j++) {
			if (strcmp(l->backend_name, c->backends[j].name) == 0) {
				l->backend = &c->backends[j];
				break;
			}
		}
		if (l->backend == NULL) {
			char known[256] = "";
			size_t used = 0;
			for (j = 0; j < c->nbackends && used < sizeof(known); j++)
				if (c->backends[j].name[0] != '\0')
					used += (size_t)snprintf(known + used, sizeof(known) - used,
								 "%s%s", used ? ", " : "",
								 c->backends[j].name);
			cfg_err_at(ld, kp(k, e1, "backend"), AT_VALUE, "unknown backend \"%s\"%s%s%s",
				   l->backend_name, known[0] ? " (defined: " : "", known,
				   known[0] ? ")" : "");
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */

/* Reads PATH whole into a NUL-terminated heap buffer. */
static char *file_read(struct cfg_load *ld, const char *path, size_t *lenp)
{
	char *buf = NULL, *nbuf;
	size_t len = 0, cap = 0;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		cfg_err_add(ld, 0, 0, "%s: cannot open: %s", path, strerror(errno));
		return NULL;
	}
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 16384;
			if (cap > CFG_FILE_MAX + 1)
				cap = CFG_FILE_MAX + 1;
			if (len + 1 >= cap) {
				cfg_err_add(ld, 0, 0, "%s: cannot read: file larger than %u bytes", path,
					    CFG_FILE_MAX);
				goto fail;
			}
			nbuf = realloc(buf, cap);
			if (nbuf == NULL) {
				cfg_err_add(ld, 0, 0, "%s: cannot read: %s", path, strerror(ENOMEM));
				goto fail;
			}
			buf = nbuf;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			cfg_err_add(ld, 0, 0, "%s: cannot read: %s", path, strerror(errno));
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	*lenp = len;
	return buf;
fail:
	close(fd);
	free(buf);
	return NULL;
}

struct cfg *cfg_load(const char *path, char *err, size_t errlen)
{
	struct cfg_load ld = { .file = path };
	struct cyaml_log_buf *lb = NULL;
	cyaml_config_t cy = {
		.log_fn = cyaml_log_capture,
		.mem_fn = cyaml_mem,
		.log_level = CYAML_LOG_ERROR,
		.flags = CYAML_CFG_DEFAULT,
	};
	struct y_root *y = NULL;
	struct cfg *c = NULL;
	char *data = NULL;
	size_t len = 0;
	cyaml_err_t rc;

	data = file_read(&ld, path, &len);
	if (data == NULL)
		goto out;
	ld.data = data;
	ld.datalen = len;
	if (scan_file(&ld, data, len) < 0)
		goto out;

	lb = calloc(1, sizeof(*lb));
	if (lb == NULL) {
		ld.oom = 1;
		goto out;
	}
	cy.log_ctx = lb;
	rc = cyaml_load_data((const uint8_t *)data, len, &cy, &cfg_root_schema,
			     (cyaml_data_t **)&y, NULL);
	if (rc == CYAML_ERR_OOM) {
		ld.oom = 1;
		goto out;
	}
	if (rc != CYAML_OK) {
		/* libcyaml has freed its partial tree and left Y NULL. */
		cyaml_error_report(&ld, lb->text, rc);
		goto out;
	}
	if (y == NULL) {
		/* An empty document, or only comments. */
		cfg_err_at(&ld, "listeners", AT_KEY, "missing required key");
		cfg_err_at(&ld, "backends", AT_KEY, "missing required key");
		goto out;
	}

	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		ld.oom = 1;
		goto out;
	}
	if (strlen(path) >= sizeof(c->path)) {
		cfg_err_add(&ld, 0, 0, "%s: cannot open: %s", path, strerror(ENAMETOOLONG));
		goto out;
	}
	memcpy(c->path, path, strlen(path) + 1);
	if (conv_root(&ld, y, c) < 0)
		ld.oom = 1;
	else
		link_root(&ld, y, c);
out:
	if (cfg_err_flush(&ld, err, errlen) > 0) {
		cfg_free(c);
		c = NULL;
	}
	if (y != NULL)
		cyaml_free(&cy, &cfg_root_schema, y, 0);
	free(lb);
	pos_free(&ld);
	free(data);
	return c;
}

void cfg_free(struct cfg *cfg)
{
	unsigned i;

	if (cfg == NULL)
		return;
	if (cfg->backends != NULL)
		for (i = 0; i < cfg->nbackends; i++)
			free(cfg->backends[i].servers);
	free(cfg->backends);
	if (cfg->listeners != NULL)
		for (i = 0; i < cfg->nlisteners; i++) {
			free(cfg->listeners[i].tls.certs);
			free(cfg->listeners[i].proxy_from);
			free(cfg->listeners[i].trusted_forwarders);
			cfg_free_routes(&cfg->listeners[i]);
		}
	free(cfg->listeners);
	free(cfg);
}
