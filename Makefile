# sluice — plain Makefile. Targets: all (default), run, test, asan, test-asan,
# unit, bench (the whole bench suite), bench-<scenario>, bench-smoke, clean.
# Feature switches are make variables.

CC      ?= gcc
# TLS library: awslc (the default: AWS-LC, built as static libraries by the
# aws-lc-sys crate: tls/awslc/build.sh, into $(AWSLC_DIR), kept between
# builds) or openssl (Debian libssl-dev, OpenSSL 3: the distribution build).
# AWS-LC is the default because it is the cheapest per handshake, per
# resumption and per keepalive request in `make bench-tls`; the figures that
# decided it are in docs/architecture.md ("Which TLS library").
TLS_DEFAULT = awslc
TLS     ?= $(TLS_DEFAULT)
AWSLC_DIR ?= build-awslc-lib
TLS_DEP  =
ifeq ($(TLS),openssl)
  TLS_CFLAGS =
  TLS_LIBS   = -lssl -lcrypto
else ifeq ($(TLS),awslc)
  # The crate's headers always include its symbol-prefix map; its libraries
  # are built unprefixed (AWS_LC_SYS_NO_PREFIX), so the map is switched off
  # by defining its include guard.
  TLS_CFLAGS = -I$(AWSLC_DIR)/include -DBORINGSSL_PREFIX_SYMBOLS_H
  TLS_LIBS   = $(AWSLC_DIR)/lib/libssl.a $(AWSLC_DIR)/lib/libcrypto.a -Wl,--wrap=free
  TLS_DEP    = $(AWSLC_DIR)/.stamp
  # free(NULL) made cheap for the static libraries (src/alloc.c says why)
  TLS_CFLAGS += -DSLUICE_WRAP_FREE
else
  $(error TLS must be awslc or openssl)
endif
# libinjection's checks for the CRS engine's @detectSQLi/@detectXSS: Debian
# does not package libinjection, so cargo builds the crates registry's Rust
# port behind a C ABI (crs/libinjection/build.sh), once, into $(INJ_DIR).
INJ_DIR ?= build-libinjection-lib
INJ_LIBS = $(INJ_DIR)/libsluice_libinjection.a -lgcc_s -lutil -lrt -ldl
TLS_SUFFIX = $(if $(filter $(TLS),$(TLS_DEFAULT)),,-$(TLS))
BUILD   ?= build$(TLS_SUFFIX)
O       ?= -O2
WARN     = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wwrite-strings
# llhttp strict mode: the checks (CRLF line ends, token header names, chunk
# CRLF) a proxy must not be lenient about. Our code sees the same define.
LLHTTP_DEFS = -DLLHTTP_STRICT_MODE=1
CFLAGS_BASE = -std=c11 $(O) -g $(WARN) -D_GNU_SOURCE $(LLHTTP_DEFS) $(STATS_DEF) $(TLS_CFLAGS) -I/usr/share/include/llhttp -I/usr/include/lua5.4 -I/usr/include/libxml2 -Isrc
LIBS_BASE = -luv -lhiredis -lcyaml -lyaml $(TLS_LIBS) -llua5.4 -lpcre2-8 -lhs -lnghttp2 -lxml2 $(INJ_LIBS) -lpthread -lm
# STATS=0 compiles the statistics calls out (for measuring what they cost:
# make bench-stats); never for production.
STATS ?= 1
ifeq ($(STATS),0)
  BUILD     = build-nostats$(TLS_SUFFIX)
  STATS_DEF = -DSLUICE_NO_STATS
endif
SANITIZE ?=
ifeq ($(SANITIZE),1)
  BUILD    = build-asan$(TLS_SUFFIX)
  XCFLAGS  = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  ALLOC    =
else ifeq ($(MALLOC),libc)
  # For valgrind (make valgrind): libc malloc, no sanitizer.
  BUILD    = build-libc$(TLS_SUFFIX)
  XCFLAGS  =
  ALLOC    =
