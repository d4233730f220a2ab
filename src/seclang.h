/* SecLang, the rule language of ModSecurity and the OWASP Core Rule Set:
 * rule files parsed into a rule list, nothing evaluated (issue 22). The
 * syntax is that of ModSecurity 2 under Apache httpd, the reference the
 * Core Rule Set is tested against: Apache's line continuation, quoting and
 * backslash rules, ModSecurity's action, target and operator grammar.
 *
 * Names are matched without regard to case, as ModSecurity does; every
 * directive, variable, operator, action and transformation the reference
 * defines is known, so an error can tell "not SecLang" from "not
 * supported by sluice" (seclang_check, by the engine that runs the rules).
 *
 * The configuration-time directives that change rules already loaded
 * (SecRuleRemoveById/ByTag/ByMsg, SecRuleUpdateTargetById/ByTag/ByMsg,
 * SecRuleUpdateActionById) are applied when they are read, to the rules
 * loaded before them, as ModSecurity 2 does. Reads files only for Include. */
#ifndef SLUICE_SECLANG_H
#define SLUICE_SECLANG_H

#include <stddef.h>
#include <stdint.h>

/* Variables (collections and scalars): name, and whether it is a
 * collection (takes a :selector). */
#define SL_VARS(X) \
	X(ARGS, "ARGS", 1) X(ARGS_COMBINED_SIZE, "ARGS_COMBINED_SIZE", 0) X(ARGS_GET, "ARGS_GET", 1) \
	X(ARGS_GET_NAMES, "ARGS_GET_NAMES", 1) X(ARGS_NAMES, "ARGS_NAMES", 1) X(ARGS_POST, "ARGS_POST", 1) \
	X(ARGS_POST_NAMES, "ARGS_POST_NAMES", 1) X(AUTH_TYPE, "AUTH_TYPE", 0) X(DURATION, "DURATION", 0) \
	X(ENV, "ENV", 1) X(FILES, "FILES", 1) X(FILES_COMBINED_SIZE, "FILES_COMBINED_SIZE", 0) \
	X(FILES_NAMES, "FILES_NAMES", 1) X(FILES_SIZES, "FILES_SIZES", 1) X(FILES_TMPNAMES, "FILES_TMPNAMES", 1) \
	X(FILES_TMP_CONTENT, "FILES_TMP_CONTENT", 1) X(FULL_REQUEST, "FULL_REQUEST", 0) \
	X(FULL_REQUEST_LENGTH, "FULL_REQUEST_LENGTH", 0) X(GEO, "GEO", 1) X(GLOBAL, "GLOBAL", 1) \
	X(HIGHEST_SEVERITY, "HIGHEST_SEVERITY", 0) X(INBOUND_DATA_ERROR, "INBOUND_DATA_ERROR", 0) \
	X(IP, "IP", 1) X(MATCHED_VAR, "MATCHED_VAR", 0) X(MATCHED_VARS, "MATCHED_VARS", 1) \
	X(MATCHED_VAR_NAME, "MATCHED_VAR_NAME", 0) X(MATCHED_VARS_NAMES, "MATCHED_VARS_NAMES", 1) \
	X(MODSEC_BUILD, "MODSEC_BUILD", 0) X(MSC_PCRE_LIMITS_EXCEEDED, "MSC_PCRE_LIMITS_EXCEEDED", 0) \
	X(MULTIPART_BOUNDARY_QUOTED, "MULTIPART_BOUNDARY_QUOTED", 0) \
	X(MULTIPART_BOUNDARY_WHITESPACE, "MULTIPART_BOUNDARY_WHITESPACE", 0) \
	X(MULTIPART_CRLF_LF_LINES, "MULTIPART_CRLF_LF_LINES", 0) \
	X(MULTIPART_DATA_AFTER, "MULTIPART_DATA_AFTER", 0) X(MULTIPART_DATA_BEFORE, "MULTIPART_DATA_BEFORE", 0) \
	X(MULTIPART_FILE_LIMIT_EXCEEDED, "MULTIPART_FILE_LIMIT_EXCEEDED", 0) \
	X(MULTIPART_FILENAME, "MULTIPART_FILENAME", 0) X(MULTIPART_HEADER_FOLDING, "MULTIPART_HEADER_FOLDING", 0) \
	X(MULTIPART_INVALID_HEADER_FOLDING, "MULTIPART_INVALID_HEADER_FOLDING", 0) \
	X(MULTIPART_INVALID_PART, "MULTIPART_INVALID_PART", 0) \
	X(MULTIPART_INVALID_QUOTING, "MULTIPART_INVALID_QUOTING", 0) \
	X(MULTIPART_LF_LINE, "MULTIPART_LF_LINE", 0) X(MULTIPART_MISSING_SEMICOLON, "MULTIPART_MISSING_SEMICOLON", 0) \
	X(MULTIPART_NAME, "MULTIPART_NAME", 0) X(MULTIPART_PART_HEADERS, "MULTIPART_PART_HEADERS", 1) \
	X(MULTIPART_STRICT_ERROR, "MULTIPART_STRICT_ERROR", 0) \
	X(MULTIPART_UNMATCHED_BOUNDARY, "MULTIPART_UNMATCHED_BOUNDARY", 0) \
	X(OUTBOUND_DATA_ERROR, "OUTBOUND_DATA_ERROR", 0) X(PATH_INFO, "PATH_INFO", 0) \
	X(QUERY_STRING, "QUERY_STRING", 0) X(REMOTE_ADDR, "REMOTE_ADDR", 0) X(REMOTE_HOST, "REMOTE_HOST", 0) \
	X(REMOTE_PORT, "REMOTE_PORT", 0) X(REMOTE_USER, "REMOTE_USER", 0) X(REQBODY_ERROR, "REQBODY_ERROR", 0) \
	X(REQBODY_ERROR_MSG, "REQBODY_ERROR_MSG", 0) X(REQBODY_PROCESSOR, "REQBODY_PROCESSOR", 0) \
	X(REQBODY_PROCESSOR_ERROR, "REQBODY_PROCESSOR_ERROR", 0) \
	X(REQUEST_BASENAME, "REQUEST_BASENAME", 0) X(REQUEST_BODY, "REQUEST_BODY", 0) \
	X(REQUEST_BODY_LENGTH, "REQUEST_BODY_LENGTH", 0) X(REQUEST_COOKIES, "REQUEST_COOKIES", 1) \
	X(REQUEST_COOKIES_NAMES, "REQUEST_COOKIES_NAMES", 1) X(REQUEST_FILENAME, "REQUEST_FILENAME", 0) \
	X(REQUEST_HEADERS, "REQUEST_HEADERS", 1) X(REQUEST_HEADERS_NAMES, "REQUEST_HEADERS_NAMES", 1) \
	X(REQUEST_LINE, "REQUEST_LINE", 0) X(REQUEST_METHOD, "REQUEST_METHOD", 0) \
	X(REQUEST_PROTOCOL, "REQUEST_PROTOCOL", 0) X(REQUEST_URI, "REQUEST_URI", 0) \
	X(REQUEST_URI_RAW, "REQUEST_URI_RAW", 0) X(RESPONSE_BODY, "RESPONSE_BODY", 0) \
	X(RESPONSE_CONTENT_LENGTH, "RESPONSE_CONTENT_LENGTH", 0) \
	X(RESPONSE_CONTENT_TYPE, "RESPONSE_CONTENT_TYPE", 0) X(RESPONSE_HEADERS, "RESPONSE_HEADERS", 1) \
	X(RESPONSE_HEADERS_NAMES, "RESPONSE_HEADERS_NAMES", 1) X(RESPONSE_PROTOCOL, "RESPONSE_PROTOCOL", 0) \
	X(RESPONSE_STATUS, "RESPONSE_STATUS", 0) X(RULE, "RULE", 1) X(SCRIPT_BASENAME, "SCRIPT_BASENAME", 0) \
	X(SCRIPT_FILENAME, "SCRIPT_FILENAME", 0) X(SERVER_ADDR, "SERVER_ADDR", 0) \
	X(SERVER_NAME, "SERVER_NAME", 0) X(SERVER_PORT, "SERVER_PORT", 0) X(SESSION, "SESSION", 1) \
	X(SESSIONID, "SESSIONID", 0) X(STATUS_LINE, "STATUS_LINE", 0) \
	X(STREAM_INPUT_BODY, "STREAM_INPUT_BODY", 0) X(STREAM_OUTPUT_BODY, "STREAM_OUTPUT_BODY", 0) \
	X(TIME, "TIME", 0) X(TIME_DAY, "TIME_DAY", 0) X(TIME_EPOCH, "TIME_EPOCH", 0) X(TIME_HOUR, "TIME_HOUR", 0) \
	X(TIME_MIN, "TIME_MIN", 0) X(TIME_MON, "TIME_MON", 0) X(TIME_SEC, "TIME_SEC", 0) \
	X(TIME_WDAY, "TIME_WDAY", 0) X(TIME_YEAR, "TIME_YEAR", 0) X(TX, "TX", 1) X(UNIQUE_ID, "UNIQUE_ID", 0) \
	X(URLENCODED_ERROR, "URLENCODED_ERROR", 0) X(USER, "USER", 1) X(USERAGENT_IP, "USERAGENT_IP", 0) \
	X(USERID, "USERID", 0) X(WEBAPPID, "WEBAPPID", 0) X(WEBSERVER_ERROR_LOG, "WEBSERVER_ERROR_LOG", 0) \
	X(XML, "XML", 1)

