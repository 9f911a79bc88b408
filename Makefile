# moefast — plain GNU Makefile.
#   make            release build: build/rel/moefast
#   make run        build, generate the default model (cached), run it
#   make test       ASan+UBSan build, then the whole test suite
#   make bench      benchmarks (timing; never part of the tests)
# Missing Debian packages are installed by scripts/deps.sh (as root).

CC      ?= gcc
PKGS    := libpcre2-8 jansson libcrypto
# -ffp-contract=off: the compiler must never fuse a*b+c on its own; the
# kernels' reduction order (src/quant/quant.h) is part of their contract.
CSTD    := -std=c11 -D_GNU_SOURCE -ffp-contract=off -fno-math-errno
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter
INC     := -Iinclude -Isrc
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
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

MODE ?= rel
ifeq ($(MODE),asan)
  OPT := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -DMOE_TEST_BUILD
  LDSAN := -fsanitize=address,undefined
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
TEST_BIN := $(TEST_SRC:tests/%.c=$(B)/tests/%)
BENCH_BIN:= $(BENCH_SRC:bench/%.c=$(B)/bench/%)

.PHONY: all deps run test bench clean lib tests-build
all: deps $(B)/moefast

deps:
	@sh scripts/deps.sh

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

$(B)/moefast: $(TOOL_OBJ) $(B)/libmoefast.a
	$(CC) $(LDSAN) -o $@ $(TOOL_OBJ) $(B)/libmoefast.a $(LIBS)

$(B)/tests/%: tests/%.c tests/check.h $(B)/libmoefast.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Itests -o $@ $< $(B)/libmoefast.a $(LDSAN) $(LIBS)

$(B)/bench/%: bench/%.c $(B)/libmoefast.a
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

run: deps
	@$(MAKE) --no-print-directory MODE=rel build/rel/moefast
	@$(MAKE) --no-print-directory $(DEFAULT_MODEL)
	@echo "== $(DEFAULT_MODEL): a small laguna with seeded random weights — the text is"
	@echo "== meaningless by design; the engine, tokenizer and timings are real."
	build/rel/moefast run -m $(DEFAULT_MODEL) -p "$(RUN_PROMPT)" -n $(RUN_N)

test: deps
	@$(MAKE) --no-print-directory MODE=asan tests-build
	@$(MAKE) --no-print-directory MODE=rel build/rel/moefast
	@sh tests/run.sh build/asan

bench: deps
	@$(MAKE) --no-print-directory MODE=rel build/rel/moefast $(BENCH_SRC:bench/%.c=build/rel/bench/%)
	@sh bench/run.sh build/rel

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d)
