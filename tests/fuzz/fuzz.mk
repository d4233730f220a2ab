# libFuzzer targets for sluice (tests/fuzz/README.md). Standalone:
#   make -f tests/fuzz/fuzz.mk [all]                 build every target into build-fuzz/
#   make -f tests/fuzz/fuzz.mk run FUZZ_SECONDS=N    replay the regressions, then fuzz
#                                                    each target N seconds (-jN -O: N at a time)
#   make -f tests/fuzz/fuzz.mk run FUZZ_TARGETS="fuzz_cfg" ...   a subset
#   make -f tests/fuzz/fuzz.mk replay                the regressions only
#   make -f tests/fuzz/fuzz.mk FUZZ_TLS=openssl ...  the same against Debian's OpenSSL 3
# `run` fails on any crash, leak, sanitizer report or oracle failure; the
# reproducer lands in build-fuzz/artifacts/<target>/.
#
# Compiled like the main Makefile (same warnings, include dirs, libraries,
# LLHTTP_STRICT_MODE, llhttp from Debian's node-llhttp sources, default TLS
# library), but with clang-14, -fsanitize=fuzzer,address,undefined and the
# libc allocator (no jemalloc).

FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= fuzz_request fuzz_response fuzz_proxy_proto fuzz_cfg fuzz_lua_req fuzz_route fuzz_h2 fuzz_seclang fuzz_crs_body fuzz_rxlit fuzz_handover fuzz_h1head
# Start from the seeds only (otherwise the corpus found by earlier runs in
# build-fuzz/corpus/ is kept and grows).
FUZZ_FRESH ?= 0
FUZZ_EXTRA ?=

FCC     = clang-14
FBUILD  = build-fuzz
# Debian's clang-14 only recommends the compiler-rt package that holds the
# libFuzzer, ASan and UBSan runtimes; llvm-14 brings llvm-symbolizer for
# readable stacks.
FUZZ_PKGS = clang-14 libclang-rt-14-dev llvm-14
FUZZ_RT   = /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a

# The TLS library the rig links: AWS-LC, the default build's (the static
# libraries `make` builds, see the Makefile), or Debian's OpenSSL 3 with
# FUZZ_TLS=openssl (this build goes to build-fuzz-openssl/).
FUZZ_TLS  ?= awslc
AWSLC_DIR ?= build-awslc-lib
TLS_DEP    =
ifeq ($(FUZZ_TLS),awslc)
  TLS_CFLAGS = -I$(AWSLC_DIR)/include -DBORINGSSL_PREFIX_SYMBOLS_H
  TLS_LIBS   = $(AWSLC_DIR)/lib/libssl.a $(AWSLC_DIR)/lib/libcrypto.a
  TLS_DEP    = $(AWSLC_DIR)/.stamp
else ifeq ($(FUZZ_TLS),openssl)
  FBUILD     = build-fuzz-openssl
  TLS_CFLAGS =
  TLS_LIBS   = -lssl -lcrypto
else
  $(error FUZZ_TLS must be awslc or openssl)
endif
WARN     = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wwrite-strings
LLHTTP_DEFS = -DLLHTTP_STRICT_MODE=1
SAN      = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FCFLAGS  = -std=c11 -O1 -g $(WARN) -D_GNU_SOURCE $(LLHTTP_DEFS) $(TLS_CFLAGS) \
           -I/usr/share/include/llhttp -I/usr/include/lua5.4 -I/usr/include/libxml2 -Isrc $(SAN) -fsanitize=fuzzer-no-link
INJ_DIR ?= build-libinjection-lib
FLIBS    = -luv -lhiredis -lcyaml -lyaml $(TLS_LIBS) -llua5.4 -lpcre2-8 -lhs -lnghttp2 -lxml2 \
           $(INJ_DIR)/libsluice_libinjection.a -lgcc_s -lutil -lrt -lpthread -lm -ldl