else
  XCFLAGS  = -DHAVE_JEMALLOC
  ALLOC    = -ljemalloc
endif
CFLAGS  = $(CFLAGS_BASE) $(XCFLAGS)
LDFLAGS = $(XCFLAGS)
LIBS    = $(LIBS_BASE) $(ALLOC)

LLHTTP_DIR = /usr/share/llhttp
LLHTTP_OBJ = $(BUILD)/llhttp/api.o $(BUILD)/llhttp/http.o $(BUILD)/llhttp/llhttp.o
# On x86-64, llhttp.c is compiled a second time with SSE4.2 and the CPU picks
# one at start-up (src/llhttp_simd.c says why).
ifneq ($(findstring x86_64,$(shell $(CC) -dumpmachine)),)
  LLHTTP_SIMD = 1
  LLHTTP_OBJ += $(BUILD)/llhttp/llhttp_sse42.o
  CFLAGS_BASE += -DSLUICE_LLHTTP_SIMD
endif

SRC  = $(wildcard src/*.c)
OBJ  = $(patsubst src/%.c,$(BUILD)/%.o,$(SRC)) $(BUILD)/dashboard.o
LIB_OBJ = $(filter-out $(BUILD)/main.o,$(OBJ))
UNIT_SRC = $(wildcard tests/unit/test_*.c)
UNIT_BIN = $(patsubst tests/unit/%.c,$(BUILD)/unit/%,$(UNIT_SRC))

DEB_BUILD_PKGS = gcc make pkg-config openssl libuv1-dev node-llhttp libssl-dev cmake libclang-dev \
                 liblua5.4-dev libjemalloc-dev libcyaml-dev libyaml-dev libpcre2-dev libhyperscan-dev libnghttp2-dev \
                 libxml2-dev modsecurity-crs libhiredis-dev
DEB_TEST_PKGS  = curl wrk haproxy nginx nghttp2-client python3-h2 openssl python3 python3-pip python3-prometheus-client chromium \
                 logrotate systemd tomcat10 modsecurity-crs apache2 libapache2-mod-security2 redis-server

.PHONY: all run test unit e2e e2e-tls asan test-asan fuzz fuzz-smoke soak valgrind deps test-deps bench bench-smoke bench-offload bench-inspection bench-churn \
        bench-throughput bench-memory bench-reuse bench-core bench-persist bench-tls bench-h2 bench-identity bench-stats bench-crs \
        install deb clean
all: $(BUILD)/sluice $(BUILD)/demo_backend $(BUILD)/crs_replay

# AWS-LC, once (cargo keeps its build in $(AWSLC_DIR)/target).
$(AWSLC_DIR)/.stamp: tls/awslc/Cargo.toml tls/awslc/Cargo.lock tls/awslc/build.rs tls/awslc/build.sh
	sh tls/awslc/build.sh $(AWSLC_DIR)

$(INJ_DIR)/.stamp: crs/libinjection/Cargo.toml crs/libinjection/Cargo.lock crs/libinjection/src/lib.rs crs/libinjection/build.sh
	sh crs/libinjection/build.sh $(INJ_DIR)

# Rebuild everything when the flags change (conventions: "rebuild when flags change").
$(BUILD)/.flags: FORCE $(TLS_DEP) $(INJ_DIR)/.stamp
	@mkdir -p $(BUILD)/llhttp $(BUILD)/unit
	@echo '$(CC) $(CFLAGS) $(LIBS)' | cmp -s - $@ || echo '$(CC) $(CFLAGS) $(LIBS)' > $@
FORCE:

$(BUILD)/%.o: src/%.c $(wildcard src/*.h) $(BUILD)/.flags
	$(CC) $(CFLAGS) -MMD -c -o $@ $<

# `sluice -V` names the commit it was built from. Only main.o depends on
# it (through a file rewritten when the commit changes), so a new commit
# does not rebuild everything.
GIT_REV := $(shell git describe --always --dirty 2>/dev/null)
$(BUILD)/git-rev: FORCE
	@mkdir -p $(BUILD); echo '$(GIT_REV)' | cmp -s - $@ || echo '$(GIT_REV)' > $@
$(BUILD)/main.o: $(BUILD)/git-rev
$(BUILD)/main.o: CFLAGS += $(if $(GIT_REV),-DSLUICE_GIT='"$(GIT_REV)"')

# The admin dashboard is plain HTML+JS in src/www, embedded as one C string
# (sed only: no build tool beyond the toolchain).
$(BUILD)/dashboard.c: src/www/dashboard.html $(BUILD)/.flags
	@{ echo '/* generated from src/www/dashboard.html */'; echo 'const char admin_dashboard_html[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; echo ';'; } > $@
$(BUILD)/dashboard.o: $(BUILD)/dashboard.c
	$(CC) $(CFLAGS) -Wno-missing-variable-declarations -c -o $@ $<

# llhttp is compiled from the sources Debian's node-llhttp installs; never vendored.
$(BUILD)/llhttp/%.o: $(LLHTTP_DIR)/%.c $(BUILD)/.flags
	$(CC) -std=c11 $(O) -g -w $(XCFLAGS) $(LLHTTP_DEFS) -I/usr/share/include/llhttp -c -o $@ $<

ifeq ($(LLHTTP_SIMD),1)
$(BUILD)/llhttp/llhttp.o: $(LLHTTP_DIR)/llhttp.c $(BUILD)/.flags
	$(CC) -std=c11 $(O) -g -w $(XCFLAGS) $(LLHTTP_DEFS) -Dllhttp__internal_execute=llhttp__internal_execute_generic \
	  -I/usr/share/include/llhttp -c -o $@ $<

# The second copy keeps only its renamed entry point global; its other
# functions would clash with the first copy's.
$(BUILD)/llhttp/llhttp_sse42.o: $(LLHTTP_DIR)/llhttp.c $(BUILD)/.flags
	$(CC) -std=c11 $(O) -g -w $(XCFLAGS) $(LLHTTP_DEFS) -msse4.2 -Dllhttp__internal_execute=llhttp__internal_execute_sse42 \
	  -I/usr/share/include/llhttp -c -o $@.tmp $<
	objcopy --keep-global-symbol=llhttp__internal_execute_sse42 $@.tmp $@ && rm -f $@.tmp
endif

# The static libraries built by cargo are linked in: a new build of one
# relinks (its stamp is a prerequisite, not an input).
LINK_DEPS = $(TLS_DEP) $(INJ_DIR)/.stamp

$(BUILD)/sluice: $(OBJ) $(LLHTTP_OBJ) $(LINK_DEPS)
	$(CC) $(LDFLAGS) -o $@ $(filter-out $(LINK_DEPS),$^) $(LIBS)

$(BUILD)/demo_backend: bench/demo_backend.c $(BUILD)/.flags
	$(CC) $(CFLAGS) -o $@ $< -lpthread $(LDFLAGS)

# The CRS engine on raw requests, for the ModSecurity differential tests.
$(BUILD)/crs_replay: tests/crs/crs_replay.c $(LIB_OBJ) $(LLHTTP_OBJ) $(LINK_DEPS)
	$(CC) $(CFLAGS) -o $@ $(filter-out $(LINK_DEPS),$^) $(LIBS) $(LDFLAGS)

$(BUILD)/unit/%: tests/unit/%.c $(LIB_OBJ) $(LLHTTP_OBJ) $(LINK_DEPS)
	$(CC) $(CFLAGS) -o $@ $(filter-out $(LINK_DEPS),$^) $(LIBS) $(LDFLAGS)

deps:
	@missing=""; for p in $(DEB_BUILD_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

test-deps: deps
	@missing=""; for p in $(DEB_TEST_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  case "$$missing" in *tomcat10*) \
	    : "the tests start Tomcats of their own; the packaged service would hold :8080, which make run uses"; \
	    systemctl disable --now tomcat10 >/dev/null 2>&1 || true;; esac; \
	  case "$$missing" in *apache2*) \
	    : "the ModSecurity oracle runs Apaches of its own (tests/e2e/modsec.py); the packaged one would hold :80"; \
	    systemctl disable --now apache2 >/dev/null 2>&1 || true;; esac; fi
	@python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q pytest 2>/dev/null || \
	  python3 -m pip install -q --break-system-packages pytest
	@# Debian's python3-prometheus-client serves /usr/bin/python3; another python3 on PATH gets it from pip
	@python3 -c 'import prometheus_client' 2>/dev/null || python3 -m pip install -q prometheus_client 2>/dev/null || \
	  python3 -m pip install -q --break-system-packages prometheus_client
	@# h2spec, the HTTP/2 conformance suite (tests/e2e/test_h2spec.py), from the Go module proxy
	@export PATH="$$PATH:/usr/local/go/bin"; command -v h2spec >/dev/null || \
	  test -x "$$(go env GOPATH)/bin/h2spec" || \
	  go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible
	@# the HTTP/2 tests' frame-level client: Debian's python3-h2, or h2 from pip likewise
	@python3 -c 'import h2' 2>/dev/null || python3 -m pip install -q h2 2>/dev/null || \
	  python3 -m pip install -q --break-system-packages h2

unit: $(UNIT_BIN)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $$t; done

e2e: all
	SLUICE_BIN=$(abspath $(BUILD)/sluice) DEMO_BACKEND=$(abspath $(BUILD)/demo_backend) \
	  python3 -m pytest -q -p no:cacheprovider tests/e2e $(PYTEST_ARGS)

# The whole suite, then the same suite again under ASan+UBSan+LSan (the
# harness fails a test whose sluice printed a sanitizer report), the core
# tests on valgrind, every fuzz target for 20 s, and the bench smoke test.
# The TLS tests again against the distribution build (Debian OpenSSL 3).
e2e-tls: all
	SLUICE_BIN=$(abspath $(BUILD)/sluice) DEMO_BACKEND=$(abspath $(BUILD)/demo_backend) \
	  python3 -m pytest -q -p no:cacheprovider tests/e2e/test_tls.py tests/e2e/test_tls_backend.py $(PYTEST_ARGS)

test: test-deps
	$(MAKE) all
	$(MAKE) unit
	$(MAKE) e2e
	$(MAKE) TLS=openssl all e2e-tls
	$(MAKE) SANITIZE=1 all unit e2e
	$(MAKE) valgrind
	$(MAKE) fuzz-smoke
	$(MAKE) bench-smoke

# The bench scripts in QUICK mode with tiny durations (tests/bench): they
# still produce tables with figures and charts. Never asserts speed.
bench-smoke: all $(BUILD)/srcload
	BUILD=$(BUILD) python3 -m pytest -q -p no:cacheprovider tests/bench $(PYTEST_ARGS)

asan: deps
	$(MAKE) SANITIZE=1 all

test-asan: test-deps
	$(MAKE) SANITIZE=1 all unit e2e

run: deps
	$(MAKE) all
	@sh tests/run-demo.sh $(BUILD)

# The whole suite (docs/benchmarking.md): every scenario of the published
# experiments, one after the other, then bench/results/latest/report.md.
# QUICK=1 shortens every scenario (the whole suite in under 5 minutes).
BENCH_SCENARIOS = offload inspection churn throughput memory reuse
bench: all $(BUILD)/srcload
	BUILD=$(BUILD) sh bench/all.sh $(BENCH_SCENARIOS)

bench-offload: all
	BUILD=$(BUILD) sh bench/offload.sh

bench-churn: all
	$(MAKE) TLS=openssl BUILD=build-openssl all
	BUILD=$(BUILD) sh bench/churn.sh

bench-throughput: all
	BUILD=$(BUILD) sh bench/throughput.sh

bench-memory: all
	BUILD=$(BUILD) sh bench/memory.sh

bench-core: all
	sh bench/core.sh

# What routing and each session persistence type cost per request, sluice vs
# HAProxy, in instructions counted by callgrind (docs/bench/persist.md).
bench-persist: all
	BUILD=$(BUILD) sh bench/persist.sh

bench-tls: all
	$(MAKE) TLS=openssl all
	sh bench/tls.sh

# HTTP/2 over TLS to the proxy, HTTP/1.1 keepalive to the origin (issue 20):
# h2load at 100 x 10 and 1,000 x 1 streams, memory per idle h2 connection.
bench-h2: all
	BUILD=$(BUILD) sh bench/h2.sh

# 1 vs 2 sluice instances behind HAProxy in TCP mode with PROXY v2 (issue 23):
# CPU per request per instance, TLS churn and keepalive, and what a rate limit
# costs per request with store: local and store: redis (docs/bench/tier.md).
.PHONY: bench-tier
bench-tier: all
	BUILD=$(BUILD) sh bench/tier.sh

# Header-only vs PROXY v2 identity: req/s and backend connection reuse with
# 1,000 clients from distinct 127.x addresses (bench/srcload.c).
$(BUILD)/srcload: bench/srcload.c $(BUILD)/.flags
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

# A TLS handshake load client cheaper than the server (bench/tlsload.c):
# AWS-LC only; --wrap=EVP_DigestVerify serves its benchmark-only -x flag.
$(BUILD)/tlsload: bench/tlsload.c $(AWSLC_DIR)/.stamp
	$(CC) -std=c11 $(O) -g $(WARN) -D_GNU_SOURCE -I$(AWSLC_DIR)/include -DBORINGSSL_PREFIX_SYMBOLS_H -o $@ $< \
	  $(AWSLC_DIR)/lib/libssl.a $(AWSLC_DIR)/lib/libcrypto.a -Wl,--wrap=EVP_DigestVerify -lpthread

bench-reuse: all $(BUILD)/srcload
	BUILD=$(BUILD) sh bench/reuse.sh

bench-identity: bench-reuse

# The Lua hook's cost: off vs allow_all.lua vs waf.lua (req/s, CPU, and
# sluice's own inspect_seconds histogram).
bench-inspection: all
	BUILD=$(BUILD) sh bench/inspection.sh

# The OWASP CRS through sluice's engine (lua/crs.lua) vs Apache + ModSecurity
# 2.9 with the same CRS files: CPU per request at a fixed rate, PL 1 and 2.
bench-crs: all
	BUILD=$(BUILD) sh bench/crs.sh

# Stats on vs the same code built with STATS=0 (stats calls compiled out).
bench-stats: all
	$(MAKE) STATS=0 all
	BUILD=$(BUILD) sh bench/stats.sh

# libFuzzer targets (clang-14, ASan+UBSan): tests/fuzz/README.md. `make fuzz`
# runs each target for FUZZ_SECONDS; fuzz-smoke (part of make test) for 20 s.
# FUZZ_JOBS targets fuzz at a time, each on a core of its own.
FUZZ_SECONDS ?= 300
FUZZ_JOBS ?= $(shell nproc)
fuzz: deps
	$(MAKE) -f tests/fuzz/fuzz.mk -j$(FUZZ_JOBS) -O run FUZZ_SECONDS=$(FUZZ_SECONDS)

fuzz-smoke: deps
	$(MAKE) -f tests/fuzz/fuzz.mk -j$(FUZZ_JOBS) -O run FUZZ_SECONDS=20

# valgrind memcheck over the core end-to-end tests (every sluice process,
# forked workers included; a test fails on any memcheck error or definite
# leak): a libc-malloc build, since jemalloc and ASan both hide from it.
VALGRIND_TESTS ?= tests/e2e/test_proxy_basic.py tests/e2e/test_malformed.py
valgrind: test-deps
	@command -v valgrind >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; }
	$(MAKE) MALLOC=libc all
	SLUICE_VALGRIND=1 SLUICE_BIN=$(abspath build-libc$(TLS_SUFFIX)/sluice) DEMO_BACKEND=$(abspath build-libc$(TLS_SUFFIX)/demo_backend) \
	  python3 -m pytest -q -p no:cacheprovider $(VALGRIND_TESTS) $(PYTEST_ARGS)

