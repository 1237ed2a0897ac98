# suanli: `make run` sets up and starts the platform; `make test` sets up and
# runs every test. Both install missing Debian packages themselves.

BUILD   ?= build
CC      ?= cc
PKGS    := libmicrohttpd jansson libcurl sqlite3 libsodium yaml-0.1 libarchive liblzma
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wvla -Wwrite-strings -Wformat=2 \
           -Wno-format-nonliteral -Werror
CFLAGS  ?= -O2 -g
SAN     ?=
ifeq ($(SAN),1)
  CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
  LDFLAGS += -fsanitize=address,undefined
endif
ALL_CFLAGS = -std=gnu11 $(WARN) $(CFLAGS) -D_GNU_SOURCE -MMD -MP \
             $(shell pkg-config --cflags $(PKGS) libpq 2>/dev/null)
LIBS    = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lcrypt -lpthread -ldl
# libpq (server/store-pg.c): suanlid and the unit tests only
PQ_LIBS = $(shell pkg-config --libs libpq 2>/dev/null)

LIB_SRC     := $(wildcard lib/*.c)
SERVER_SRC  := $(filter-out server/main.c,$(wildcard server/*.c))
CLI_SRC     := $(wildcard cli/*.c)
UNIT_SRC    := $(wildcard tests/unit/test-*.c)

LIB_OBJ     := $(LIB_SRC:%.c=$(BUILD)/%.o)
SERVER_OBJ  := $(SERVER_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ     := $(filter-out $(BUILD)/cli/main.o,$(CLI_SRC:%.c=$(BUILD)/%.o))
UNIT_BIN    := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all deps run test unit asan-unit fuzz-smoke integration format check-format bench \
        install clean console unit-pg integration-pg

all: $(BUILD)/suanlid $(BUILD)/suanli $(BUILD)/suanli-node

# The web console (console/, docs/design/console.md): bundled by esbuild into
# $(BUILD)/console/, which suanlid serves at / (option console.dir). Part of
# `all` when npm is installed (scripts/deps.sh installs it); `npm ci` fills
# console/node_modules from the lockfile the first time. The build prints the
# first load's gzipped size and fails over its budget.
NPM          := $(shell command -v npm 2>/dev/null)
CONSOLE_SRC  := $(shell find console/src -type f 2>/dev/null) console/build.mjs console/package.json
ifneq ($(NPM),)
all: console
endif

console: $(BUILD)/console/index.html

$(BUILD)/console/index.html: $(CONSOLE_SRC) console/node_modules/.package-lock.json
	@mkdir -p $(BUILD)
	@cd console && node build.mjs --out $(abspath $(BUILD))/console \
		--report $(abspath $(BUILD))/console-size.json

# Node.js trusts its own copy of the CA roots, not the system's: a registry
# reached through a proxy whose CA the system trusts (apt does) is refused
# (SELF_SIGNED_CERT_IN_CHAIN) unless the system's bundle is added.
SYSTEM_CA := $(wildcard /etc/ssl/certs/ca-certificates.crt)

console/node_modules/.package-lock.json: console/package-lock.json
	cd console && $(if $(SYSTEM_CA),NODE_EXTRA_CA_CERTS=$${NODE_EXTRA_CA_CERTS:-$(SYSTEM_CA)}) \
		npm ci --no-audit --no-fund

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/libsuanli.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libsuanlid.a: $(SERVER_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/suanlid: $(BUILD)/server/main.o $(BUILD)/libsuanlid.a $(BUILD)/libsuanli.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(PQ_LIBS)

$(BUILD)/libsuanli-cli.a: $(CLI_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/suanli: $(BUILD)/cli/main.o $(BUILD)/libsuanli-cli.a $(BUILD)/libsuanli.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

# Unit tests link the server's, the node's (node.mk) and the CLI's libraries:
# an archive only brings in what a test uses.
$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(BUILD)/tests/unit/harness.o $(BUILD)/libsuanlid.a \
                  $(BUILD)/libsuanli-node.a $(BUILD)/libsuanli-cli.a $(BUILD)/libsuanli.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(PQ_LIBS)

# The stand-in for NVIDIA's libnvidia-ml.so.1 that test-nvml loads (see the
# comment at the top of its source): never installed, never used outside tests.
FAKE_NVML := $(BUILD)/tests/fake-nvml/libnvidia-ml.so.1

$(FAKE_NVML): tests/unit/fake-nvml/fake-nvml.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) $(CFLAGS) -fPIC -shared -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

# keep intermediate objects (harness.o, test objects) between builds
.SECONDARY:

deps:
	@scripts/deps.sh build

run:
	@scripts/deps.sh run
	@$(MAKE) --no-print-directory all
	@scripts/run.sh

unit: $(UNIT_BIN) $(FAKE_NVML)
	@scripts/run-unit.sh $(UNIT_BIN)

asan-unit:
	@$(MAKE) --no-print-directory BUILD=build-asan SAN=1 unit

fuzz-smoke:
	@scripts/fuzz.sh $${FUZZ_SECONDS:-60}

integration: all
	@scripts/integration.sh

# The PostgreSQL backend (server/store-pg.c): every unit test that opens a
# store (test_store(), tests/unit/harness.c) again on PostgreSQL, the billing
# simulation for 20,000 instance-hours (PG_SIM_HOURS: a statement costs some
# 15 times SQLite's on a local socket, so the full million would take about
# 20 minutes here), then the integration modules that run the most SQL
# (accounts, money, idempotency, instances, billing, the crash tests) and two
# replicas on one database (t800, which starts a PostgreSQL of its own to stop
# it), on a PostgreSQL server that scripts/pg-test.sh starts and stops
# (docs/design/control-plane.md, "PostgreSQL", "Replicas and the leader").
PG_SIM_HOURS   ?= 20000
PG_UNIT        := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,\
                    $(shell grep -l 'test_store()' $(UNIT_SRC)))
PG_INTEGRATION := test_t100_accounts test_t130_money test_t180_idempotency test_t190_crash \
                  test_t210_instances test_t300_billing test_t320_billing_crash \
                  test_t800_replicas test_t810_store_migrate

unit-pg: $(PG_UNIT)
	@SUANLI_UNIT_STORE=postgres SUANLI_SIM_HOURS=$(PG_SIM_HOURS) scripts/pg-test.sh \
		scripts/run-unit.sh $(PG_UNIT)

integration-pg: all
	@SUANLI_TEST_STORE=postgres scripts/pg-test.sh /usr/bin/python3 -m pytest -q \
		-p no:cacheprovider $(PG_INTEGRATION:%=tests/integration/%.py)

# One line per suite (scripts/suite.sh); each suite's output is in
# $(BUILD)/test-logs/SUITE.log, and printed in full when it fails.
SUITE = scripts/suite.sh $(BUILD)/test-logs

test:
	@scripts/deps.sh test
	@$(SUITE) format $(MAKE) --no-print-directory check-format
	@$(SUITE) build $(MAKE) --no-print-directory all
	@$(SUITE) unit $(MAKE) --no-print-directory unit
	@$(SUITE) unit-pg $(MAKE) --no-print-directory unit-pg
	@$(SUITE) asan-unit $(MAKE) --no-print-directory asan-unit
	@$(SUITE) fuzz $(MAKE) --no-print-directory fuzz-smoke
	@$(SUITE) node-smoke $(MAKE) --no-print-directory node-smoke
	@$(SUITE) integration $(MAKE) --no-print-directory integration
	@$(SUITE) integration-pg $(MAKE) --no-print-directory integration-pg

FORMAT_FILES = $(wildcard lib/*.[ch] server/*.[ch] cli/*.[ch] node/*.[ch] tests/unit/*.[ch] \
                           tests/unit/fake-nvml/*.c tests/fuzz/*.c tests/smoke/*.c)

format:
	clang-format -i $(FORMAT_FILES)

check-format:
	@clang-format --dry-run -Werror $(FORMAT_FILES) && echo "format: ok"

bench:
	@scripts/deps.sh bench
	@$(MAKE) --no-print-directory all
	@bench/api.sh
	@bench/instances.py
	@bench/cycles.py
	@bench/settle.sh
	@bench/sched.py

install: all
	install -m 0755 $(BUILD)/suanlid $(BUILD)/suanli /usr/local/bin/

clean:
	rm -rf build build-asan build-fuzz

include node.mk

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
