# moefast — plain GNU Makefile.
#   make            release build: build/rel/moefast
#   make run        build, generate the default model (cached), run it
#   make test       ASan+UBSan build, then the whole test suite
#   make bench      benchmarks (timing; never part of the tests)
#   make install    bin/moefast, lib/libmoefast.{a,so}, include/, lib/pkgconfig/
#                   under $(DESTDIR)$(PREFIX) (PREFIX=/usr/local); make uninstall
# Missing Debian packages are installed by scripts/deps.sh (as root).

CC      ?= gcc
PKGS    := libpcre2-8 jansson libcrypto
# The CLI alone links these (`moefast serve`; `moefast toolcheck`'s HTTP
# client, docs/TOOLCHECK.md); the library never does.
CLI_PKGS := libmicrohttpd libcurl
# -ffp-contract=off: the compiler must never fuse a*b+c on its own; the
# kernels' reduction order (src/quant/quant.h) is part of their contract.
CSTD    := -std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-math-errno
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter
INC     := -Iinclude -Isrc
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
CLI_CFLAGS = $(shell pkg-config --cflags $(CLI_PKGS) 2>/dev/null)
CLI_LIBS   = $(shell pkg-config --libs $(CLI_PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# Expert parallelism over MPI (tools/mpi.c, docs/SCALE.md): on when Open
# MPI's development files are installed (MPI=0 turns it off); the library
# never links MPI, only the CLI does.
MPI ?= $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1 || echo 0)
ifeq ($(MPI),1)
  CLI_CFLAGS += -DMOEFAST_MPI $(shell pkg-config --cflags ompi-c 2>/dev/null)
  CLI_LIBS   += $(shell pkg-config --libs ompi-c 2>/dev/null)
endif
LIBS     = $(PKG_LIBS) -lm -lpthread

# The SIMD levels: ONE list of extensions each (the compiler's -m names).
# Every *_avx2.c / *_avx512.c is compiled with -m<name> for each, and the
# level's descriptor (src/isa/isa_<level>.c, compiled the same way) checks
# at run time that the CPU has every extension the compiler then enables
# (src/isa/need.h, docs/KERNELS.md). List only what the level's code uses:
# a CPU without a listed extension does not get the level. (AVX-512 VBMI
# and BF16 were listed once, unused: the kernels' code was the same without.)
AVX2_ISA     := avx2 fma f16c bmi2
AVX512_ISA   := avx512f avx512bw avx512vl avx512dq avx512vnni fma f16c bmi2
AVX2_FLAGS   := $(addprefix -m,$(AVX2_ISA)) -DMOE_ISA_LIST='"$(AVX2_ISA)"'
AVX512_FLAGS := $(addprefix -m,$(AVX512_ISA)) -DMOE_ISA_LIST='"$(AVX512_ISA)"'

# MODE: rel (release), asan (the tests), pic (the release objects again,
# position-independent, for the shared library only).
MODE ?= rel
# `make run` and `make test` build with every core; tests/run.sh then runs
# the tests that many at a time (TEST_JOBS=1: one at a time).
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
ifeq ($(MODE),asan)
  OPT := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -DMOE_TEST_BUILD
  LDSAN := -fsanitize=address,undefined
else ifeq ($(MODE),pic)
  OPT := -O2 -g -fPIC
  LDSAN :=
else
  OPT := -O2 -g
  LDSAN :=
endif
B ?= build/$(MODE)

CFLAGS_ALL = $(CSTD) $(WARN) $(OPT) $(INC) $(PKG_CFLAGS) $(CFLAGS)

LIB_SRC  := $(wildcard src/*/*.c src/*/*/*.c)
TOOL_SRC := $(wildcard tools/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
BENCH_SRC:= $(wildcard bench/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(B)/%.o)
TOOL_OBJ := $(TOOL_SRC:%.c=$(B)/%.o)
$(TOOL_OBJ): CFLAGS += $(CLI_CFLAGS)
TEST_BIN := $(TEST_SRC:tests/%.c=$(B)/tests/%)
BENCH_BIN:= $(BENCH_SRC:bench/%.c=$(B)/bench/%)

.PHONY: all deps deps-test run test bench clean lib tests-build install uninstall
# deps first, then the build in a fresh make (under -j the two would race,
# and pkg-config's flags are read when make starts)
all: deps
	@$(MAKE) --no-print-directory $(B)/moefast

deps:
	@sh scripts/deps.sh
deps-test:
	@sh scripts/deps.sh test

$(B)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(AVX2_FLAGS) -MMD -MP -c $< -o $@
$(B)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(AVX512_FLAGS) -MMD -MP -c $< -o $@
$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(B)/libmoefast.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^
lib: $(B)/libmoefast.a

# The shared library (MODE=pic): libmoefast.so.$(SOVERSION) is its soname,
# so a program linked against it keeps running across compatible releases.
VERSION   := 0.1.0
SOVERSION := 0
SHLIB     := libmoefast.so.$(VERSION)
$(B)/$(SHLIB): $(LIB_OBJ) libmoefast.map
	$(CC) -shared -Wl,-soname,libmoefast.so.$(SOVERSION) -Wl,--version-script=libmoefast.map \
	    -o $@ $(LIB_OBJ) $(LIBS)

$(B)/moefast: $(TOOL_OBJ) $(B)/libmoefast.a
	$(CC) $(LDSAN) -o $@ $(TOOL_OBJ) $(B)/libmoefast.a $(CLI_LIBS) $(LIBS)

$(B)/tests/%: tests/%.c $(wildcard tests/*.h) $(B)/libmoefast.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(B)/libmoefast.a $(LDSAN) $(LIBS)

$(B)/bench/%: bench/%.c $(wildcard bench/*.h) $(B)/libmoefast.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(B)/libmoefast.a $(LIBS)

tests-build: $(B)/moefast $(TEST_BIN)

# ---- the README commands ------------------------------------------------
DEFAULT_MODEL := build/models/laguna-default.gguf
RUN_PROMPT ?= The quick brown fox
RUN_N ?= 48

# Regenerated only when the generator changes; otherwise cached.
$(DEFAULT_MODEL): src/lab/gen.c src/lab/gen_vocab.c
	@$(MAKE) --no-print-directory MODE=rel build/rel/moefast
	@mkdir -p $(dir $@)
	build/rel/moefast gen --arch laguna --preset default -o $@

# The golden trace of the default model, recorded on the reference path
# (scalar kernels, one thread, every optimisation off): `run --check` replays
# it with this machine's kernels and threads, and fails on any changed token.
DEFAULT_TRACE := tests/golden/laguna-default.trace.json

run: deps
	@echo "== building build/rel/moefast and the default model (once; a few minutes)"
	@$(MAKE) --no-print-directory -s -j$(JOBS) MODE=rel build/rel/moefast
	@$(MAKE) --no-print-directory -s $(DEFAULT_MODEL)
	@echo "== $(DEFAULT_MODEL): a small laguna with seeded random weights — the text is"
	@echo "== meaningless by design; the engine, tokenizer and timings are real."
	@echo '$$ build/rel/moefast run -m $(DEFAULT_MODEL) -p "$(RUN_PROMPT)" -n $(RUN_N) --check $(DEFAULT_TRACE)'
	@build/rel/moefast run -m $(DEFAULT_MODEL) -p "$(RUN_PROMPT)" -n $(RUN_N) --check $(DEFAULT_TRACE)

test: deps-test
	@$(MAKE) --no-print-directory -j$(JOBS) MODE=asan tests-build
	@$(MAKE) --no-print-directory -j$(JOBS) MODE=rel build/rel/moefast
	@$(MAKE) --no-print-directory -j$(JOBS) MODE=pic build/pic/$(SHLIB)   # for tests/cli_install.sh
	@sh tests/run.sh build/asan

bench: deps
	@$(MAKE) --no-print-directory MODE=rel build/rel/moefast $(BENCH_SRC:bench/%.c=build/rel/bench/%)
	@sh bench/run.sh build/rel

# ---- install -------------------------------------------------------------
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PCDIR      ?= $(LIBDIR)/pkgconfig
HEADERS    := include/moefast.h include/moefast/engine.h include/moefast/lab.h include/moefast/shard.h
D          := $(DESTDIR)

# The .pc file is written on every install: its paths are the final ones
# (PREFIX), not DESTDIR's staging copy, and PREFIX may differ from last time.
install: deps
	@$(MAKE) --no-print-directory MODE=rel build/rel/moefast build/rel/libmoefast.a
	@$(MAKE) --no-print-directory MODE=pic build/pic/$(SHLIB)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' moefast.pc.in > build/moefast.pc
	install -d $(D)$(BINDIR) $(D)$(LIBDIR) $(D)$(PCDIR) $(D)$(INCLUDEDIR)/moefast
	install -m 755 build/rel/moefast $(D)$(BINDIR)/moefast
	install -m 644 build/rel/libmoefast.a $(D)$(LIBDIR)/libmoefast.a
	install -m 755 build/pic/$(SHLIB) $(D)$(LIBDIR)/$(SHLIB)
	ln -sf $(SHLIB) $(D)$(LIBDIR)/libmoefast.so.$(SOVERSION)
	ln -sf libmoefast.so.$(SOVERSION) $(D)$(LIBDIR)/libmoefast.so
	install -m 644 include/moefast.h $(D)$(INCLUDEDIR)/moefast.h
	install -m 644 include/moefast/engine.h include/moefast/lab.h include/moefast/shard.h $(D)$(INCLUDEDIR)/moefast/
	install -m 644 build/moefast.pc $(D)$(PCDIR)/moefast.pc

uninstall:
	rm -f $(D)$(BINDIR)/moefast $(D)$(LIBDIR)/libmoefast.a $(D)$(LIBDIR)/$(SHLIB) \
	      $(D)$(LIBDIR)/libmoefast.so.$(SOVERSION) $(D)$(LIBDIR)/libmoefast.so \
	      $(addprefix $(D)$(INCLUDEDIR)/,$(HEADERS:include/%=%)) $(D)$(PCDIR)/moefast.pc
	rmdir $(D)$(INCLUDEDIR)/moefast 2>/dev/null || true

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d)