# 30 minutes of mixed traffic with RSS, fds and latency over time
# (docs/bench/soak.md); not part of make test. SOAK_SECONDS shortens it.
soak: all
	BUILD=$(BUILD) sh bench/soak.sh

# make install: PREFIX (default /usr/local) and DESTDIR. The config goes to
# $(DESTDIR)/etc/sluice/sluice.yaml (an existing one is kept) and points at the
# installed Lua scripts and at /etc/sluice/tls/ (the Debian package makes a
# self-signed pair there; no keys are installed). INSTALL_BIN picks the binary.
PREFIX  ?= /usr/local
DESTDIR ?=
INSTALL_BIN      ?= $(BUILD)/sluice
SYSTEMD_UNIT_DIR ?= /lib/systemd/system
SLUICE_VERSION := $(shell sed -n 's/^\#define SLUICE_VERSION "\(.*\)"/\1/p' src/version.h)
I_SBIN = $(DESTDIR)$(PREFIX)/sbin
I_LUA  = $(PREFIX)/share/sluice/lua
I_DOC  = $(PREFIX)/share/doc/sluice
I_MAN8 = $(DESTDIR)$(PREFIX)/share/man/man8
install: $(INSTALL_BIN)
	install -d $(I_SBIN) $(DESTDIR)$(I_LUA) $(DESTDIR)$(I_DOC) $(I_MAN8) $(DESTDIR)/etc/sluice \
	  $(DESTDIR)/etc/logrotate.d $(DESTDIR)$(SYSTEMD_UNIT_DIR)
	install -m 0755 $(INSTALL_BIN) $(I_SBIN)/sluice
	install -m 0644 lua/*.lua $(DESTDIR)$(I_LUA)/
	install -m 0644 README.md docs/*.md $(DESTDIR)$(I_DOC)/
	sed -e 's|@VERSION@|$(SLUICE_VERSION)|' -e 's|@LUADIR@|$(I_LUA)|g' -e 's|@DOCDIR@|$(I_DOC)|g' docs/sluice.8 \
	  | gzip -9n > $(I_MAN8)/sluice.8.gz && chmod 0644 $(I_MAN8)/sluice.8.gz
	@if [ -e $(DESTDIR)/etc/sluice/sluice.yaml ]; then echo "keeping the existing $(DESTDIR)/etc/sluice/sluice.yaml"; \
	else sed 's|@LUADIR@|$(I_LUA)|g' conf/system/sluice.yaml > $(DESTDIR)/etc/sluice/sluice.yaml && \
	  chmod 0644 $(DESTDIR)/etc/sluice/sluice.yaml && echo "installed $(DESTDIR)/etc/sluice/sluice.yaml"; fi
	sed -e 's|/usr/sbin/sluice|$(PREFIX)/sbin/sluice|g' -e 's|/usr/share/doc/sluice|$(I_DOC)|g' conf/systemd/sluice.service \
	  > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/sluice.service && chmod 0644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/sluice.service
	sed -e 's|/usr/share/doc/sluice|$(I_DOC)|g' conf/systemd/sluice.socket \
	  > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/sluice.socket && chmod 0644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/sluice.socket
	install -m 0644 conf/logrotate/sluice $(DESTDIR)/etc/logrotate.d/sluice

# make deb: DEB_OUT/sluice_<version>_<arch>.deb with dpkg-deb (conf/deb/).
DEB_OUT ?= build-deb
deb: $(INSTALL_BIN)
	@mkdir -p $(DEB_OUT)
	sh conf/deb/build.sh $(abspath $(INSTALL_BIN)) $(abspath $(DEB_OUT))

clean:
	rm -rf build build-* 

-include $(wildcard $(BUILD)/*.d)
