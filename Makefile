# DSTL build. `make` builds the library, the `dstl` command, every test and benchmark;
# `make run` runs the embedded default; `make test` runs the tests (it starts the S3 server
# they need); `make perf` runs the benchmarks. `make SANITIZE=address|undefined|thread`
# builds into build/<variant>/ and `make test SANITIZE=...` runs the same tests there.
#
# Sources are found by directory: wire/*.c, s3/*.c, dstl/*.c and dstl/*/*.c make the library
# (the command's own files are dstl/cmd/*.c); tests/test_*.c are one Criterion binary each;
# tests/tools/*.c and perf/*.c are programs; tests/fuzz/fuzz_*.c are libFuzzer targets.

SHELL    := /bin/bash
CC       ?= cc
PREFIX   ?= /usr/local
SANITIZE ?=
VERSION  := 0.1.0

# Quiet by default: one line per step (`CC dstl/writer.o`, `LD build/dstl`); `make V=1` prints
# every command line in full.
V ?= 0
ifeq ($(V),1)
Q :=
say = @true
else
Q := @
say = @printf '  %-6s %s\n' $(1) $(2)
endif

# BUILD moves the whole tree (parallel work in one checkout); LIB_SRCS narrows the library.
BUILD    ?= build
ifeq ($(SANITIZE),)
B := $(BUILD)
SANFLAGS :=
else ifeq ($(SANITIZE),address)
B := $(BUILD)/address
SANFLAGS := -fsanitize=address -fno-omit-frame-pointer
else ifeq ($(SANITIZE),undefined)
B := $(BUILD)/undefined
SANFLAGS := -fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
else ifeq ($(SANITIZE),thread)
B := $(BUILD)/thread
SANFLAGS := -fsanitize=thread
else
$(error SANITIZE must be address, undefined or thread, not '$(SANITIZE)')
endif

# The dependency stamp: scripts/deps.sh is the one list of packages; it runs once per machine.
DEPS_STAMP := build/.deps-ok
PKGS       := libcurl openssl liburing libprotobuf-c libxml-2.0 liblz4 libzstd

WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Werror
CFLAGS   ?= -O2 -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -fPIC $(WARN) $(CFLAGS) $(SANFLAGS) \
             $(TEST_INC) -Iinclude -I. -I$(B)/gen -DDSTL_VERSION='"$(VERSION)"' \
             $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LIBS      = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -laio -lpthread -lm
LDFLAGS_ALL = $(SANFLAGS) $(LDFLAGS)

PROTO      := wire/dstl.proto
GEN_C      := $(B)/gen/wire/dstl.pb-c.c
GEN_H      := $(B)/gen/wire/dstl.pb-c.h