/* Operators: name, and whether an argument is required. */
#define SL_OPS(X) \
	X(BEGINS_WITH, "beginsWith", 1) X(CONTAINS, "contains", 1) X(CONTAINS_WORD, "containsWord", 1) \
	X(DETECT_SQLI, "detectSQLi", 0) X(DETECT_XSS, "detectXSS", 0) X(ENDS_WITH, "endsWith", 1) \
	X(EQ, "eq", 1) X(FUZZY_HASH, "fuzzyHash", 1) X(GE, "ge", 1) X(GEO_LOOKUP, "geoLookup", 0) \
	X(GSB_LOOKUP, "gsbLookup", 1) X(GT, "gt", 1) X(INSPECT_FILE, "inspectFile", 1) \
	X(IP_MATCH, "ipMatch", 1) X(IP_MATCH_FROM_FILE, "ipMatchFromFile", 1) X(IP_MATCH_F, "ipMatchF", 1) \
	X(LE, "le", 1) X(LT, "lt", 1) X(NO_MATCH, "noMatch", 0) X(PM, "pm", 1) X(PMF, "pmf", 1) \
	X(PM_FROM_FILE, "pmFromFile", 1) X(RBL, "rbl", 1) X(RSUB, "rsub", 1) X(RX, "rx", 1) \
	X(STREQ, "streq", 1) X(STRMATCH, "strmatch", 1) X(UNCONDITIONAL_MATCH, "unconditionalMatch", 0) \
	X(VALIDATE_BYTE_RANGE, "validateByteRange", 1) X(VALIDATE_DTD, "validateDTD", 1) \
	X(VALIDATE_HASH, "validateHash", 1) X(VALIDATE_SCHEMA, "validateSchema", 1) \
	X(VALIDATE_URL_ENCODING, "validateUrlEncoding", 0) X(VALIDATE_UTF8_ENCODING, "validateUtf8Encoding", 0) \
	X(VERIFY_CC, "verifyCC", 1) X(VERIFY_CPF, "verifyCPF", 1) X(VERIFY_SSN, "verifySSN", 1) \
	X(WITHIN, "within", 1)

