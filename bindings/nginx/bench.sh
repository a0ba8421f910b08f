#!/usr/bin/env bash
# Throughput of Debian's nginx serving a static 128-byte page through a server with the
# velvet-rope module (`velvet_rope bench`) and an identical server without it (`velvet_rope
# off`) on another port, in one nginx instance, runs interleaved so that machine noise hits
# both alike. Requests carry the valid tickets of VISITORS distinct admitted visitors in turn
# (wrk's Lua script picks the next one per request), as during a sale: far more visitors than a
# worker's cache of opened tickets, so each request pays for opening its ticket; VISITORS=1 is
# the single-cookie case (the ticket stays in the cache: the warm path). The two servers have the same locations, root and file, and the
# requests the same bytes but the port: only the module's work differs. Rounds alternate which
# side runs first, and on a machine with more cores than workers nginx's workers and wrk are
# pinned to different cores, so the scheduler's placement does not favour one side. Prints each
# run, the medians and their ratio (with / without). Not a test.
#
# Environment: VISITORS (10000), ROUNDS (30; keep it even, so each side goes first as often),
# DURATION (2s),
# CONNECTIONS (32), THREADS (1), WORKERS (1: leave a core to wrk on small machines),
# SKIP_BUILD=1 to use the module already built, MODULE=<path> to measure another build of
# the module (implies nothing is built), CONTROL=1 for an A/A run (both servers
# `velvet_rope off`: what the method reads when nothing differs).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
module="${MODULE:-$repo/target/nginx-module/ngx_http_velvet_rope_module.so}"
visitors="${VISITORS:-10000}"
rounds="${ROUNDS:-30}"
duration="${DURATION:-2s}"
connections="${CONNECTIONS:-32}"
threads="${THREADS:-1}"
workers="${WORKERS:-1}"
with_room="bench"
[[ "${CONTROL:-0}" == 1 ]] && with_room="off"
cpus="$(nproc)"
affinity=""
pin=()
if (( cpus > workers )); then
    affinity="worker_cpu_affinity auto;"       # workers on cores 0..workers-1
    pin=(taskset -c "$workers-$((cpus - 1))")   # wrk on the rest
fi

if ! command -v wrk >/dev/null || [[ ! -x /usr/sbin/nginx ]]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q && apt-get install -y -q nginx nginx-dev wrk
fi
if [[ "${SKIP_BUILD:-0}" != 1 && -z "${MODULE:-}" ]]; then
    "$here/build.sh"
fi

prefix="$(mktemp -d /tmp/velvet-rope-bench.XXXXXX)"
master=""
cleanup() {
    if [[ -n "$master" ]] && kill -0 "$master" 2>/dev/null; then
        kill -QUIT "$master"
        for _ in $(seq 50); do kill -0 "$master" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$master" 2>/dev/null || true
    fi
    rm -rf "$prefix"
}
trap cleanup EXIT