LIB_SRCS   ?= $(filter-out dstl/cmd/%.c,$(wildcard wire/*.c s3/*.c dstl/*.c dstl/*/*.c))
LIB_OBJS   := $(LIB_SRCS:%.c=$(B)/obj/%.o) $(B)/obj/gen/dstl.pb-c.o
CMD_SRCS   := $(wildcard dstl/cmd/*.c)
CMD_OBJS   := $(CMD_SRCS:%.c=$(B)/obj/%.o)
TEST_SRCS  := $(wildcard tests/test_*.c)
TEST_BINS  := $(TEST_SRCS:tests/%.c=$(B)/tests/%)
THELP_SRCS := $(wildcard tests/helpers*.c) tests/payload.c
THELP_OBJS := $(THELP_SRCS:%.c=$(B)/obj/%.o)
# The one payload generator (tests/payload.h), linked into the tests, the tools and perf.
PAYLOAD_OBJ := $(B)/obj/tests/payload.o
# The API cases (tests/api_cases.c), linked into the two binaries that run them: test_dstl_api
# (local durability) and test_remote_api (remote), each supplying its storage's settings.
API_CASES_OBJ := $(B)/obj/tests/api_cases.o
TOOL_SRCS  := $(wildcard tests/tools/*.c)
TOOL_BINS  := $(TOOL_SRCS:tests/tools/%.c=$(B)/tools/%) \
              $(B)/tools/crash_child-skip-fdatasync $(B)/tools/crash_child-skip-dirsync
# The reference state backend (backend/): a client of the public header only, linked into the
# checkpoint benchmark, its tests and the demo program of `make run` (backend/demo.c).
BACKEND_SRCS := $(filter-out backend/demo.c,$(wildcard backend/*.c))
BACKEND_OBJS := $(BACKEND_SRCS:%.c=$(B)/obj/%.o)
BACKEND_TESTS = $(filter $(B)/tests/test_backend%,$(TEST_BINS))
PERF_SRCS  := $(wildcard perf/*.c)
PERF_BINS  := $(PERF_SRCS:perf/%.c=$(B)/perf/%)
FUZZ_SRCS  := $(wildcard tests/fuzz/fuzz_*.c)

# Criterion 2.4 cannot start under TSan (its boxfort arena mmaps where TSan's shadow lives,
# upstream Criterion #274), so the thread variant builds the same test sources against the
# Criterion-compatible shim in tests/shim: its headers first on the tests' include path, its
# runner linked instead of -lcriterion.
ifeq ($(SANITIZE),thread)
$(B)/obj/tests/%.o: TEST_INC := -Itests/shim
TEST_RUNNER := $(B)/obj/tests/shim/shim_runner.o
TEST_LINK   := $(TEST_RUNNER)
else
TEST_RUNNER :=
TEST_LINK   := -lcriterion
endif

.PHONY: all deps lib test run perf fuzz soak install clean
.DELETE_ON_ERROR:
# Objects are intermediate files to make; keep them so a relink does not recompile.
.SECONDARY:

all: $(B)/libdstl.a $(B)/libdstl.so $(B)/dstl $(B)/dstl-backend-demo $(TEST_BINS) $(TOOL_BINS) $(PERF_BINS)

deps: $(DEPS_STAMP)
$(DEPS_STAMP): scripts/deps.sh
	@scripts/deps.sh --check >/dev/null || scripts/deps.sh
	@mkdir -p $(@D) && touch $@

lib: $(B)/libdstl.a $(B)/libdstl.so

$(GEN_C) $(GEN_H) &: $(PROTO) | $(DEPS_STAMP)
	@mkdir -p $(B)/gen
	$(call say,PROTOC,$(PROTO))
	$(Q)protoc-c --c_out=$(B)/gen $(PROTO)

# Generated code: built with the project's flags except the prototype checks it cannot meet.
$(B)/obj/gen/dstl.pb-c.o: $(GEN_C)
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -MMD -MP -c $< -o $@

$(B)/obj/%.o: %.c $(GEN_H) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,CC,$(<:.c=.o))
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(B)/libdstl.a: $(LIB_OBJS)
	@rm -f $@
	$(call say,AR,$@)
	$(Q)ar rcs $@ $^

# Only dstl_* symbols are exported from the shared library (dstl/libdstl.map).
$(B)/libdstl.so: $(LIB_OBJS) dstl/libdstl.map
	$(call say,LD,$@)
	$(Q)$(CC) -shared -Wl,-soname,libdstl.so.0 -Wl,--version-script=dstl/libdstl.map \
	      $(LDFLAGS_ALL) -o $@ $(LIB_OBJS) $(LIBS)

$(B)/dstl: $(CMD_OBJS) $(B)/libdstl.a
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $(CMD_OBJS) $(B)/libdstl.a $(LIBS)

$(B)/tests/%: $(B)/obj/tests/%.o $(THELP_OBJS) $(TEST_RUNNER) $(B)/libdstl.a
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $< $(TEST_CASES) $(THELP_OBJS) $(B)/libdstl.a $(LIBS) $(TEST_LINK)

$(BACKEND_TESTS): $(BACKEND_OBJS)
$(BACKEND_TESTS): TEST_CASES := $(BACKEND_OBJS)

$(B)/dstl-backend-demo: $(B)/obj/backend/demo.o $(BACKEND_OBJS) $(B)/libdstl.a
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $< $(BACKEND_OBJS) $(B)/libdstl.a $(LIBS)

$(B)/tests/test_dstl_api $(B)/tests/test_remote_api: $(API_CASES_OBJ)
$(B)/tests/test_dstl_api $(B)/tests/test_remote_api: TEST_CASES := $(API_CASES_OBJ)

$(B)/tools/%: $(B)/obj/tests/tools/%.o $(PAYLOAD_OBJ) $(B)/libdstl.a
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $< $(PAYLOAD_OBJ) $(B)/libdstl.a $(LIBS)

# The power-cut simulator (tests/tools/powercut_fs.c) is the one program on libfuse3; it does not
# link the library, and the library's link line never has fuse3.
FUSE_CFLAGS = $(shell pkg-config --cflags fuse3 2>/dev/null)
FUSE_LIBS   = $(shell pkg-config --libs fuse3 2>/dev/null)
$(B)/obj/tests/tools/powercut_fs.o: ALL_CFLAGS += $(FUSE_CFLAGS)
$(B)/tools/powercut_fs: $(B)/obj/tests/tools/powercut_fs.o
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $< $(FUSE_LIBS)

# Test-only variants of the local store, linked only into extra crash_child programs for the
# power-cut bite tests (tests/test_dstl_powercut.c): each compiles dstl/local/segstore.c with one sync
# switched off, to prove the simulator catches its absence. The library never has them.
SEGSTORE_DEFS_skip-fdatasync := -DDSTL_TEST_SKIP_SEGMENT_FDATASYNC
SEGSTORE_DEFS_skip-dirsync   := -DDSTL_TEST_SKIP_DIR_FSYNC
# Static patterns (only these two names): a plain pattern would also match the dependency
# files the compiler writes beside them, which make then tries to rebuild as programs.
SEGSTORE_VARIANTS := skip-fdatasync skip-dirsync
$(SEGSTORE_VARIANTS:%=$(B)/obj/dstl/local/segstore-%.o): $(B)/obj/dstl/local/segstore-%.o: dstl/local/segstore.c $(GEN_H) | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,CC,$@)
	$(Q)$(CC) $(ALL_CFLAGS) $(SEGSTORE_DEFS_$*) -MMD -MP -c $< -o $@
$(SEGSTORE_VARIANTS:%=$(B)/tools/crash_child-%): $(B)/tools/crash_child-%: $(B)/obj/tests/tools/crash_child.o $(B)/obj/dstl/local/segstore-%.o $(PAYLOAD_OBJ) $(B)/libdstl.a
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(B)/libdstl.a $(LIBS)

$(B)/perf/%: $(B)/obj/perf/%.o $(PAYLOAD_OBJ) $(BACKEND_OBJS) $(B)/libdstl.a
	@mkdir -p $(@D)
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $< $(PAYLOAD_OBJ) $(BACKEND_OBJS) $(B)/libdstl.a $(LIBS)

# make test [SANITIZE=...] [TESTS=pattern]: first the structure check (scripts/check-structure:
# its self-test, then the tree), then every test binary, with the S3 server started (and
# stopped, also on failure) by tests/run.sh. The tests run even when the check fails, so one
# run shows both; make test fails when either does.
test: all
	@scripts/check-structure --selftest && scripts/check-structure && scripts/check-calls --selftest && \
	  scripts/check-calls $(B); s=$$?; \
	  tests/run.sh $(B) $(TESTS); t=$$?; \
	  [ $$s -eq 0 ] || echo "make test: FAILED: scripts/check-structure or scripts/check-calls (their findings are at the top)" >&2; \
	  [ $$s -eq 0 ] && [ $$t -eq 0 ]

# The README's first command: the embedded default (local durability, no remote): the
# reference state backend's story (backend/demo.c): keyed state, checkpoints,
# materialization, a failure and a verified restore. `dstl demo` is the log alone.
run: $(B)/dstl-backend-demo
	$(B)/dstl-backend-demo --config configs/local.conf $(RUN_ARGS)

perf: all
	@scripts/deps.sh --perf
	perf/run.sh $(B)

soak: all
	DSTL_SOAK=1 tests/run.sh $(B) $(TESTS)

# libFuzzer targets: clang, built apart from the rest.
FUZZ_SECONDS ?= 60
FUZZ_B := build/fuzz
FUZZ_CFLAGS = -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
              -Iinclude -I. -I$(FUZZ_B)/gen -DDSTL_VERSION='"$(VERSION)"' \
              $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
fuzz: | $(DEPS_STAMP)
	@mkdir -p $(FUZZ_B)/gen $(FUZZ_B)/bin
	protoc-c --c_out=$(FUZZ_B)/gen $(PROTO)
	@set -e; for f in $(FUZZ_SRCS); do n=$$(basename $$f .c); \
	  echo "fuzz: $$n"; \
	  clang $(FUZZ_CFLAGS) -o $(FUZZ_B)/bin/$$n $$f $(filter-out dstl/cmd/%.c,$(wildcard wire/*.c s3/*.c dstl/*.c dstl/*/*.c)) \
	    $(FUZZ_B)/gen/wire/dstl.pb-c.c $(LIBS); \
	  mkdir -p $(FUZZ_B)/corpus/$$n; \
	  $(FUZZ_B)/bin/$$n -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    $(FUZZ_B)/corpus/$$n tests/fuzz/corpus/$$n; done

install: $(B)/libdstl.a $(B)/libdstl.so $(B)/dstl
	install -d $(PREFIX)/lib/pkgconfig $(PREFIX)/include $(PREFIX)/bin
	install -m 644 $(B)/libdstl.a $(PREFIX)/lib/libdstl.a
	install -m 755 $(B)/libdstl.so $(PREFIX)/lib/libdstl.so.0
	ln -sf libdstl.so.0 $(PREFIX)/lib/libdstl.so
	install -m 644 include/dstl.h $(PREFIX)/include/dstl.h
	install -m 755 $(B)/dstl $(PREFIX)/bin/dstl
	sed -e 's|@PREFIX@|$(abspath $(PREFIX))|' -e 's|@VERSION@|$(VERSION)|' \
	    -e 's|@PKGS@|$(PKGS)|' dstl/dstl.pc.in > $(PREFIX)/lib/pkgconfig/dstl.pc

clean:
	rm -rf build/obj build/gen build/tests build/tools build/perf build/libdstl.* build/dstl build/dstl-backend-demo \
	       build/address build/undefined build/thread build/fuzz

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
