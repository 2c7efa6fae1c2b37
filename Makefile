# qvoice — one non-recursive Makefile. Sources are found by wildcard so that a new module file
# needs no edit here: every .c in the library folders (LIB_DIRS) goes into build/libqvoice.a,
# each tools/NAME.c becomes bin/NAME, each examples/NAME.c build/examples/NAME, each
# tests/unit/test_*.c one cmocka binary.
# Includes name their folder (-I. only); make check-layers enforces docs/architecture.md.
# ISA flags go only to files named *_avx2.c / *_avx512.c (style rule 33): one binary, any x86-64.

CC      ?= cc
PREFIX  ?= /usr/local
WERROR  ?= $(if $(CI),-Werror,)
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WARN     = -std=c11 -Wall -Wextra -Wshadow -Wcast-qual -Wstrict-prototypes -Wswitch-enum -Wundef \
           -Wno-unused-parameter $(WERROR)
CPPFLAGS_ALL = -D_GNU_SOURCE -I. -I/usr/include/cjson $(CPPFLAGS)
LIBS     = -lopenblas -llz4 -lmicrohttpd -lsndfile -lsamplerate -lcjson -lpcre2-8 -lutf8proc -lfftw3f -lcrypto \
           -lpng -lebur128 -lpthread -lm
AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni

B := build
LIB_DIRS := util kernels voicefmt checkpoint features clone engine server
LIB_SRC  := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(B)/%.o)
LIB      := $(B)/libqvoice.a
TOOLS    := $(patsubst tools/%.c,bin/%,$(wildcard tools/*.c))
EXAMPLES := $(patsubst examples/%.c,$(B)/examples/%,$(wildcard examples/*.c))
TEST_SRC := $(wildcard tests/unit/test_*.c)
TESTS    := $(TEST_SRC:tests/unit/%.c=$(B)/tests/%)
TEST_HELPERS := $(wildcard tests/unit/helpers/*.c)
BENCH_SRC := $(wildcard tests/bench/*.c)
BENCHES  := $(BENCH_SRC:tests/bench/%.c=$(B)/bench/%)
MKMODEL  := $(B)/tools/mkmodel

# Generated checkpoints (git-ignored). QVOICE_CACHE may point elsewhere to share them.
# make test also builds the 1.7B pair (issue 4: the mtp-projection path runs end to end).
export QVOICE_CACHE ?= $(CURDIR)/cache

.SECONDARY:
.PHONY: check-layers all test asan fuzz bench bench-kernels deps demo serve-demo serve-lb serve-bench install clean help models models-full check-tools
all: $(LIB) $(TOOLS) $(MKMODEL)

help:
	@echo "make            build bin/clone bin/speak bin/voicefmt and build/libqvoice.a"
	@echo "make deps       install missing Debian packages (prints the apt-get line when not root)"
	@echo "make test       install deps, build, generate synthetic models, run all tests"
	@echo "make asan       the test suite under AddressSanitizer + UBSan (build-asan/)"
	@echo "make fuzz       run each fuzz target for a bounded time (FUZZ_SECONDS, default 60)"
	@echo "make bench      benchmark table (full-size synthetic 0.6B)"
	@echo "make bench-kernels  matvec GB/s vs machine read bandwidth"
	@echo "make demo       end-to-end demo on the synthetic model and the bundled clip"
	@echo "make serve-demo qvoice-server on the synthetic 0.6B pair: upload a voice, speak over HTTP"
	@echo "make serve-lb   nginx balancing two qvoice-servers; one is killed mid-run"
	@echo "make serve-bench  server TTFA, 1 vs 4 streams, 8-client load (hey), soak (also in make bench)"
	@echo "make install    install library, headers, tools and qvoice.pc into PREFIX=$(PREFIX)"

deps:
	@scripts/deps.sh

check-layers:
	@mkdir -p $(B) && B=$(B) scripts/check-layers.sh

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(WARN) $(CFLAGS) -MMD -MP -c $< -o $@

$(B)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(WARN) $(CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@

$(B)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(WARN) $(CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

bin/%: $(B)/tools/%.o $(LIB)
	@mkdir -p bin
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LIBS)

$(B)/examples/%: $(B)/examples/%.o $(LIB)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LIBS)

$(MKMODEL): $(B)/tests/tools/mkmodel.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LIBS)

$(B)/tests/%: $(B)/tests/unit/%.o $(TEST_HELPERS:%.c=$(B)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS) -lcmocka

$(B)/bench/%: $(B)/tests/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

# Synthetic checkpoints: tiny for unit tests, full-size 0.6B for the golden checks.
models: $(MKMODEL)
	@MKMODEL=$(MKMODEL) scripts/models.sh tiny
models-full: $(MKMODEL)
	@MKMODEL=$(MKMODEL) scripts/models.sh full

test: deps
	@$(MAKE) --no-print-directory all $(EXAMPLES) $(TESTS)
	@QVOICE_MODELS_17B=1 $(MAKE) --no-print-directory models models-full
	@QVOICE_MODELS_17B=1 tests/run.sh $(TESTS)

# The tests run bin/*, so the tools are relinked with the sanitizers first and removed afterwards
# (either build's bin/ would otherwise look up to date to the other one).
asan:
	@rm -f $(TOOLS); $(MAKE) --no-print-directory B=build-asan OPT=-O1 \
	  CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  LDFLAGS="-fsanitize=address,undefined" test; rc=$$?; rm -f $(TOOLS); exit $$rc

fuzz:
	@scripts/fuzz.sh

bench: deps
	@$(MAKE) --no-print-directory all $(BENCHES) models-full
	@scripts/bench.sh
	@scripts/serve-bench.sh

serve-bench: deps
	@$(MAKE) --no-print-directory all models-full
	@scripts/serve-bench.sh

bench-kernels: deps
	@$(MAKE) --no-print-directory $(B)/bench/bench_kernels
	@$(B)/bench/bench_kernels

demo: deps
	@$(MAKE) --no-print-directory all models-full
	@scripts/demo.sh

serve-demo: deps
	@$(MAKE) --no-print-directory all models-full
	@scripts/serve-demo.sh

serve-lb: deps
	@$(MAKE) --no-print-directory all models
	@scripts/serve-lb.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/qvoice.h voicefmt/qvf.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/

clean:
	rm -rf build build-asan bin

-include $(shell find $(B) -name '*.d' 2>/dev/null)
