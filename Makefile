# skiplock — the user-facing commands.  The real build is CMake (build/).
# Each target installs (as root) only the Debian packages it needs, with
# scripts/bootstrap: --build for make and make install, --demo for make demo,
# --deb for make deb, --dist for make dist, --test for the rest.
#
#   make            build the library and the command (warnings are errors)
#   make demo       the embedded demo: a private Postgres, workers, a crash
#   make deb        a Debian package (build/release/skiplock_VERSION_ARCH.deb)
#                   of the command, the libraries, headers, skiplock.pc, man
#                   pages and the systemd unit, Depends computed by dpkg-shlibdeps
#   make dist       the clients as a team installs them, into dist/, offline
#                   (scripts/dist): the npm tarball, the Python wheel and
#                   sdist, the Rust .crate; each carries the schema installer
#   make test       every test, under AddressSanitizer + UBSan, direct and
#                   through PgBouncer, on a private cluster the harness starts
#   make test-citus some of the suites again and a check of the cluster, on
#                   a Citus coordinator with two workers (the citus label;
#                   builds and installs the Citus extension from tests/vendor
#                   the first time: scripts/citus)
#   make chaos      the fault campaign (DURATION=secs, SEED=n): a workload,
#                   a nemesis and a checker on a private cluster
#   make install    install into PREFIX (default /usr/local): the command, the
#                   libraries, headers, skiplock.pc, man pages and the
#                   skiplock-worker@.service systemd unit template
#   make uninstall  remove what the last make install wrote
#   make fuzz       every libFuzzer target for FUZZ_TIME seconds (default 60)
#   make lint       the linters (scripts/lint): shellcheck, cppcheck, flake8
#                   and mypy on the Python client, tsc on the Node types,
#                   clippy on the Rust client
#   make soak       the steady-state benchmark (MINUTES=n, default 30;
#                   QUICK=1: 1 minute): bench/soak on a private Postgres
#   make bench-citus  the same drains on distributed and coordinator-local
#                   tables of one private Citus cluster (QUICK=1: small
#                   sizes): bench/citus; installs Citus first like test-citus

PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Tests wait on PostgreSQL, sleeps and subprocesses more than they compute:
# twice as many at once as there are cores.
TEST_JOBS ?= $(shell echo $$(( $(JOBS) * 2 )))
BUILD := build/release
ASAN := build/asan
CTEST_ARGS ?=

.PHONY: all build demo deb dist test check-asan test-citus unit bootstrap install uninstall clean chaos fuzz lint

all: build

bootstrap:
	@scripts/bootstrap --test

# make [BUILD=dir]: the optimised build, needing only the build dependencies
# (without cmocka the tests are not built).
build:
	@scripts/bootstrap --build
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSKL_WERROR=ON \
	  -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/bootstrap --demo
	@$(BUILD)/skiplock demo

# The package installs into /usr (the multiarch libdir); the next `make`
# configures $(BUILD) for PREFIX again.
deb: PREFIX = /usr
deb: build
	@scripts/bootstrap --deb
	@cd $(BUILD) && cpack -G DEB >/dev/null
	@ls $(BUILD)/skiplock_*.deb

# dist/ also holds the systemd unit's template: only skiplock-* are built.
dist:
	@scripts/bootstrap --dist
	@scripts/dist

$(ASAN)/CMakeCache.txt:
	@cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=Debug -DSKL_WERROR=ON -DSKL_SANITIZE=ON \
	  -DSKL_TESTS=ON >/dev/null

SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1

# Every test but the citus label's (make test-citus runs those).
check-asan: bootstrap $(ASAN)/CMakeCache.txt
	@cmake --build $(ASAN) -j $(JOBS)
	@$(SANITIZER_ENV) tests/harness/with-cluster --session-bouncer -- \
	  ctest --test-dir $(ASAN) --output-on-failure -j $(TEST_JOBS) -LE citus $(CTEST_ARGS)

