# deformd — top-level Makefile.
#
#   make            build everything (libraries, bin/deformd, bin/deform, clients)
#   make run        install missing Debian packages, build, build the demo
#                   repository, start deformd on it (README's first command)
#   make test       install missing packages, build, run every test suite;
#                   ends with "N passed, N failed" (README's second command)
#   make asan|ubsan|tsan   the same tests under sanitizers (build/asan, ...)
#   make test-oldblas      core unit suites under OPENBLAS_CORETYPE=Sandybridge
#   make test-noavx512     core unit suites built without the AVX-512 kernels
#   make bench      all benchmarks (bench-core, bench-server, ...)
#   make format     clang-format the tree
#
# Sources are discovered by directory, so adding a file needs no Makefile edit:
#   core/**/*.c         -> $(B)/libdfcore.a (core/<folder>/: base, math, one per kind)
#   proto/*.c           -> $(B)/libdfproto.a
#   server/*.c          -> bin/deformd
#   tools/deform/*.c    -> bin/deform
#   clients/c/lib/*.c   -> $(B)/libdeformclient.a, $(B)/libdeformclient.so
#   clients/c/deformctl/*.c -> bin/deformctl
#   tests/unit/**/test_*.c -> $(B)/tests/**/test_* (one binary each; the tree mirrors
#                         the source tree, e.g. tests/unit/core/rigged/test_rigged.c)
#   bench/*.c           -> $(B)/bench/* (one binary each)

B        ?= build
BIN      ?= bin
CC       ?= cc
OPT      ?= -O3 -march=native
CFLAGS   ?= $(OPT) -g
SAN      ?=
WARN     := -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
CPPFLAGS += -D_GNU_SOURCE -Icore -Iproto -Iclients/c/include -I/usr/include/suitesparse
ALLCFLAGS = -std=c11 $(WARN) $(CFLAGS) $(SAN) -MMD -MP -pthread
LDLIBS_CORE = -ljansson -lopenblas -lcholmod -lm -lpthread
LDLIBS_SRV  = -lmicrohttpd -luv $(LDLIBS_CORE)
LDLIBS_ALL  = -lassimp -lmicrohttpd -luv -lcurl $(LDLIBS_CORE)