/* Actions: name, and whether a value is required (1), optional (2) or
 * refused (0). */
#define SL_ACTS(X) \
	X(ACCURACY, "accuracy", 1) X(ALLOW, "allow", 2) X(APPEND, "append", 1) X(AUDITLOG, "auditlog", 0) \
	X(BLOCK, "block", 0) X(CAPTURE, "capture", 0) X(CHAIN, "chain", 0) X(CTL, "ctl", 1) X(DENY, "deny", 0) \
	X(DEPRECATEVAR, "deprecatevar", 1) X(DROP, "drop", 0) X(EXEC, "exec", 1) X(EXPIREVAR, "expirevar", 1) \
	X(ID, "id", 1) X(INITCOL, "initcol", 1) X(LOG, "log", 0) X(LOGDATA, "logdata", 1) \
	X(MATURITY, "maturity", 1) X(MSG, "msg", 1) X(MULTI_MATCH, "multiMatch", 0) \
	X(NOAUDITLOG, "noauditlog", 0) X(NOLOG, "nolog", 0) X(PASS, "pass", 0) X(PAUSE, "pause", 1) \
	X(PHASE, "phase", 1) X(PREPEND, "prepend", 1) X(PROXY, "proxy", 1) X(REDIRECT, "redirect", 1) \
	X(REV, "rev", 1) X(SANITISE_ARG, "sanitiseArg", 1) X(SANITISE_MATCHED, "sanitiseMatched", 0) \
	X(SANITISE_MATCHED_BYTES, "sanitiseMatchedBytes", 2) \
	X(SANITISE_REQUEST_HEADER, "sanitiseRequestHeader", 1) \
	X(SANITISE_RESPONSE_HEADER, "sanitiseResponseHeader", 1) X(SETENV, "setenv", 1) \
	X(SETRSC, "setrsc", 1) X(SETSID, "setsid", 1) X(SETUID, "setuid", 1) X(SETVAR, "setvar", 1) \
	X(SEVERITY, "severity", 1) X(SKIP, "skip", 1) X(SKIP_AFTER, "skipAfter", 1) X(STATUS, "status", 1) \
	X(T, "t", 1) X(TAG, "tag", 1) X(VER, "ver", 1) X(XMLNS, "xmlns", 1)