# The citus label (tests/CMakeLists.txt) against the sanitizer build, on a
# Citus coordinator with two workers and PgBouncer in front of it
# (tests/harness/with-cluster --citus).  The Citus extension is built and
# installed first when it is not (scripts/citus, as root; cached in
# build/citus).
test-citus: bootstrap $(ASAN)/CMakeCache.txt
	@scripts/citus --check || { scripts/bootstrap --citus && JOBS=$(JOBS) scripts/citus; }
	@cmake --build $(ASAN) -j $(JOBS)
	@$(SANITIZER_ENV) tests/harness/with-cluster --citus -- \
	  ctest --test-dir $(ASAN) --output-on-failure -j $(TEST_JOBS) -L citus $(CTEST_ARGS)

# The README's test command: the optimised build must compile warning-free,
# and every test runs against the sanitizer build.
test: bootstrap build check-asan

lint: bootstrap
	@scripts/lint

unit: bootstrap $(ASAN)/CMakeCache.txt
	@cmake --build $(ASAN) -j $(JOBS)
	@ctest --test-dir $(ASAN) --output-on-failure -L unit

# make chaos [DURATION=secs] [SEED=n]: the fault campaign (docs/chaos.md)
# against the optimised build, on a private PostgreSQL + PgBouncer.
DURATION ?= 120
chaos: bootstrap build
	@SKL_BIN=$(CURDIR)/$(BUILD)/skiplock SKL_CUTPROXY=$(CURDIR)/$(BUILD)/tests/cutproxy \
	  SKL_SOURCE_DIR=$(CURDIR) tests/harness/with-cluster -- \
	  $(BUILD)/tests/chaos run --duration $(DURATION) $(if $(SEED),--seed $(SEED))

# make fuzz [FUZZ_TIME=60]: each tests/fuzz/fuzz_*.c target in turn, built
# with clang, libFuzzer, ASan and UBSan in build/fuzz (docs/security.md).
FUZZ := build/fuzz
FUZZ_TIME ?= 60

fuzz: bootstrap
	@cmake -S . -B $(FUZZ) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DSKL_FUZZ=ON \
	  -DSKL_TESTS=OFF >/dev/null
	@cmake --build $(FUZZ) -j $(JOBS) --target fuzz_all >/dev/null
	@tests/fuzz/run $(FUZZ) $(FUZZ_TIME)

install: build
	@cmake --install $(BUILD) --prefix $(PREFIX)

# Removes what the last `make install` wrote (build/release/install_manifest.txt).
uninstall:
	@cmake -DMANIFEST=$(CURDIR)/$(BUILD)/install_manifest.txt -P cmake/uninstall.cmake

clean:
	rm -rf build dist/skiplock-*

# make bench [QUICK=1] [BASELINE=rev|none]: the benchmark suite on a private
# durable Postgres (bench/run; docs/performance.md says what each figure
# means).  BASELINE (default 9cf812d, the worker protocol's C statements)
# is built in build/bench-baseline and its drains alternate with this
# tree's in the same run.
BASELINE ?= 9cf812d
.PHONY: bench
bench: bootstrap
	@cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DSKL_TESTS=OFF >/dev/null
	@cmake --build build/bench -j $(JOBS) >&2
	@bench/run $(if $(QUICK),--quick) --baseline $(BASELINE)

# make soak [MINUTES=30] [QUICK=1]: the best drain for MINUTES with an
# enqueuer keeping up and retention on (bench/soak, through bench/run;
# docs/performance.md).  Writes bench/results/<date>-<commit>-soak.*.
MINUTES ?= $(if $(QUICK),1,30)
.PHONY: soak
soak: bootstrap
	@cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DSKL_TESTS=OFF >/dev/null
	@cmake --build build/bench -j $(JOBS) >&2
	@bench/soak $(if $(QUICK),--quick) --minutes $(MINUTES)

# make bench-citus [QUICK=1]: bench/citus through bench/run on a private
# durable Citus cluster (a coordinator and two workers; docs/performance.md).
# Writes bench/results/<date>-<commit>-citus.*.
.PHONY: bench-citus
bench-citus: bootstrap
	@scripts/citus --check || { scripts/bootstrap --citus && JOBS=$(JOBS) scripts/citus; }
	@cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DSKL_TESTS=OFF >/dev/null
	@cmake --build build/bench -j $(JOBS) >&2
	@bench/citus $(if $(QUICK),--quick)