CORE_SRC   := $(sort $(shell find core -name '*.c'))
PROTO_SRC  := $(wildcard proto/*.c)
SERVER_SRC := $(wildcard server/*.c)
TOOL_SRC   := $(wildcard tools/deform/*.c)
CLIENT_SRC := $(wildcard clients/c/lib/*.c)
CTL_SRC    := $(wildcard clients/c/deformctl/*.c)
TEST_SRC   := $(sort $(shell find tests/unit -name 'test_*.c'))
TESTLIB_SRC:= $(wildcard tests/lib/*.c)
BENCH_SRC  := $(wildcard bench/*.c)

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))
CORE_OBJ   := $(call obj,$(CORE_SRC))
PROTO_OBJ  := $(call obj,$(PROTO_SRC))
SERVER_OBJ := $(call obj,$(SERVER_SRC))
TOOL_OBJ   := $(call obj,$(TOOL_SRC))
CLIENT_OBJ := $(call obj,$(CLIENT_SRC))
CLIENT_PIC := $(patsubst %.c,$(B)/pic/%.o,$(CLIENT_SRC))
CTL_OBJ    := $(call obj,$(CTL_SRC))
TESTLIB_OBJ:= $(call obj,$(TESTLIB_SRC))
TEST_BINS  := $(patsubst tests/unit/%.c,$(B)/tests/%,$(TEST_SRC))
BENCH_BINS := $(patsubst bench/%.c,$(B)/bench/%,$(BENCH_SRC))

LIBCORE   := $(B)/libdfcore.a
LIBPROTO  := $(B)/libdfproto.a
LIBCLIENT := $(B)/libdeformclient.a
SOCLIENT  := $(B)/libdeformclient.so

TARGETS := $(LIBCORE) $(LIBPROTO)
ifneq ($(SERVER_SRC),)
TARGETS += $(BIN)/deformd
endif
ifneq ($(TOOL_SRC),)
TARGETS += $(BIN)/deform
endif
ifneq ($(CLIENT_SRC),)
TARGETS += $(LIBCLIENT) $(SOCLIENT)
endif
ifneq ($(CTL_SRC),)
TARGETS += $(BIN)/deformctl
endif

.PHONY: all deps run test test-only tests-build asan ubsan tsan bench format clean demo
all: $(TARGETS)

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALLCFLAGS) -c $< -o $@

$(B)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALLCFLAGS) -fPIC -c $< -o $@

$(LIBCORE): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBPROTO): $(PROTO_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^ $(if $^,,)
# The client libraries carry the few core files the codec needs (errors,
# dtypes/float16, npy), so a client links nothing of the daemon.
CLIENT_CORE := core/base/error.c core/base/dtype.c core/base/npy.c
$(LIBCLIENT): $(CLIENT_OBJ) $(LIBPROTO) $(call obj,$(CLIENT_CORE))
	rm -f $@ && ar rcs $@ $(CLIENT_OBJ) $(PROTO_OBJ) $(call obj,$(CLIENT_CORE))
$(SOCLIENT): $(CLIENT_PIC) $(patsubst %.c,$(B)/pic/%.o,$(PROTO_SRC) $(CLIENT_CORE))
	$(CC) -shared $(SAN) -o $@ $^ -lcurl -ljansson -lpthread -lm

$(BIN)/deformd: $(SERVER_OBJ) $(LIBPROTO) $(LIBCORE)
	@mkdir -p $(BIN)
	$(CC) $(ALLCFLAGS) -o $@ $(SERVER_OBJ) $(LIBPROTO) -Wl,--whole-archive $(LIBCORE) -Wl,--no-whole-archive $(LDLIBS_SRV)
# whole-archive: kinds are weakly referenced by core/base/kinds.c, so nothing else pulls them in
$(BIN)/deform: $(TOOL_OBJ) $(LIBCORE)
	@mkdir -p $(BIN)
	$(CC) $(ALLCFLAGS) -o $@ $(TOOL_OBJ) -Wl,--whole-archive $(LIBCORE) -Wl,--no-whole-archive -lassimp $(LDLIBS_CORE)
$(BIN)/deformctl: $(CTL_OBJ) $(LIBCLIENT)
	@mkdir -p $(BIN)
	$(CC) $(ALLCFLAGS) -o $@ $(CTL_OBJ) $(LIBCLIENT) -lcurl -ljansson -lpthread -lm

# Each unit test links every library (and the server objects but main.c).
SERVER_LIB_OBJ := $(filter-out $(B)/obj/server/main.o,$(SERVER_OBJ))
TOOL_LIB_OBJ   := $(filter-out $(B)/obj/tools/deform/main.o,$(TOOL_OBJ))
$(B)/tests/%: tests/unit/%.c $(TESTLIB_OBJ) $(SERVER_LIB_OBJ) $(TOOL_LIB_OBJ) $(CLIENT_OBJ) $(LIBPROTO) $(LIBCORE)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Itests/lib -Iserver -Itools/deform $(ALLCFLAGS) -o $@ $< $(TESTLIB_OBJ) $(SERVER_LIB_OBJ) $(TOOL_LIB_OBJ) $(CLIENT_OBJ) $(LIBPROTO) -Wl,--whole-archive $(LIBCORE) -Wl,--no-whole-archive $(LDLIBS_ALL) $(TEST_LDFLAGS)
# allocation-failure injection: the statically linked objects' allocation calls go through the test's wrappers
$(B)/tests/core/base/test_allocfail: TEST_LDFLAGS = -ldl \
	-Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=posix_memalign,--wrap=aligned_alloc,--wrap=strdup,--wrap=free

$(B)/bench/%: bench/%.c $(SERVER_LIB_OBJ) $(CLIENT_OBJ) $(LIBPROTO) $(LIBCORE)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -Iserver $(ALLCFLAGS) -o $@ $< $(SERVER_LIB_OBJ) $(CLIENT_OBJ) $(LIBPROTO) -Wl,--whole-archive $(LIBCORE) -Wl,--no-whole-archive $(LDLIBS_ALL)

# test binaries whose source moved or went away (found by their .d files) are removed with the
# build, so no run (a kernel check, a sanitizer run) picks up a stale suite
STALE_TESTS = $(filter-out $(TEST_BINS),$(patsubst %.d,%,$(shell find $(B)/tests -name '*.d' 2>/dev/null)))

tests-build: all $(TEST_BINS)
	@rm -f $(STALE_TESTS) $(addsuffix .d,$(STALE_TESTS))

deps:
	@tools/deps.sh

# README command 1.
run: deps all
	@tools/make_demo.sh
	@tools/run_demo.sh

demo: all
	@tools/make_demo.sh

# README command 2.
test: deps
	@tools/deps.sh --test
	@$(MAKE) --no-print-directory -j$$(nproc) tests-build
	@$(NOAVX512_BUILD)
	@B=$(B) BIN=$(BIN) DF_ALT_BUILDS="$(NOAVX512_RUN)" tests/run.sh

test-only: tests-build
	@B=$(B) BIN=$(BIN) tests/run.sh

# Every code path on every machine: on an AVX-512 machine `make test` also
# builds the core unit suites with the AVX-512 kernels compiled out
# (build/noavx512) and runs them beside the default build; elsewhere the
# default build already is that build.
NOAVX512_B := build/noavx512
HAVE_AVX512 := $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo 1)
ifeq ($(HAVE_AVX512),1)
NOAVX512_BUILD = $(MAKE) --no-print-directory -j$$(nproc) B=$(NOAVX512_B) BIN=$(NOAVX512_B)/bin \
	OPT="-O2 -march=native -mno-avx512f" tests-build-core
NOAVX512_RUN = $(NOAVX512_B):core/:noavx512
else
NOAVX512_BUILD = true
NOAVX512_RUN =
endif
.PHONY: tests-build-core test-noavx512 test-oldblas
tests-build-core: $(filter $(B)/tests/core/%,$(TEST_BINS))
	@rm -f $(STALE_TESTS) $(addsuffix .d,$(STALE_TESTS))
test-noavx512:
	@$(MAKE) --no-print-directory -j$$(nproc) B=$(NOAVX512_B) BIN=$(NOAVX512_B)/bin \
	    OPT="-O2 -march=native -mno-avx512f" tests-build-core
	@B=$(NOAVX512_B) BIN=$(NOAVX512_B)/bin DF_UNIT_FILTER=core/ DF_UNIT_ONLY=1 tests/run.sh

# The numeric core suites again under an older OpenBLAS kernel (tests and CI
# keep the machine's OPENBLAS_CORETYPE; run this by hand before submitting).
# OLDBLAS=Sandybridge is safe on any AVX2 machine.
OLDBLAS ?= Sandybridge
test-oldblas: tests-build
	@OPENBLAS_CORETYPE=$(OLDBLAS) B=$(B) BIN=$(BIN) DF_UNIT_FILTER=core/ DF_UNIT_ONLY=1 tests/run.sh
	@mkdir -p $(B)/test-logs
	@OPENBLAS_CORETYPE=$(OLDBLAS) B=$(B) BIN=$(BIN) tests/e2e/core_golden.sh >$(B)/test-logs/oldblas-core_golden.log 2>&1; \
	    echo "core_golden under $(OLDBLAS): $$(grep -c '^ok ' $(B)/test-logs/oldblas-core_golden.log) passed, $$(grep -c '^FAIL ' $(B)/test-logs/oldblas-core_golden.log) failed"; \
	    ! grep '^FAIL ' $(B)/test-logs/oldblas-core_golden.log

asan:
	@$(MAKE) --no-print-directory B=build/asan BIN=build/asan/bin OPT="-O1" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" test-only
ubsan:
	@$(MAKE) --no-print-directory B=build/ubsan BIN=build/ubsan/bin OPT="-O1" SAN="-fsanitize=undefined -fno-sanitize-recover=undefined" test-only
# OpenBLAS is not instrumented: its own worker threads (memset/copy of GEMM
# buffers) read as races to TSan, so tsan runs it single-threaded.
tsan:
	@OPENBLAS_NUM_THREADS=1 $(MAKE) --no-print-directory B=build/tsan BIN=build/tsan/bin OPT="-O1" SAN="-fsanitize=thread" test-only

bench: bench-core bench-server

bench-core: all $(BENCH_BINS)
	@bench/run_core.sh

# rigapprox: served throughput vs PyTorch, weight-streaming floor, reconstruction crossover
.PHONY: bench-rigapprox
bench-rigapprox: all $(B)/bench/bench_rigapprox
	@B=$(B) BIN=$(BIN) bench/run_rigapprox.sh
# rigapprox on rigs it was not tuned on (the demonstration rig, the Red Eclipse player:
# downloads redeclipse-data, ~860 MB, into $(B)/ext); hours at the default N=10000
.PHONY: eval-rigapprox
eval-rigapprox: all
	@B=$(B) BIN=$(BIN) bench/bench_rigapprox_eval.sh

# deformd vs fixed-reply servers, batching on/off (bench/bench_server.sh)
.PHONY: bench-server
bench-server: all $(BENCH_BINS)
	@B=$(B) BIN=$(BIN) bench/bench_server.sh

# Skinning decomposition: time and ERMS per iteration, weights vs transforms
# step, 1 and 2 threads (docs/decompose.md).
# the scale-out router (deploy/nginx): its overhead per request and how it
# spreads characters (bench/bench_scaleout.sh, docs/deploy.md)
.PHONY: bench-scaleout
bench-scaleout: all $(B)/bench/bench_server
	@B=$(B) BIN=$(BIN) bench/bench_scaleout.sh

.PHONY: bench-decompose
bench-decompose: all
	@BIN=$(BIN) bench/bench_decompose.sh
# Dem Bones beside ours (needs DEMBONES_DIR, a checkout of electronicarts/dem-bones);
# eval-decompose adds OpenArena's MD3 players (installs openarena-data).
.PHONY: bench-decompose-dembones eval-decompose
bench-decompose-dembones: all
	@BIN=$(BIN) bench/bench_decompose_dembones.sh
eval-decompose: all
	@BIN=$(BIN) OA=1 bench/bench_decompose_dembones.sh
# decompose-init-weights trains the decomposition's initialisation network (minutes);
# eval-decompose-init then compares both initialisers on held-out characters (docs/decompose.md).
.PHONY: decompose-init-weights eval-decompose-init
decompose-init-weights: all
	@BIN=$(BIN) B=$(B) bench/bench_decompose_init.sh weights
eval-decompose-init: all
	@BIN=$(BIN) B=$(B) bench/bench_decompose_init.sh

# retarget: markers -> an 11k-vertex target beside the target alone
# (bench/run_retarget.sh, docs/retarget.md)
.PHONY: bench-retarget
bench-retarget: all $(B)/bench/bench_retarget
	@B=$(B) BIN=$(BIN) bench/run_retarget.sh

# garment: a 12k-vertex garment synthesised beside plain LBS of it (bench/bench_garment.c,
# docs/garment.md); GARMENT_MODEL: the fitted model it derives the 12k model from
GARMENT_MODEL ?= tests/data/garment/shirt.safetensors
.PHONY: bench-garment garment-db
bench-garment: all $(B)/bench/bench_garment
	@mkdir -p $(B)/bench-out && DF_BENCH_OUT=$(B)/bench-out $(B)/bench/bench_garment $(GARMENT_MODEL)
# the garment database (tools/garment/garment.py, docs/garment.md): body, shirt, poses, plan,
# then the simulations, one niced Blender at a time, resumable (GARMENT_DB: its directory)
GARMENT_DB ?= build/garment/db
garment-db: all
	@[ -f $(GARMENT_DB)/garment.npz ] || tools/garment/garment.py build $(GARMENT_DB)
	@[ -f $(GARMENT_DB)/manifest.json ] || tools/garment/garment.py plan $(GARMENT_DB)
	@tools/garment/garment.py run $(GARMENT_DB)

# Fuzzing (libFuzzer; needs clang): `make fuzz [FUZZ_SECONDS=60]` builds
# every fuzz/fuzz_*.c against core/ and proto/ compiled with
# -fsanitize=fuzzer-no-link,address,undefined and runs each for FUZZ_SECONDS
# on a scratch corpus seeded from fuzz/corpus/<name>/ (which stays untouched).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_OBJ     := $(patsubst %.c,$(B)/fuzz/obj/%.o,$(CORE_SRC) $(PROTO_SRC))
FUZZ_BINS    := $(patsubst fuzz/%.c,$(B)/fuzz/bin/%,$(wildcard fuzz/fuzz_*.c))
$(B)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) -std=c11 -g -O1 -fsanitize=fuzzer-no-link $(FUZZ_SAN) -c $< -o $@
$(B)/fuzz/bin/%: fuzz/%.c $(FUZZ_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) -std=c11 -g -O1 -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $< $(FUZZ_OBJ) $(LDLIBS_CORE)
.PHONY: fuzz fuzz-build
.SECONDARY: $(FUZZ_OBJ)
fuzz-build: $(FUZZ_BINS)
fuzz: fuzz-build
	@for f in $(FUZZ_BINS); do n=$$(basename $$f | sed 's/^fuzz_//'); \
	  mkdir -p $(B)/fuzz/corpus-$$n fuzz/corpus/$$n; d=; \
	  [ -f fuzz/$$n.dict ] && d=-dict=fuzz/$$n.dict; \
	  echo "== $$f ($(FUZZ_SECONDS) s)"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 $$d \
	     $(B)/fuzz/corpus-$$n fuzz/corpus/$$n || exit 1; done

# Soak: 10 minutes (SOAK_SECS) of honest clients at 80 % of their capacity
# beside hostile ones on the demo repository; fails on a wrong answer or
# growing memory (bench/hostile_rss.py, docs/server.md).
.PHONY: soak
soak: demo
	@python3 bench/hostile_rss.py --soak --secs $${SOAK_SECS:-600} --repo $${DF_DEMO_REPO:-demo-repo} --bin $(BIN)

# Safetensors load/validate and float16 conversion figures (docs/model-format.md).
.PHONY: bench-st
bench-st: $(B)/bench/bench_safetensors
	@DF_TEST_OUT=$${DF_TEST_OUT:-$(B)/test-out} && mkdir -p $$DF_TEST_OUT && \
	  DF_TEST_OUT=$$DF_TEST_OUT nice $(B)/bench/bench_safetensors $(BENCH_ST_MIB)

# ---------------------------------------------------------------- install
# make install [PREFIX=/usr/local] [DESTDIR=staging] [SYSCONFDIR=/etc] [STATEDIR=/var/lib/deformd]
#   PREFIX/bin/{deformd,deform,deformctl}
#   PREFIX/lib/libdeformclient.{a,so}, PREFIX/lib/pkgconfig/deformclient.pc
#   PREFIX/include/deformd/{deformclient.h,df.h}
#   PREFIX/share/deformd/www (the viewer: deformd finds it next to its executable)
#   PREFIX/share/deformd/deformd.conf.example, PREFIX/lib/systemd/system/deformd.service
# The Python client installs with pip from clients/python, the browser module with npm from
# clients/js (docs/install.md). tests/e2e/install.sh checks all three.
PREFIX     ?= /usr/local
DESTDIR    ?=
SYSCONFDIR ?= /etc
STATEDIR   ?= /var/lib/deformd
DF_VERSION := $(shell sed -n 's/^\#define DF_VERSION "\(.*\)"/\1/p' core/df.h)
.PHONY: install uninstall
install: all
	@test -f server/www/vendor/three.module.js || { echo "install: server/www/vendor is missing: run tools/deps.sh first" >&2; exit 1; }
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	    $(DESTDIR)$(PREFIX)/include/deformd $(DESTDIR)$(PREFIX)/share/deformd \
	    $(DESTDIR)$(PREFIX)/lib/systemd/system
	install -m 755 $(BIN)/deformd $(BIN)/deform $(BIN)/deformctl $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIBCLIENT) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(SOCLIENT) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 clients/c/include/deformclient.h core/df.h $(DESTDIR)$(PREFIX)/include/deformd/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(DF_VERSION)|g' clients/c/pkgconfig/deformclient.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/deformclient.pc
	rm -rf $(DESTDIR)$(PREFIX)/share/deformd/www
	cp -R server/www $(DESTDIR)$(PREFIX)/share/deformd/www
	install -m 644 config/deformd.conf $(DESTDIR)$(PREFIX)/share/deformd/deformd.conf.example
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@STATEDIR@|$(STATEDIR)|g' \
	    deploy/systemd/deformd.service.in > $(DESTDIR)$(PREFIX)/lib/systemd/system/deformd.service
	@echo "installed deformd $(DF_VERSION) under $(DESTDIR)$(PREFIX)"
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/deformd $(DESTDIR)$(PREFIX)/bin/deform $(DESTDIR)$(PREFIX)/bin/deformctl \
	    $(DESTDIR)$(PREFIX)/lib/libdeformclient.a $(DESTDIR)$(PREFIX)/lib/libdeformclient.so \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig/deformclient.pc $(DESTDIR)$(PREFIX)/lib/systemd/system/deformd.service
	rm -rf $(DESTDIR)$(PREFIX)/include/deformd $(DESTDIR)$(PREFIX)/share/deformd

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build bin

-include $(shell find $(B)/obj $(B)/pic $(B)/tests $(B)/bench -name '*.d' 2>/dev/null)