# Two free ports of the same number of digits (the Host header is the one byte-for-byte
# difference between the two sides' requests).
read -r port port_off < <(python3 -c '
import socket
while True:
    s = [socket.socket() for _ in range(2)]
    for x in s: x.bind(("127.0.0.1", 0))
    p = [x.getsockname()[1] for x in s]
    if len(str(p[0])) == len(str(p[1])): print(*p); break
')
[[ -n "${port_off:-}" ]] || { echo "bench.sh: could not pick two free ports" >&2; exit 1; }
mkdir -p "$prefix"/{conf,logs,tmp,html/admit}
# Exactly 128 bytes of HTML, the same file behind both locations.
page="$(printf '<!doctype html><title>bench</title><p>%s</p>' "$(printf 'x%.0s' $(seq 128))")"
page="${page:0:127}"
printf '%s\n' "$page" | tee "$prefix/html/admit/page.html" > "$prefix/html/page.html"
[[ "$(stat -c %s "$prefix/html/page.html")" == 128 ]]

secret="$(python3 -c 'import base64,os; print(base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode())')"
cat > "$prefix/conf/velvet-rope.toml" <<EOF
# Hour-wide buckets: the one cookie wrk sends stays "counted this bucket" for the whole run,
# so every request takes the steady path of an admitted visitor (no re-issue). A real visitor
# is re-issued its ticket once per bucket, on one request of many.
[settings]
bucket_width_secs = 3600

[[tickets.keys]]
id = 1
secret = "$secret"

# Large enough never to queue: the benchmark measures the admitted visitor's path.
[[rooms]]
name = "bench"
total_active_users = 1000000
new_users_per_minute = 1000000
session_duration = 1
[rooms.cookie]
secure = false
EOF

cat > "$prefix/conf/nginx.conf" <<EOF
load_module $module;
user root;
worker_processes $workers;
$affinity
error_log $prefix/logs/error.log warn;
pid $prefix/logs/nginx.pid;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $prefix/tmp/body;
    proxy_temp_path       $prefix/tmp/proxy;
    fastcgi_temp_path     $prefix/tmp/fastcgi;
    uwsgi_temp_path       $prefix/tmp/uwsgi;
    scgi_temp_path        $prefix/tmp/scgi;
    default_type text/html;
    velvet_rope_config $prefix/conf/velvet-rope.toml;
    server {
        listen 127.0.0.1:$port;
        root $prefix/html;
        location /         { velvet_rope $with_room; }
        location /admit/   { velvet_rope bench; }
        location = /status { velvet_rope_status; }
    }
    server {
        listen 127.0.0.1:$port_off;
        root $prefix/html;
        location /         { velvet_rope off; }
        location /admit/   { velvet_rope bench; }
        location = /status { velvet_rope_status; }
    }
}
EOF

/usr/sbin/nginx -p "$prefix" -c "$prefix/conf/nginx.conf" -g 'daemon off;' &
master=$!
for p in "$port" "$port_off"; do
    for _ in $(seq 50); do
        python3 -c "import socket; socket.create_connection(('127.0.0.1', $p), 0.2)" 2>/dev/null \
            && break
        sleep 0.1
    done
done

# The visitors' admissions: their cookies, which the benchmark's requests then carry in turn.
python3 - "$port" "$visitors" "$prefix/visitors.lua" <<'EOF'
import http.client, sys
port, n, script = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
cookies = []
for _ in range(n):
    c.request("GET", "/admit/page.html")
    r = c.getresponse()
    body = r.read()
    sc = [v for k, v in r.getheaders() if k.lower() == "set-cookie"]
    assert r.status == 200 and len(body) == 128 and sc, (r.status, body[:80], sc)
    cookies.append(sc[0].split(";")[0])
with open(script, "w") as f:
    f.write("cookies = {%s}\n" % ",".join('"%s"' % x for x in cookies))
    f.write("i = 0\nrequest = function()\n  i = i % #cookies + 1\n"
            "  return wrk.format(nil, nil, {Cookie = cookies[i]})\nend\n")
EOF
visit=(-s "$prefix/visitors.lua")

worker_ticks() {   # CPU time (user + system, in clock ticks) of nginx's workers so far
    local total=0 pid
    for pid in $(pgrep -P "$master"); do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
    done
    echo "$total"
}
hz="$(getconf CLK_TCK)"

run() {   # run <port> [extra wrk args...] -> prints "<requests/s> <worker CPU us per request>"
    local out before after requests
    before="$(worker_ticks)"
    out="$("${pin[@]}" wrk -t"$threads" -c"$connections" -d"$duration" "${@:2}" "http://127.0.0.1:$1/page.html")"
    after="$(worker_ticks)"
    if grep -q 'Non-2xx' <<<"$out"; then
        echo "bench.sh: non-2xx responses on $1:" >&2
        echo "$out" >&2
        exit 1
    fi
    requests="$(awk '/ requests in / { print $1 }' <<<"$out")"
    awk -v r="$requests" -v t="$((after - before))" -v hz="$hz" \
        '/^Requests\/sec:/ { printf "%s %.3f\n", $2, t / hz * 1e6 / r }' <<<"$out"
}