/* Transformations (t:...). */
#define SL_TFNS(X) \
	X(BASE64_DECODE, "base64Decode") X(BASE64_DECODE_EXT, "base64DecodeExt") \
	X(BASE64_ENCODE, "base64Encode") X(CMD_LINE, "cmdLine") X(COMPRESS_WHITESPACE, "compressWhitespace") \
	X(CSS_DECODE, "cssDecode") X(ESCAPE_SEQ_DECODE, "escapeSeqDecode") X(HEX_DECODE, "hexDecode") \
	X(HEX_ENCODE, "hexEncode") X(HTML_ENTITY_DECODE, "htmlEntityDecode") X(JS_DECODE, "jsDecode") \
	X(LENGTH, "length") X(LOWERCASE, "lowercase") X(MD5, "md5") X(NONE, "none") \
	X(NORMALISE_PATH, "normalisePath") X(NORMALIZE_PATH, "normalizePath") \
	X(NORMALISE_PATH_WIN, "normalisePathWin") X(NORMALIZE_PATH_WIN, "normalizePathWin") \
	X(PARITY_EVEN_7BIT, "parityEven7bit") X(PARITY_ODD_7BIT, "parityOdd7bit") \
	X(PARITY_ZERO_7BIT, "parityZero7bit") X(REMOVE_COMMENTS, "removeComments") \
	X(REMOVE_COMMENTS_CHAR, "removeCommentsChar") X(REMOVE_NULLS, "removeNulls") \
	X(REMOVE_WHITESPACE, "removeWhitespace") X(REPLACE_COMMENTS, "replaceComments") \
	X(REPLACE_NULLS, "replaceNulls") X(SHA1, "sha1") X(SQL_HEX_DECODE, "sqlHexDecode") \
	X(TRIM, "trim") X(TRIM_LEFT, "trimLeft") X(TRIM_RIGHT, "trimRight") X(UPPERCASE, "uppercase") \
	X(URL_DECODE, "urlDecode") X(URL_DECODE_UNI, "urlDecodeUni") X(URL_ENCODE, "urlEncode") \
	X(UTF8_TO_UNICODE, "utf8toUnicode")

#define SL_VAR_ENUM(id, ...) SL_VAR_##id,
#define SL_OP_ENUM(id, ...) SL_OP_##id,
#define SL_ACT_ENUM(id, ...) SL_ACT_##id,
#define SL_TFN_ENUM(id, ...) SL_TFN_##id,
enum sl_var { SL_VARS(SL_VAR_ENUM) SL_VAR__COUNT };
enum sl_op { SL_OPS(SL_OP_ENUM) SL_OP__COUNT };
enum sl_act { SL_ACTS(SL_ACT_ENUM) SL_ACT__COUNT };
enum sl_tfn { SL_TFNS(SL_TFN_ENUM) SL_TFN__COUNT };
#undef SL_VAR_ENUM
#undef SL_OP_ENUM
#undef SL_ACT_ENUM
#undef SL_TFN_ENUM

