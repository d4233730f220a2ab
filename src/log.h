/* Error log and access log. Each worker buffers access lines and writes them
 * in one write(2) per loop iteration (log_flush), so logging costs no extra
 * syscall per request under load. Files are opened O_APPEND so lines from
 * several workers never interleave within a line. */
#ifndef SLUICE_LOG_H
#define SLUICE_LOG_H

#include <stdint.h>
#include "reason-t.h"
#include "buf.h"

enum log_level { LOG_ERR, LOG_WARN, LOG_INFO };

/* (Re)open both logs; "stderr", "syslog" and "off" (access log only) are
 * special. "syslog" sends each line with syslog(3), ident "sluice", the pid
 * of the process, the facility last set with log_syslog_facility(). 
 * Returns 0, or -1 with a message on stderr. Safe to call again (SIGUSR1). */
int log_open(const char *error_path, const char *access_path);
/* "daemon" (the default), "user", "local0".."local7"; for the next log_open. */
void log_syslog_facility(const char *name);
/* The log files open now (-1: stderr, syslog or off): what the master
 * hands its workers on SIGUSR1 (logpass.h). */
void log_files(int *efd, int *afd);
/* Write to EFD/AFD from now on (-1 keeps that log as it is), closing the
 * files they replace. */
void log_adopt(int efd, int afd);
void log_close(void);
/* While on, error-level lines also go to stderr when the error log is a
 * file: -d keeps the starting terminal informed until the master detaches. */
void log_errors_to_stderr(int on);
/* Identifies the process in error lines ("master", "worker 1"). */
void log_set_role(const char *role);

void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define log_error(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)

int log_access_enabled(void);
/* Buffer where a worker composes one access line; log_access_commit ends it. */
struct buf *log_access_begin(void);
/* The same without the leading timestamp (JSON lines place it themselves). */
struct buf *log_access_begin_raw(void);
void log_access_commit(void);
void log_flush(void);

/* "2026-11-21T00:24:19.123456Z", cached per second. */
void log_timestamp(struct buf *b);

const char *reason_name(enum reason r);
int reason_status(enum reason r);
const char *reason_text(enum reason r);

#endif
