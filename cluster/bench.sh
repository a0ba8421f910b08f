#!/usr/bin/env bash
# The cluster tier's measures (BENCHMARKS.md): three ways of sharing a room across three hosts
# on the same arrivals, in virtual time; then Redis commands per host per second at 10 and at
# 100,000 admissions per second; then what 10 to 5,000 hosts syncing ten rooms every second
# cost the server (its CPU per second and per call, p99 sync latency: `many_hosts`), against
# a redis-server (Debian's) started here on a free 127.0.0.1 port with persistence off.
# MANY_HOSTS passes options to `many_hosts` (say `--hosts 10,100 --secs 5`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v redis-server >/dev/null || {
    echo "installing redis-server (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server
}
cargo build --release -q -p velvet-rope-cluster --examples
./target/release/examples/simulate
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.05
done
echo
./target/release/examples/commands "redis://127.0.0.1:$port"
echo
# shellcheck disable=SC2086 # MANY_HOSTS is a list of options
./target/release/examples/many_hosts "redis://127.0.0.1:$port" ${MANY_HOSTS:-}