LLHTTP_DIR = /usr/share/llhttp
LLHTTP_OBJ = $(FBUILD)/llhttp/api.o $(FBUILD)/llhttp/http.o $(FBUILD)/llhttp/llhttp.o
SRC     = $(filter-out src/main.c,$(wildcard src/*.c))
OBJ     = $(patsubst src/%.c,$(FBUILD)/%.o,$(SRC)) $(FBUILD)/dashboard.o $(LLHTTP_OBJ)
BINS    = $(addprefix $(FBUILD)/,$(FUZZ_TARGETS))
RUNS    = $(addprefix run-,$(FUZZ_TARGETS))
RIG_OBJ = $(FBUILD)/rig.o

.PHONY: all run replay toolchain FORCE $(RUNS)
all: $(BINS)

toolchain:
	@missing=""; for p in $(FUZZ_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ] || [ ! -f $(FUZZ_RT) ]; then echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    $(FUZZ_PKGS) >/dev/null; fi

$(AWSLC_DIR)/.stamp: tls/awslc/Cargo.toml tls/awslc/Cargo.lock tls/awslc/build.rs tls/awslc/build.sh
	sh tls/awslc/build.sh $(AWSLC_DIR)

$(INJ_DIR)/.stamp: crs/libinjection/Cargo.toml crs/libinjection/Cargo.lock crs/libinjection/src/lib.rs crs/libinjection/build.sh
	sh crs/libinjection/build.sh $(INJ_DIR)

$(FBUILD)/.flags: FORCE $(TLS_DEP) $(INJ_DIR)/.stamp | toolchain
	@mkdir -p $(FBUILD)/llhttp
	@echo '$(FCC) $(FCFLAGS) $(FLIBS)' | cmp -s - $@ || echo '$(FCC) $(FCFLAGS) $(FLIBS)' > $@
FORCE:

$(FBUILD)/%.o: src/%.c $(wildcard src/*.h) $(FBUILD)/.flags
	$(FCC) $(FCFLAGS) -c -o $@ $<

$(FBUILD)/dashboard.c: src/www/dashboard.html $(FBUILD)/.flags
	@{ echo '/* generated from src/www/dashboard.html */'; echo 'const char admin_dashboard_html[] ='; \
	  sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; echo ';'; } > $@
$(FBUILD)/dashboard.o: $(FBUILD)/dashboard.c
	$(FCC) $(FCFLAGS) -Wno-missing-variable-declarations -c -o $@ $<

$(FBUILD)/llhttp/%.o: $(LLHTTP_DIR)/%.c $(FBUILD)/.flags
	$(FCC) -std=c11 -O1 -g -w $(SAN) -fsanitize=fuzzer-no-link $(LLHTTP_DEFS) -I/usr/share/include/llhttp -c -o $@ $<

$(FBUILD)/rig.o: tests/fuzz/rig.c tests/fuzz/rig.h $(wildcard src/*.h) $(FBUILD)/.flags
	$(FCC) $(FCFLAGS) -Itests/fuzz -c -o $@ $<

# The in-process proxy rig's targets (fuzz_h2's oracles and mutator also use
# libnghttp2's HPACK coder, already in FLIBS).
# A new cargo build of a static library they link relinks them (the stamps
# are prerequisites, not inputs: the recipes name their inputs).
$(FBUILD)/fuzz_request $(FBUILD)/fuzz_response $(FBUILD)/fuzz_lua_req $(FBUILD)/fuzz_h2: $(FBUILD)/%: tests/fuzz/%.c $(RIG_OBJ) $(OBJ) $(TLS_DEP) $(INJ_DIR)/.stamp
	$(FCC) $(FCFLAGS) -Itests/fuzz -fsanitize=fuzzer -o $@ $< $(RIG_OBJ) $(OBJ) $(FLIBS)

$(FBUILD)/fuzz_proxy_proto $(FBUILD)/fuzz_cfg $(FBUILD)/fuzz_route $(FBUILD)/fuzz_seclang $(FBUILD)/fuzz_crs_body $(FBUILD)/fuzz_rxlit $(FBUILD)/fuzz_handover $(FBUILD)/fuzz_h1head: $(FBUILD)/%: tests/fuzz/%.c $(OBJ) $(TLS_DEP) $(INJ_DIR)/.stamp
	$(FCC) $(FCFLAGS) -fsanitize=fuzzer -o $@ $< $(OBJ) $(FLIBS)

# Sanitizers: stop at the first report (a report is a failure), leaks
# included; stacks symbolized.
FUZZ_ENV = ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:allocator_may_return_null=1:handle_abort=1:quarantine_size_mb=64 \
           UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
           ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer

# Per target: longest input (bytes).
MAXLEN_fuzz_request     = 4096
MAXLEN_fuzz_response    = 4096
MAXLEN_fuzz_proxy_proto = 1100
MAXLEN_fuzz_cfg         = 4096
MAXLEN_fuzz_lua_req     = 2048
MAXLEN_fuzz_route       = 1024
MAXLEN_fuzz_h2          = 4096
MAXLEN_fuzz_seclang     = 4096
MAXLEN_fuzz_crs_body    = 8192
MAXLEN_fuzz_rxlit       = 512
MAXLEN_fuzz_handover    = 8192
MAXLEN_fuzz_h1head      = 2048

replay: $(BINS)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  d=tests/fuzz/regressions/$$t; \
	  n=$$(ls $$d 2>/dev/null | wc -l); \
	  if [ "$$n" -gt 0 ]; then echo "== $$t: replaying $$n regression input(s)"; \
	    $(FUZZ_ENV) $(FBUILD)/$$t -runs=1 $$d/* >$(FBUILD)/$$t.replay.log 2>&1 || \
	      { tail -50 $(FBUILD)/$$t.replay.log; echo "FAIL: $$t regression replay (log: $(FBUILD)/$$t.replay.log)"; exit 1; }; \
	  fi; \
	done

# One make target per fuzz target, so `make -j2 -O` runs two at a time (the
# Makefile's fuzz and fuzz-smoke do): each still gets FUZZ_SECONDS of a whole
# core. A failing target leaves $(FBUILD)/<target>.failed and lets the others
# finish; `run` then fails naming every one.
run: $(RUNS)
	@fail=""; for t in $(FUZZ_TARGETS); do [ ! -f $(FBUILD)/$$t.failed ] || fail="$$fail $$t"; done; \
	if [ -n "$$fail" ]; then echo "fuzz: FAILED:$$fail"; exit 1; fi; echo "fuzz: all targets clean"

$(RUNS): run-%: replay
	@t=$*; maxlen=$(MAXLEN_$*); c=$(FBUILD)/corpus/$$t; a=$(FBUILD)/artifacts/$$t/; \
	rm -f $(FBUILD)/$$t.failed; \
	if [ "$(FUZZ_FRESH)" = 1 ]; then rm -rf $$c; fi; \
	mkdir -p $$c $$a; cp -n tests/fuzz/corpus/$$t/* $$c/ 2>/dev/null || true; \
	echo "== $$t: $(FUZZ_SECONDS) s"; \
	$(FUZZ_ENV) $(FBUILD)/$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  -dict=tests/fuzz/$$t.dict -max_len=$$maxlen -timeout=10 -rss_limit_mb=2048 \
	  -artifact_prefix=$$a $(FUZZ_EXTRA) $$c >$(FBUILD)/$$t.log 2>&1; rc=$$?; \
	grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' $(FBUILD)/$$t.log | tail -1; \
	grep -E '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' $(FBUILD)/$$t.log | tr '\n' ' '; echo; \
	if [ $$rc -ne 0 ]; then tail -60 $(FBUILD)/$$t.log; echo "FAIL: $$t (exit $$rc; log $(FBUILD)/$$t.log, reproducer in $$a)"; touch $(FBUILD)/$$t.failed; fi