const char *seclang_var_name(enum sl_var v);
size_t seclang_var_name_len(enum sl_var v);
const char *seclang_op_name(enum sl_op o);
const char *seclang_act_name(enum sl_act a);
const char *seclang_tfn_name(enum sl_tfn t);
/* -1 when unknown (the comparison ignores case). */
int seclang_tfn_lookup(const char *name, size_t len);
int seclang_var_lookup(const char *name, size_t len);

enum sl_sel { SL_SEL_NONE, SL_SEL_NAME, SL_SEL_REGEX };

struct sl_target {
	uint8_t var;       /* enum sl_var */
	uint8_t exclude;   /* !VAR:sel: drop these from the rule's other targets */
	uint8_t count;     /* &VAR: the number of values */
	uint8_t sel_kind;  /* enum sl_sel */
	uint32_t sel_len;  /* strlen(sel): read for every target of every rule run */
	char *sel;         /* the name as written, or the regex between the slashes; XML: the XPath */
};

struct sl_action {
	uint8_t act;       /* enum sl_act */
	uint8_t tfn;       /* act == T: enum sl_tfn */
	uint8_t updated;   /* added by SecRuleUpdateActionById */
	char *value;       /* NULL when none; quotes and escapes removed */
};

enum sl_kind { SL_RULE, SL_ACTION, SL_MARKER };

struct sl_rule {
	uint8_t kind;      /* enum sl_kind */
	uint8_t phase;     /* 1..5; the chain starter's for chained rules */
	uint8_t op;        /* enum sl_op */
	uint8_t op_negated;
	uint8_t removed;   /* by SecRuleRemoveBy*: kept in the list, never run */
	uint32_t id;       /* 0 for chained rules and markers */
	char *op_arg;      /* "" when none; macros (%{...}) not expanded */
	char *marker;      /* SL_MARKER: its name */
	struct sl_target *targets;
	size_t ntargets;
	struct sl_action *actions;
	size_t nactions;
	int defaults;      /* index into seclang.defaults in force for its phase, -1 for none */
	struct sl_rule *chained;  /* the next rule of its chain */
	const char *file;  /* owned by the seclang files list */
	int line;
};

/* SecDefaultAction's list, as read. */
struct sl_defaults {
	uint8_t phase;
	struct sl_action *actions;
	size_t nactions;
};

/* A directive that configures the engine (SecRuleEngine On, ...), as read. */
struct sl_setting {
	char *name;        /* the directive as written */
	char *value;       /* its arguments joined by single spaces */
	const char *file;
	int line;
};

struct seclang {
	struct sl_rule **rules;        /* chain starters, SecActions and markers, in file order */
	size_t nrules, rules_cap;
	struct sl_defaults *defaults;
	size_t ndefaults;
	struct sl_setting *settings;
	size_t nsettings;
	char **files;                  /* every file read, in order */
	size_t nfiles;
	unsigned nwarnings;
	char warning[256];             /* the first warning */
	char error[512];               /* "file:line: what" */
	/* while loading */
	int include_depth;
	int allow_include;
	int default_idx[6];            /* per phase, the SecDefaultAction in force */
	struct sl_rule *chain_tail;    /* a rule that said `chain`, waiting for the next */
};

void seclang_init(struct seclang *sl);
/* Read PATH (and what it includes). Returns 0, or -1 with sl->error. */
int seclang_load_file(struct seclang *sl, const char *path);
/* Parse LEN bytes named NAME (for messages; relative Includes resolve
 * from its directory when ALLOW_INCLUDE). Returns 0 or -1 with sl->error. */
int seclang_load_buffer(struct seclang *sl, const char *name, const char *text, size_t len, int allow_include);
/* After the last file: a chain left open is an error. Returns 0 or -1. */
int seclang_finish(struct seclang *sl);
void seclang_free(struct seclang *sl);

/* The value of the rule's first action ACT, or NULL. */
const struct sl_action *seclang_action(const struct sl_rule *r, enum sl_act act);
/* allow, block, deny, drop, pass, proxy, redirect, pause */
int seclang_is_disruptive(enum sl_act act);
/* Does rule R carry tag TAG (exactly)? */
int seclang_has_tag(const struct sl_rule *r, const char *tag);

#endif
