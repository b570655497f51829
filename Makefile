# delayq: plain Makefile, pkg-config for every library.
#   make                 build build/delayqd
#   make test            install deps, build, run unit and integration tests
#   make run             install deps, start local Redis + Kafka, run delayqd in the foreground
#   make stop            stop the local stack
#   make SANITIZE=address,undefined test
#   make test KAFKA_VERSION=4.1.1 TEST_ARGS="-k test_api"   another Kafka release, some tests
#   make test TEST_WORKERS=1                               the integration tests one at a time
#   make WERROR=0        build without -Werror
#   make fuzz            libFuzzer targets, FUZZ_SECONDS (default 300) each
#   make bench           the benchmark (BENCH_ARGS=--quick for a short try)
#   make install         PREFIX (/usr/local), DESTDIR: the binary, delayq-claims, the annotated
#                        config under etc/delayq/ and a systemd unit; make uninstall

PKGS     := rdkafka hiredis msgpack jansson libmicrohttpd libconfig gnutls libcurl
CC       ?= cc
WERROR   ?= 1
# Sanitized objects never mix with plain ones.
BUILD    ?= build$(if $(SANITIZE),-san)
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE -Iinclude -pthread -MMD -MP \
            -Wall -Wextra -Wstrict-prototypes -Wmissing-prototypes -Wwrite-strings \
            -Wformat=2 -Wvla -fno-common -Wshadow
ifeq ($(WERROR),1)
CFLAGS   += -Werror
endif
ifneq ($(SANITIZE),)
CFLAGS   += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
LDFLAGS  += -fsanitize=$(SANITIZE)
endif
LIBS_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LIBS     := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread

# The layers, top down: src/main.c wires them; src/http, then the features (schedules, dead),
# then intake and delivery, the targets (pull, callback), the adapters (redis, kafka), and at the
# bottom core (the delayq model) and lib (generic pieces). Pure modules include no network
# library and are unit-tested alone: all of lib and core, and the pure parts of the folders above.
LAYERS   := lib core redis kafka callback pull delivery intake dead schedules http
PURE_SRC := $(wildcard src/lib/*.c src/core/*.c) src/redis/rpipe.c src/redis/sentinel.c \
            src/redis/slots.c src/http/addrs.c src/schedules/schedjson.c
SRC      := $(foreach l,$(LAYERS),$(wildcard src/$(l)/*.c))
ADAPT_SRC := $(filter-out $(PURE_SRC),$(SRC))
# The console (ui/), embedded by a C file generated from its files, with the API's description
# (docs/openapi.yaml as JSON, served at /delay-queue/api/openapi.json).
UI_FILES := $(sort $(wildcard ui/*.html ui/*.js ui/*.css ui/*.svg))
OPENAPI  := $(BUILD)/openapi.json
UI_OBJ   := $(BUILD)/ui_files.o

PURE_OBJ  := $(PURE_SRC:src/%.c=$(BUILD)/%.o)
ADAPT_OBJ := $(ADAPT_SRC:src/%.c=$(BUILD)/%.o)
# For the fuzz targets (test/fuzz/fuzz.mk): the pure modules by path under src/, without .c.
PURE     := $(PURE_SRC:src/%.c=%)
UNIT_SRC  := $(wildcard test/unit/*.c)

.PHONY: all clean test unit run stop deps fuzz bench install uninstall
all: $(BUILD)/delayqd

# make V=1 shows the full commands.
ifneq ($(V),1)
Q := @
endif

# Each object depends on the headers it includes (-MMD -MP writes them to $(BUILD)/%.d).
$(BUILD)/%.o: src/%.c | $(BUILD)
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(LIBS_CFLAGS) -c -o $@ $<

$(BUILD):
	mkdir -p $(BUILD)

$(BUILD)/delayqd: $(PURE_OBJ) $(ADAPT_OBJ) $(UI_OBJ) $(BUILD)/main.o
	@echo "  LINK    $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# Written again when a console file or the API's description changes, or a console file comes
# or goes (the directory changes).
$(BUILD)/ui_files.c: $(UI_FILES) ui $(OPENAPI) scripts/embed-ui.sh | $(BUILD)
	@echo "  EMBED   $@"
	$(Q)bash scripts/embed-ui.sh $@ $(UI_FILES) $(OPENAPI)

# Debian's python3 with PyYAML (python3-yaml, scripts/deps.sh)
PYTHON3 ?= /usr/bin/python3
$(OPENAPI): docs/openapi.yaml | $(BUILD)
	@echo "  JSON    $@"
	$(Q)$(PYTHON3) -c 'import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), open(sys.argv[2], "w"), separators=(",", ":"))' $< $@.tmp
	$(Q)mv $@.tmp $@

$(BUILD)/ui_files.o: $(BUILD)/ui_files.c
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -c -o $@ $<

# The unit tests take the pure modules, and the Kafka adapter pieces they drive against
# librdkafka's mock cluster (broker errors a real broker shows only by chance).
MOCKED_OBJ := $(BUILD)/kafka/stats.o $(BUILD)/kafka/offsets.o $(BUILD)/kafka/producer.o
$(BUILD)/unit: $(UNIT_SRC) $(PURE_OBJ) $(MOCKED_OBJ) $(wildcard test/unit/*.h include/*/*.h)
	@echo "  LINK    $@"
	$(Q)$(CC) $(filter-out -MMD -MP,$(CFLAGS)) $(LIBS_CFLAGS) -Itest/unit $(LDFLAGS) -o $@ $(UNIT_SRC) $(PURE_OBJ) $(MOCKED_OBJ) $(LIBS)

