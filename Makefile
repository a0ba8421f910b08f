# velvet-rope: `make demo` runs the main job on the embedded default; `make test` runs every test.
# Both install what they need on a fresh Debian machine.

SHELL := /bin/bash
CARGO ?= cargo
FUZZ_SECONDS ?= 60

.PHONY: demo test test-rust test-loom test-c test-nginx lint header bench bench-nginx fuzz clean

demo:
	@echo "make demo: building the velvet-rope command (release build: a minute or two the first time)"
	$(CARGO) build --release -p velvet-rope-cli
	@echo "make demo: running a flash sale through the engine in virtual time"
	./target/release/velvet-rope demo

test: lint test-rust test-loom test-c test-nginx
	@echo "make test: all suites passed"

lint:
	@echo "== make test: formatting and clippy (a cold build takes a few minutes; cargo shows progress)"
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --release -- -D warnings

test-rust:
	@echo "== make test: Rust tests (unit, integration, stress, processes, doc examples)"
	$(CARGO) test --workspace --release

# loom models of every lock-free structure (a separate target dir: the cfg changes every crate).
test-loom:
	@echo "== make test: loom models of the lock-free structures (own target dir: a second build)"
	RUSTFLAGS="--cfg velvet_rope_loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=3 \
		$(CARGO) test -p velvet-rope --lib --release -- loom

# The C ABI from C: every function and error path plus a pthreads stress test, under
# AddressSanitizer (leaks included) and UndefinedBehaviorSanitizer.
test-c:
	@echo "== make test: the C ABI suite under AddressSanitizer and UndefinedBehaviorSanitizer"
	$(CARGO) build --release -p velvet-rope-c
	gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fsanitize=address,undefined -g -O1 \
		-Iinclude bindings/c/tests/c/test_velvet_rope.c target/release/libvelvet_rope.a \
		-lpthread -ldl -lm -o target/test_velvet_rope
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 ./target/test_velvet_rope

# The nginx module against Debian's real nginx (installs nginx and nginx-dev if missing).
test-nginx:
	@echo "== make test: the nginx module against Debian's nginx (installs nginx and nginx-dev if missing)"
	bindings/nginx/build.sh
	python3 bindings/nginx/tests/test_nginx.py

# Regenerates include/velvet_rope.h (make test fails while it is stale).
header:
	VR_BLESS_HEADER=1 $(CARGO) test --release -p velvet-rope-c --test header

bench:
	$(CARGO) bench -p velvet-rope-benches

# nginx with the module against nginx without it, interleaved wrk runs on 127.0.0.1.
bench-nginx:
	bindings/nginx/build.sh
	bindings/nginx/bench.sh

# Coverage-guided fuzzing (libFuzzer with AddressSanitizer, on stable via RUSTC_BOOTSTRAP).
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install --locked cargo-fuzz
	cd fuzz && for t in ticket_open config_parse admit_cookie region_attach; do \
		RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done

clean:
	$(CARGO) clean
