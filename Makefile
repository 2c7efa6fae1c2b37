# qvoice — one non-recursive Makefile. Sources are found by wildcard so that a new module file
# needs no edit here: every .c in the library folders (LIB_DIRS) goes into build/libqvoice.a,
# each tools/NAME.c becomes bin/NAME, each examples/NAME.c build/examples/NAME, each
# tests/unit/test_*.c one cmocka binary.
# Includes name their folder (-I. only); make check-layers enforces docs/architecture.md.
# ISA flags go only to files named *_avx2.c / *_avx512.c (style rule 33): one binary, any x86-64.

CC      ?= cc
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man
WERROR  ?= $(if $(CI),-Werror,)
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WARN     = -std=c11 -Wall -Wextra -Wshadow -Wcast-qual -Wstrict-prototypes -Wswitch-enum -Wundef \
           -Wno-unused-parameter $(WERROR)
CPPFLAGS_ALL = -D_GNU_SOURCE -I. -I/usr/include/cjson $(CPPFLAGS)
LIBS     = -lopenblas -llz4 -lsndfile -lvorbis -logg -lsamplerate -lcjson -lpcre2-8 -lutf8proc -lfftw3f -lcrypto \
           -lpng -lebur128 -lrubberband -lpthread -lm
AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni

B := build
LIB_DIRS := util kernels voicefmt checkpoint features clone engine
LIB_SRC  := $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(B)/%.o)
LIB      := $(B)/libqvoice.a
VERSION  := $(shell sed -n 's/^\#define QV_VERSION_STRING "\(.*\)"/\1/p' include/qvoice.h)
SONAME   := libqvoice.so.$(firstword $(subst ., ,$(VERSION)))
SO       := $(B)/libqvoice.so.$(VERSION)
PUBLIC_H := include/qvoice.h voicefmt/qvf.h
# Applications with a folder of their own (docs/architecture.md): the HTTP server and the
# compressed-checkpoint writer sit over the library; their objects (and -lmicrohttpd) go into
# their binary and their tests only, never into libqvoice. APP_main.c holds the CLI.
APP_DIRS := server compress
app_obj   = $(patsubst %.c,$(B)/%.o,$(filter-out $(1)/main.c,$(wildcard $(1)/*.c)))
TOOLS    := $(patsubst tools/%.c,bin/%,$(wildcard tools/*.c)) bin/qvoice-server bin/qvoice-compress
EXAMPLES := $(patsubst examples/%.c,$(B)/examples/%,$(wildcard examples/*.c))
TEST_SRC := $(wildcard tests/unit/test_*.c)
TESTS    := $(TEST_SRC:tests/unit/%.c=$(B)/tests/%)
TEST_HELPERS := $(wildcard tests/unit/helpers/*.c)
BENCH_SRC := $(wildcard tests/bench/*.c)
BENCH_HELPERS := $(wildcard tests/bench/helpers/*.c)
BENCHES  := $(BENCH_SRC:tests/bench/%.c=$(B)/bench/%)
MKMODEL  := $(B)/tools/mkmodel
MANS     := $(TOOLS:bin/%=$(B)/man/%.1)
# Library code is position-independent for the shared library; calls inside it bind locally.
$(LIB_OBJ): PIC := -fPIC -fno-semantic-interposition
# Examples may include the public headers by their installed names (<qvoice.h>, <qvf.h>), as a
# program built with `pkg-config --cflags qvoice` does.
$(B)/examples/%.o: CPPFLAGS_ALL += -Iinclude -Ivoicefmt

# Generated checkpoints (git-ignored). QVOICE_CACHE may point elsewhere to share them.
# make test also builds the 1.7B pair (issue 4: the mtp-projection path runs end to end).
export QVOICE_CACHE ?= $(CURDIR)/cache

.SECONDARY:
.PHONY: check-layers all test asan tsan fuzz bench bench-kernels deps demo serve-demo serve-lb serve-bench serve-attack install uninstall man clean help models models-full
all: $(LIB) $(SO) $(TOOLS) $(MKMODEL)

help:
	@echo "make            build $(TOOLS), build/libqvoice.a and build/libqvoice.so"
	@echo "make deps       install missing Debian packages (prints the apt-get line when not root)"
	@echo "make test       install deps, build, generate synthetic models, run all tests"
	@echo "make asan       the test suite under AddressSanitizer + UBSan (build-asan/)"
	@echo "make tsan       the concurrency tests under ThreadSanitizer (build-tsan/)"
	@echo "make fuzz       run each fuzz target for a bounded time (FUZZ_SECONDS, default 60)"
	@echo "make bench      benchmark table (full-size synthetic 0.6B)"
	@echo "make bench-kernels  matvec GB/s vs machine read bandwidth"
	@echo "make demo       end-to-end demo on the synthetic model and the bundled clip"
	@echo "make serve-demo qvoice-server on the synthetic 0.6B pair: upload a voice, speak over HTTP, then the studio (GET /)"
	@echo "make serve-lb   nginx balancing two qvoice-servers; one is killed mid-run"
	@echo "make serve-bench  server TTFA, 1 vs 4 streams, 8-client load (hey), soak (also in make bench)"
	@echo "make serve-attack slow sockets vs /health probes, list time of a 300-voice library"
	@echo "make check-layers  check that includes and calls follow docs/architecture.md (no cycle),"
	@echo "                that no library, server or tool function is over 100 lines and every docs pointer resolves"
	@echo "make man        man pages of the tools from their --help (build/man/)"
	@echo "make install    install tools, libraries, headers, qvoice.pc and man pages into"
	@echo "                [DESTDIR]PREFIX (PREFIX=$(PREFIX))"
	@echo "make uninstall  remove what make install installed (same PREFIX and DESTDIR)"
	@echo "make clean      remove build/, build-asan/, build-tsan/ and bin/"

deps:
	@scripts/deps.sh

check-layers: all
	@mkdir -p $(B) && B=$(B) scripts/check-layers.sh && scripts/check-functions.sh
	@scripts/check-doc-pointers.sh

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(WARN) $(CFLAGS) $(PIC) -MMD -MP -c $< -o $@

$(B)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(WARN) $(CFLAGS) $(PIC) $(AVX2_FLAGS) -MMD -MP -c $< -o $@

$(B)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(WARN) $(CFLAGS) $(PIC) $(AVX512_FLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# build/libqvoice.so: the same objects (-fPIC), exporting exactly the functions the public headers
# declare (scripts/exports.sh writes the version script); the soname carries the major version.
# The tools and tests link the static archive.
$(B)/qvoice.map: $(PUBLIC_H) scripts/exports.sh
	@mkdir -p $(dir $@)
	CC="$(CC)" scripts/exports.sh $(PUBLIC_H) > $@.tmp && mv $@.tmp $@

$(SO): $(LIB_OBJ) $(B)/qvoice.map
	$(CC) -shared $(CFLAGS) $(LDFLAGS) -Wl,-soname,$(SONAME) -Wl,--version-script=$(B)/qvoice.map \
	  -Wl,--no-undefined -o $@ $(LIB_OBJ) $(LIBS)
	ln -sf $(notdir $@) $(B)/$(SONAME) && ln -sf $(SONAME) $(B)/libqvoice.so

bin/%: $(B)/tools/%.o $(LIB)
	@mkdir -p bin
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LIBS)

# The studio's static files (server/studio/) are compiled into the server (scripts/embed-studio.sh):
# nothing to install beside the binary, and an edited page needs only a relink.
STUDIO_FILES := $(sort $(wildcard server/studio/*))
$(B)/gen/studio_assets.c: $(STUDIO_FILES) scripts/embed-studio.sh
	@mkdir -p $(dir $@)
	scripts/embed-studio.sh $(STUDIO_FILES) > $@.tmp && mv $@.tmp $@
$(B)/gen/studio_assets.o: $(B)/gen/studio_assets.c
	$(CC) $(CPPFLAGS_ALL) $(WARN) $(CFLAGS) -MMD -MP -c $< -o $@

bin/qvoice-server: $(B)/server/main.o $(call app_obj,server) $(B)/gen/studio_assets.o $(LIB)
	@mkdir -p bin
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) -lmicrohttpd -lcurl $(LIBS)

bin/qvoice-compress: $(B)/compress/main.o $(call app_obj,compress) $(LIB)
	@mkdir -p bin
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(LIBS)
$(B)/tests/test_compress: $(call app_obj,compress)

# The HTTP fuzz targets' replay (tests/fuzz/fuzz_server.h) runs an in-process server; the
# WebSocket test replays fuzz_ws_frame on server/ws.c.
$(B)/tests/test_server_replay $(B)/tests/test_server_ws: $(B)/tests/%: $(B)/tests/unit/%.o $(call app_obj,server) $(B)/gen/studio_assets.o $(TEST_HELPERS:%.c=$(B)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) -lmicrohttpd -lcurl $(LIBS) -lcmocka

# test_server's text-side race: an LD_PRELOAD shim that slows the removal of a shared text side
# (tests/tools/slow_textside.c), built without the sanitizers whatever CFLAGS say, as it is
# loaded in front of them.
SLOW_TEXTSIDE := $(B)/tests/tools/slow_textside.so
$(SLOW_TEXTSIDE): tests/tools/slow_textside.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(WARN) -O1 -g -fPIC -shared -o $@ $< -ldl
$(B)/tests/test_server: | $(SLOW_TEXTSIDE)

$(B)/examples/%: $(B)/examples/%.o $(LIB)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LIBS)

$(MKMODEL): $(B)/tests/tools/mkmodel.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LIBS)

$(B)/tests/%: $(B)/tests/unit/%.o $(TEST_HELPERS:%.c=$(B)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(LIBS) -lcmocka

# The audio-upload fuzz harness as a plain program (tests/fuzz/fuzz_audio_load.c, -DQV_FUZZ_MAIN):
# the reader of POST /v1/audio/voices (features/audio.c) with ASan + UBSan, whatever CFLAGS say;
# test_audio_fuzz runs it for a bounded count in make test, make fuzz runs the libFuzzer build.
FUZZ_AUDIO := $(B)/fuzz-asan/fuzz_audio_load
$(FUZZ_AUDIO): tests/fuzz/fuzz_audio_load.c features/audio.c features/features.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS_ALL) $(WARN) -DQV_FUZZ_MAIN -O1 -g -fno-omit-frame-pointer \
	  -fsanitize=address,undefined -fno-sanitize-recover=undefined -o $@ $(filter %.c,$^) \
	  -lsndfile -lvorbis -logg -lsamplerate -lm
$(B)/tests/test_audio_fuzz: | $(FUZZ_AUDIO)

$(B)/bench/%: $(B)/tests/bench/%.o $(BENCH_HELPERS:%.c=$(B)/%.o) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)
# bench_watermark adds the tests' noise and reads their texts (one generator of each for both)
$(B)/bench/bench_watermark: $(B)/tests/unit/helpers/noise.o $(B)/tests/unit/helpers/speech_text.o

# Synthetic checkpoints: tiny for unit tests, full-size 0.6B for the golden checks.
models: $(MKMODEL)
	@MKMODEL=$(MKMODEL) scripts/models.sh tiny
models-full: $(MKMODEL)
	@MKMODEL=$(MKMODEL) scripts/models.sh full

test: deps
	@$(MAKE) --no-print-directory all $(EXAMPLES) $(TESTS)
	@$(MAKE) --no-print-directory check-layers
	@QVOICE_MODELS_17B=1 $(MAKE) --no-print-directory models models-full
	@QVOICE_MODELS_17B=1 tests/run.sh $(TESTS)

# The tests run bin/*, so the tools are relinked with the sanitizers first and removed afterwards
# (either build's bin/ would otherwise look up to date to the other one).
asan:
	@rm -f $(TOOLS); $(MAKE) --no-print-directory B=build-asan OPT=-O1 \
	  CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  LDFLAGS="-fsanitize=address,undefined" test; rc=$$?; rm -f $(TOOLS); exit $$rc

# The tests that run threads over shared state (one cloner serving concurrent clones, FFTW
# planning, concurrent syntheses on one model and shared voices, cancellation, the batch step's
# rendezvous, the batch runner; the server: 8 parallel clone uploads x 5 rounds, concurrent
# streams, disconnects, the drain, two servers on one library), built and run under
# ThreadSanitizer; tools relinked as for asan. A race makes a test fail, or a server exit 66.
# Waits scale with util/slowdown.h. test_server alone: 16 min at a load of 20 on 2 cores.
TSAN_TESTS := $(addprefix build-tsan/tests/,test_fft test_cloner test_synth test_batch_step test_batch \
  test_server)
tsan:
	@rm -f $(TOOLS); $(MAKE) --no-print-directory B=build-tsan OPT=-O1 \
	  CFLAGS="-O1 -g -fsanitize=thread -fno-omit-frame-pointer" LDFLAGS="-fsanitize=thread" \
	  $(TOOLS) build-tsan/tools/mkmodel $(TSAN_TESTS) && \
	  TSAN_OPTIONS="second_deadlock_stack=1 $$TSAN_OPTIONS" tests/run.sh $(TSAN_TESTS); rc=$$?; rm -f $(TOOLS); exit $$rc

fuzz:
	@scripts/fuzz.sh

bench: deps
	@$(MAKE) --no-print-directory all $(BENCHES) models-full
	@scripts/bench.sh
	@scripts/bench-compress.sh
	@scripts/serve-bench.sh

serve-bench: deps
	@$(MAKE) --no-print-directory all $(B)/bench/bench_batch models-full
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

serve-attack: all
	@scripts/serve-attack.sh

serve-lb: deps
	@$(MAKE) --no-print-directory all models
	@scripts/serve-lb.sh

# Man pages: help2man runs each tool's --help and --version.
man: $(MANS)
$(B)/man/%.1: bin/%
	@mkdir -p $(dir $@)
	help2man --no-info --no-discard-stderr -n "$$($< --help 2>&1 | sed -n 's/^ *$*[^ ]* - //p' | head -1)" \
	  -o $@.tmp $< && mv $@.tmp $@

# qvoice.pc names the PREFIX/LIBDIR/INCLUDEDIR given here (scripts/pc.sh: each -lNAME of LIBS
# becomes a Requires.private when NAME.pc or libNAME.pc exists, else stays in Libs.private).
install: all $(MANS)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) \
	  $(DESTDIR)$(MANDIR)/man1
	install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)/
	install -m 644 $(LIB) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SO) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(SO)) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libqvoice.so
	install -m 644 $(PUBLIC_H) $(DESTDIR)$(INCLUDEDIR)/
	scripts/pc.sh qvoice.pc.in "$(PREFIX)" "$(LIBDIR)" "$(INCLUDEDIR)" "$(VERSION)" "$(LIBS)" \
	  > $(DESTDIR)$(LIBDIR)/pkgconfig/qvoice.pc
	install -m 644 $(MANS) $(DESTDIR)$(MANDIR)/man1/

uninstall:
	rm -f $(TOOLS:bin/%=$(DESTDIR)$(BINDIR)/%) $(MANS:$(B)/man/%=$(DESTDIR)$(MANDIR)/man1/%) \
	  $(DESTDIR)$(LIBDIR)/libqvoice.a $(DESTDIR)$(LIBDIR)/libqvoice.so $(DESTDIR)$(LIBDIR)/$(SONAME) \
	  $(DESTDIR)$(LIBDIR)/$(notdir $(SO)) $(DESTDIR)$(LIBDIR)/pkgconfig/qvoice.pc \
	  $(addprefix $(DESTDIR)$(INCLUDEDIR)/,$(notdir $(PUBLIC_H)))

clean:
	rm -rf build build-asan build-tsan bin

-include $(shell find $(B) -name '*.d' 2>/dev/null)
