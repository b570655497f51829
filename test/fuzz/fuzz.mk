# libFuzzer targets for the pure modules; included by the main Makefile.
#   make fuzz-regress            build, replay the seed corpus and every regression (seconds)
#   make fuzz-run                replay, then fuzz each target for FUZZ_SECONDS
#   make -j2 fuzz-run            two targets at a time
#   make fuzz-run-api            one target (api, envelope, record, config)
# Needs clang with its fuzzer runtime (scripts/fuzz.sh installs both on Debian).
# Crashes are written to $(FUZZ_BUILD)/artifacts/<target>/; a crash found becomes a file in
# test/fuzz/regressions/<target>/, replayed by both targets above from then on.

FUZZ_TARGETS := api envelope record config
FUZZ_BUILD   := build-fuzz
FUZZ_SECONDS ?= 300
FUZZ_CC      ?= clang
FUZZ_DIR     := test/fuzz
# Extra libFuzzer flags, e.g. FUZZ_FLAGS=-jobs=2 or -use_value_profile=1.
FUZZ_FLAGS   ?=
# A run that hangs on one input for this long fails as a timeout (libFuzzer's own default is
# 20 minutes, longer than a whole run).
FUZZ_TIMEOUT ?= 10

# The pure modules are compiled here with clang and the fuzzer's coverage instrumentation:
# the gcc-built objects in build/ have none. PURE comes from the main Makefile when set.
FUZZ_PURE     = $(or $(PURE),lib/log core/levels core/envelope core/job lib/heap core/api core/offsets core/config)
FUZZ_PKGS    := jansson msgpack libconfig
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := -g -O1 -fno-omit-frame-pointer -std=c11 -D_GNU_SOURCE -Iinclude \
                -Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Wwrite-strings \
                -Wformat=2 -Wvla -fno-common -Wshadow -Werror \
                $(shell pkg-config --cflags $(FUZZ_PKGS) 2>/dev/null)
FUZZ_LIBS    := $(shell pkg-config --libs $(FUZZ_PKGS) 2>/dev/null)
FUZZ_OBJ      = $(FUZZ_PURE:%=$(FUZZ_BUILD)/obj/%.o)
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
# A report names the line in src/ that failed. Leaks inside libconfig 1.5 itself (its scanner
# loses a string buffer on some syntax errors, also with a bare config_init/config_read_string/
# config_destroy) are not ours: lsan.supp names them.
FUZZ_ENV      = UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
                LSAN_OPTIONS=suppressions=$(CURDIR)/$(FUZZ_DIR)/lsan.supp \
                ASAN_OPTIONS=$(FUZZ_ASAN_$*)
# record: msgpack-c allocates room for every element a container header declares before it
# reads any, so 5 bytes (a map32 of 2^32-1 pairs) ask malloc for 256 GB. A production malloc
# refuses that, or the kernel reserves address space that is never touched, and job_unpack
# rejects the truncated record: harmless. Under ASan it is not: freeing such a block poisons
# 1/8 of its size in shadow memory, gigabytes of RSS. So here, as in production, malloc fails
# for such sizes and job_unpack must cope with NULL; the inputs of the target are 4 KB at most.
FUZZ_ASAN_record := allocator_may_return_null=1:max_allocation_size_mb=256

.PHONY: fuzz-build fuzz-run fuzz-regress fuzz-clean \
        $(FUZZ_TARGETS:%=fuzz-run-%) $(FUZZ_TARGETS:%=fuzz-regress-%)

fuzz-build: $(FUZZ_BINS)

$(FUZZ_BUILD)/obj/%.o: src/%.c $(wildcard include/*/*.h)
	@mkdir -p $(@D)
	@echo "  FUZZCC  $<"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_SAN) -c -o $@ $<

$(FUZZ_BINS): $(FUZZ_BUILD)/fuzz_%: $(FUZZ_DIR)/fuzz_%.c $(FUZZ_OBJ)
	@echo "  FUZZLD  $@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $< $(FUZZ_OBJ) $(FUZZ_LIBS)

# Inputs replayed before any fuzzing: every regression, then the seed corpus.
fuzz_replay = $(wildcard $(FUZZ_DIR)/regressions/$(1)/*) $(wildcard $(FUZZ_DIR)/corpus/$(1)/*)

# Each input runs once (files, not directories, make libFuzzer run and exit): any crash fails.
fuzz-regress: $(FUZZ_TARGETS:%=fuzz-regress-%)

$(FUZZ_TARGETS:%=fuzz-regress-%): fuzz-regress-%: $(FUZZ_BUILD)/fuzz_%
	$(if $(strip $(call fuzz_replay,$*)),,$(error fuzz $*: nothing to replay in $(FUZZ_DIR)))
	@$(FUZZ_ENV) $< $(call fuzz_replay,$*) > $(FUZZ_BUILD)/regress-$*.log 2>&1 \
	  && echo "fuzz $*: regressions and corpus replayed clean" \
	  || { tail -n 40 $(FUZZ_BUILD)/regress-$*.log; echo "fuzz $*: FAILED on replay, see $(FUZZ_BUILD)/regress-$*.log"; exit 1; }

# The repo's corpus and regressions are read-only seeds: new inputs go to the working corpus
# $(FUZZ_BUILD)/corpus/<t>, which libFuzzer writes (the first directory) and later runs reuse.
fuzz-run: $(FUZZ_TARGETS:%=fuzz-run-%)

$(FUZZ_TARGETS:%=fuzz-run-%): fuzz-run-%: fuzz-regress-%
	@mkdir -p $(FUZZ_BUILD)/corpus/$* $(FUZZ_BUILD)/artifacts/$*
	@echo "fuzz $*: fuzzing for $(FUZZ_SECONDS)s, log in $(FUZZ_BUILD)/fuzz-$*.log"
	@$(FUZZ_ENV) $(FUZZ_BUILD)/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -timeout=$(FUZZ_TIMEOUT) \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/artifacts/$*/ \
	    $(if $(wildcard $(FUZZ_DIR)/dict/$*.dict),-dict=$(FUZZ_DIR)/dict/$*.dict) $(FUZZ_FLAGS) \
	    $(FUZZ_BUILD)/corpus/$* $(FUZZ_DIR)/corpus/$* $(FUZZ_DIR)/regressions/$* \
	    > $(FUZZ_BUILD)/fuzz-$*.log 2>&1; \
	  rc=$$?; \
	  stats=`grep -E '^#[0-9]+[[:space:]]+DONE' $(FUZZ_BUILD)/fuzz-$*.log | tail -n 1 | tr -s ' \t' ' '`; \
	  if [ $$rc -eq 0 ]; then echo "fuzz $*: OK $$stats"; \
	  else tail -n 60 $(FUZZ_BUILD)/fuzz-$*.log; \
	       echo "fuzz $*: FAILED (exit $$rc), input in $(FUZZ_BUILD)/artifacts/$*/"; fi; \
	  exit $$rc

fuzz-clean:
	rm -rf $(FUZZ_BUILD)
