# velvet-rope: `make demo` runs the main job on the embedded default; `make test` runs every test.
# Both install what they need on a fresh Debian machine.

SHELL := /bin/bash
CARGO ?= cargo
FUZZ_SECONDS ?= 60

.PHONY: demo test test-rust test-loom lint bench fuzz clean

demo:
	$(CARGO) run --release -q -p velvet-rope-cli -- demo

test: lint test-rust test-loom
	@echo "make test: all suites passed"

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --release -- -D warnings

test-rust:
	$(CARGO) test --workspace --release

# loom models of every lock-free structure (a separate target dir: the cfg changes every crate).
test-loom:
	RUSTFLAGS="--cfg velvet_rope_loom" CARGO_TARGET_DIR=target/loom \
		$(CARGO) test -p velvet-rope --lib --release -- loom

bench:
	$(CARGO) bench -p velvet-rope-benches

# Coverage-guided fuzzing (libFuzzer with AddressSanitizer, on stable via RUSTC_BOOTSTRAP).
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install --locked cargo-fuzz
	cd fuzz && for t in ticket_open config_parse admit_cookie; do \
		RUSTC_BOOTSTRAP=1 $(CARGO) fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done

clean:
	$(CARGO) clean