deps:
	@bash scripts/deps.sh

unit: $(BUILD)/unit
	$(BUILD)/unit

test: deps
	$(MAKE) all $(BUILD)/unit
	SANITIZE=$(SANITIZE) BUILD=$(BUILD) TEST_WORKERS=$(TEST_WORKERS) bash scripts/test.sh $(TEST_ARGS)

run: deps
	$(MAKE) all
	bash scripts/redis-local.sh start
	bash scripts/kafka-local.sh start
	$(BUILD)/delayqd -c conf/delayq.conf

stop:
	-bash scripts/kafka-local.sh stop
	-bash scripts/redis-local.sh stop

# The benchmark (not part of make test): its own Kafka, Redis and delayqd; BENCH_ARGS=--quick.
bench:
	bash scripts/bench.sh $(BENCH_ARGS)

# libFuzzer targets (clang, installed by scripts/fuzz.sh); FUZZ_SECONDS per target.
fuzz:
	bash scripts/fuzz.sh

clean:
	rm -rf $(BUILD)

# Installation: where each file goes, under DESTDIR (a package's staging root) when set.
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR    ?= $(PREFIX)/lib/systemd/system

# The config is installed only where there is none: an operator's edits survive a reinstall.
# delayq-claims reads the installed config unless given -c.
install: $(BUILD)/delayqd
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSCONFDIR)/delayq $(DESTDIR)$(UNITDIR)
	install -m 0755 $(BUILD)/delayqd $(DESTDIR)$(BINDIR)/delayqd
	sed 's|^conf="$$ROOT/conf/delayq.conf"$$|conf="$(SYSCONFDIR)/delayq/delayq.conf"|' scripts/claims.sh \
	    > $(DESTDIR)$(BINDIR)/delayq-claims
	chmod 0755 $(DESTDIR)$(BINDIR)/delayq-claims
	test -e $(DESTDIR)$(SYSCONFDIR)/delayq/delayq.conf || \
	    install -m 0644 conf/delayq.conf $(DESTDIR)$(SYSCONFDIR)/delayq/delayq.conf
	sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' conf/delayq.service.in \
	    > $(DESTDIR)$(UNITDIR)/delayq.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/delayq.service

# The config stays: it may hold an operator's edits.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/delayqd $(DESTDIR)$(BINDIR)/delayq-claims \
	      $(DESTDIR)$(UNITDIR)/delayq.service

-include $(wildcard $(BUILD)/*.d $(BUILD)/*/*.d)

# Last, so that nothing in it becomes the default goal.
-include test/fuzz/fuzz.mk