# Warm-up of both paths (page cache, connections, engine snapshot).
run "$port_off" -d2s "${visit[@]}" >/dev/null
run "$port" -d2s "${visit[@]}" >/dev/null

with=(); without=(); cpu_with=(); cpu_without=()
for i in $(seq "$rounds"); do
    if (( i % 2 )); then
        read -r w cw < <(run "$port_off" "${visit[@]}")
        read -r m cm < <(run "$port" "${visit[@]}")
    else
        read -r m cm < <(run "$port" "${visit[@]}")
        read -r w cw < <(run "$port_off" "${visit[@]}")
    fi
    without+=("$w"); with+=("$m"); cpu_without+=("$cw"); cpu_with+=("$cm")
    printf 'round %d: without %s req/s (%s us CPU/req), with module %s req/s (%s us CPU/req)\n' \
        "$i" "$w" "$cw" "$m" "$cm"
done

# The run measured what it claims: one admission per visitor, every other request recognised.
python3 - "$port" "$visitors" <<'EOF'
import http.client, json, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
c.request("GET", "/status")
room = json.loads(c.getresponse().read())["rooms"]["bench"]
print("engine: admitted_total %d, ticket rejections %s"
      % (room["admitted_total"], room["ticket_rejections"]))
assert room["admitted_total"] == int(sys.argv[2]), room
assert not any(room["ticket_rejections"].values()), room
EOF

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
mw="$(median "${with[@]}")"
mo="$(median "${without[@]}")"
printf 'median: without %s req/s, with module %s req/s, ratio %s\n' \
    "$mo" "$mw" "$(awk -v a="$mw" -v b="$mo" 'BEGIN { printf "%.3f", a / b }')"
# Each round runs both back to back (in alternating order), so the per-round ratio cancels most of the machine's drift;
# its median is the figure to quote.
ratios=()
for i in "${!with[@]}"; do
    ratios+=("$(awk -v a="${with[$i]}" -v b="${without[$i]}" 'BEGIN { printf "%.4f", a / b }')")
done
printf 'per-round ratios: %s; median %s\n' "${ratios[*]}" "$(median "${ratios[@]}")"
# How far the median can be trusted on this machine: a 95 % bootstrap interval of the median
# of the per-round ratios (resampling rounds; fixed seed, so a run's report is reproducible).
python3 - "${ratios[@]}" <<'EOF'
import random, statistics, sys
r = [float(x) for x in sys.argv[1:]]
rng = random.Random(1)
meds = sorted(statistics.median(rng.choices(r, k=len(r))) for _ in range(10000))
print("median of per-round ratios %.3f, 95%% interval %.3f-%.3f (%d rounds; %d of them >= 0.95)"
      % (statistics.median(r), meds[250], meds[9749], len(r), sum(x >= 0.95 for x in r)))
EOF
# Worker CPU time per request: what the module adds to each request, less sensitive than
# requests/s to the other tenants of a small machine (clock ticks of 10 ms: about 1 % of a
# 2-second round; the median over rounds smooths it).
cw="$(median "${cpu_with[@]}")"; co="$(median "${cpu_without[@]}")"
cpu_ratios=()
for i in "${!cpu_with[@]}"; do
    cpu_ratios+=("$(awk -v a="${cpu_with[$i]}" -v b="${cpu_without[$i]}" 'BEGIN { printf "%.4f", a / b }')")
done
printf 'worker CPU per request (medians): without %s us, with module %s us; median of per-round ratios %s\n' \
    "$co" "$cw" "$(median "${cpu_ratios[@]}")"
