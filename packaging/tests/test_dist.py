#!/usr/bin/env python3
"""`make test-dist`: each artifact of `make dist` installed where a user would install it, with
no Rust toolchain on `PATH`, then made to admit exactly K visitors of 3K:

- the wheel into a fresh virtual environment (its manylinux tag checked by auditwheel), serving
  requests through the ASGI middleware under uvicorn;
- the npm tarball with `npm install` into a fresh folder, serving through Express;
- the Debian package with `dpkg -i`, enabling the module for Debian's real nginx, which then
  loads it through /etc/nginx/modules-enabled/ and serves; then `dpkg --purge`;
- the C library: a program compiled with `pkg-config --cflags --libs velvet-rope`, against the
  relocatable tarball unpacked anywhere and against `make install PREFIX=...`;
- the `velvet-rope` command and the Envoy module from their tarballs.

Everything runs in a temporary folder and on 127.0.0.1; servers are stopped at the end. The
package index is used for the tools the test itself needs (uvicorn, Express, auditwheel).
Standard library only: run with the system's python3 from the repository's root.
"""

from __future__ import annotations

import glob
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIST = REPO / "dist"
K = 5
VISITORS = 3 * K
# PATH without the Rust toolchain (rustup's ~/.cargo/bin) or anything else of the user's.
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ROOM = f"""
[[rooms]]
name = "shop"
total_active_users = {K}
new_users_per_minute = 1000
queueing_status_code = 202

[rooms.cookie]
secure = false
"""


def log(msg: str) -> None:
    print(f"test-dist: {msg}", flush=True)


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {
        "PATH": CLEAN_PATH,
        "HOME": str(tmp / "home"),
        "LANG": "C.UTF-8",
        "npm_config_cache": str(tmp / "npm-cache"),
        "npm_config_update_notifier": "false",
    }
    (tmp / "home").mkdir(exist_ok=True)
    env.update(extra)
    return env


def run(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    out = subprocess.run(
        cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-4000:]}")
    return out.stdout


def one(pattern: str) -> Path:
    found = sorted(glob.glob(str(DIST / pattern)))
    assert len(found) == 1, f"expected one dist/{pattern}, found {found}: run `make dist`"
    return Path(found[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port: int, proc: subprocess.Popen | None, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what} exited ({proc.returncode}) before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{what} did not listen on {port} within {seconds} s")


def get(port: int, path: str = "/", cookie: str | None = None) -> tuple[int, str, list[str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Cookie": cookie} if cookie else {}
    conn.request("GET", path, headers=headers)
    r = conn.getresponse()
    body = r.read().decode("utf-8", "replace")
    cookies = [v for k, v in r.getheaders() if k.lower() == "set-cookie"]
    conn.close()
    return r.status, body, cookies


def admits_exactly_k(port: int, what: str) -> None:
    """VISITORS fresh visitors: exactly K reach the origin, the others wait (202); the first
    one's ticket lets it back in."""
    admitted, waiting, first_cookie = 0, 0, None
    for _ in range(VISITORS):
        status, body, cookies = get(port)
        if status == 200 and "origin" in body:
            admitted += 1
            if first_cookie is None and cookies:
                first_cookie = cookies[0].split(";", 1)[0]
        elif status == 202:
            waiting += 1
        else:
            raise AssertionError(f"{what}: unexpected {status}: {body[:300]}")
    assert (admitted, waiting) == (K, VISITORS - K), \
        f"{what}: {admitted} admitted, {waiting} waiting; expected {K} and {VISITORS - K}"
    assert first_cookie, f"{what}: no ticket cookie on an admitted response"
    status, body, _ = get(port, cookie=first_cookie)
    assert status == 200 and "origin" in body, f"{what}: a returning visitor was not let back in"
    log(f"{what}: {admitted} of {VISITORS} visitors admitted, {waiting} waiting; "
        "a returning ticket let back in")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_no_toolchain(env: dict[str, str]) -> None:
    for tool in ("cargo", "rustc", "maturin"):
        assert shutil.which(tool, path=env["PATH"]) is None, f"{tool} is on the clean PATH"


# ------------------------------------------------------------------------------------------


def test_wheel(tmp: Path) -> None:
    wheel = one("velvet_rope-*-cp310-abi3-manylinux_2_28_x86_64.whl")
    one("velvet_rope-*.tar.gz")
    env = clean_env(tmp)
    venv = tmp / "venv"
    log(f"wheel: a fresh virtual environment, pip install {wheel.name} uvicorn auditwheel")
    run([sys.executable, "-m", "venv", str(venv)], env)
    pins = [l.strip() for l in (REPO / "python/tests/requirements.txt").read_text().splitlines()
            if l.startswith("uvicorn==")]
    run([str(venv / "bin/pip"), "install", "-q", "--disable-pip-version-check", str(wheel),
         *pins, "auditwheel==6.4.2"], env)
    shown = run([str(venv / "bin/auditwheel"), "show", str(wheel)], env)
    assert 'is consistent with the following platform tag: "manylinux_2_28_x86_64"' in \
        " ".join(shown.split()), shown
    where = run([str(venv / "bin/python"), "-c",
                 "import velvet_rope, os; print(os.path.dirname(velvet_rope.__file__))"],
                env, cwd=tmp).strip()
    assert where.startswith(str(venv)), f"velvet_rope imported from {where}"
    app = tmp / "wheel_app"
    app.mkdir()
    (app / "velvet-rope.toml").write_text(ROOM)
    (app / "app.py").write_text(
        "import velvet_rope\n"
        "from velvet_rope.asgi import WaitingRoom\n\n"
        "async def origin(scope, receive, send):\n"
        "    await send({'type': 'http.response.start', 'status': 200,\n"
        "                'headers': [(b'content-type', b'text/plain')]})\n"
        "    await send({'type': 'http.response.body', 'body': b'origin'})\n\n"
        "engine = velvet_rope.Engine(open('velvet-rope.toml').read())\n"
        "app = WaitingRoom(origin, engine, room='shop')\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [str(venv / "bin/uvicorn"), "app:app", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning"],
        cwd=app, env=env,
    )
    try:
        wait_for(port, proc, "uvicorn")
        admits_exactly_k(port, "wheel, ASGI middleware under uvicorn")
    finally:
        stop(proc)


def other_pythons() -> list[Path]:
    """CPython 3.10 and later beside the one running this (pyenv's, or on PATH): the wheel is
    abi3, so each of them must take it."""
    found = {}
    for minor in range(10, 20):
        name = f"python3.{minor}"
        candidates = sorted(Path.home().glob(f".pyenv/versions/3.{minor}.*/bin/{name}"))
        on_path = shutil.which(name)
        if on_path:
            candidates.append(Path(on_path))
        for c in candidates:
            if os.access(c, os.X_OK) and f"3.{minor}" != f"{sys.version_info[0]}.{sys.version_info[1]}":
                found.setdefault(minor, c)
    return [found[m] for m in sorted(found)]


IN_PROCESS = f"""
import velvet_rope
engine = velvet_rope.Engine(open("velvet-rope.toml").read())
admitted = sum(engine.admit("shop", None).outcome == "admit" for _ in range({VISITORS}))
print(admitted)
"""


def test_wheel_on_every_python(tmp: Path) -> None:
    """The abi3 wheel in a fresh venv of each other CPython 3.10+ found here, admitting in
    process (the ASGI test runs on this interpreter)."""
    wheel = one("velvet_rope-*-cp310-abi3-manylinux_2_28_x86_64.whl")
    env = clean_env(tmp)
    pythons = other_pythons()
    if not pythons:
        log("wheel: no other CPython 3.10+ on this machine (pyenv or PATH): only this one checked")
        return
    (tmp / "velvet-rope.toml").write_text(ROOM)
    for python in pythons:
        venv = tmp / f"venv-{python.name}"
        run([str(python), "-m", "venv", str(venv)], env)
        run([str(venv / "bin/pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
            env)
        out = run([str(venv / "bin/python"), "-c", IN_PROCESS], env, cwd=tmp).strip()
        assert out == str(K), f"{python}: {out} admitted, expected {K}"
        log(f"wheel under {python.name}: {out} of {VISITORS} admitted in process")


def test_npm(tmp: Path) -> None:
    tarball = one("velvet-rope-[0-9]*.tgz")
    one("velvet-rope-linux-x64-gnu-*.tgz")
    env = clean_env(tmp)
    app = tmp / "npm_app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "dist-check", "private": true}\n')
    express = json.loads((REPO / "node/package.json").read_text())["devDependencies"]["express"]
    platform = one("velvet-rope-linux-x64-gnu-*.tgz")
    alone = tmp / "npm_platform"
    alone.mkdir()
    (alone / "package.json").write_text('{"name": "platform-check", "private": true}\n')
    run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", str(platform)], env,
        cwd=alone)
    loaded = run(["node", "-e", "const b = require('velvet-rope-linux-x64-gnu'); "
                  "console.log(typeof b.nowMs, typeof b.Engine)"], env, cwd=alone).split()
    assert loaded[0] == "function", f"the platform package's addon did not load: {loaded}"
    log(f"npm: {platform.name} installs on its own and its addon loads")
    log(f"npm: npm install {tarball.name} express@{express} into a fresh folder")
    run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", str(tarball),
         f"express@{express}"], env, cwd=app)
    where = run(["node", "-e", "console.log(require.resolve('velvet-rope'))"], env, cwd=app)
    assert where.strip().startswith(str(app / "node_modules")), where
    named = run(["node", "--input-type=module", "-e",
                 "import { Engine, express, fastify } from 'velvet-rope'; "
                 "console.log(typeof Engine, typeof express, typeof fastify)"], env, cwd=app)
    assert named.split() == ["function"] * 3, f"ES module named imports: {named}"
    (app / "velvet-rope.toml").write_text(ROOM)
    (app / "server.js").write_text(
        "const express = require('express')\n"
        "const velvetRope = require('velvet-rope')\n"
        "const engine = velvetRope.Engine.fromFile('velvet-rope.toml')\n"
        "const app = express()\n"
        "app.use(velvetRope.express(engine, { room: 'shop' }))\n"
        "app.get('/', (req, res) => res.type('text/plain').send('origin'))\n"
        "app.listen(+process.env.PORT, '127.0.0.1')\n"
    )
    port = free_port()
    proc = subprocess.Popen(["node", "server.js"], cwd=app, env={**env, "PORT": str(port)})
    try:
        wait_for(port, proc, "the Express server")
        admits_exactly_k(port, "npm package, Express middleware")
    finally:
        stop(proc)


NGINX_CONF = """
include /etc/nginx/modules-enabled/*.conf;
worker_processes 2;
error_log {prefix}/error.log info;
pid {prefix}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp;
    proxy_temp_path {prefix}/tmp;
    fastcgi_temp_path {prefix}/tmp;
    uwsgi_temp_path {prefix}/tmp;
    scgi_temp_path {prefix}/tmp;
    default_type text/plain;
    velvet_rope_config {prefix}/velvet-rope.toml;
    server {{
        listen 127.0.0.1:{port};
        root {prefix}/html;
        velvet_rope shop;
    }}
}}
"""


def test_deb(tmp: Path) -> None:
    deb = one("libnginx-mod-http-velvet-rope_*_amd64.deb")
    env = clean_env(tmp)
    if os.geteuid() != 0:
        raise AssertionError("dpkg -i needs root")
    enabled = Path("/etc/nginx/modules-enabled/50-mod-http-velvet-rope.conf")
    log(f"deb: dpkg -i {deb.name}")
    run(["dpkg", "-i", str(deb)], env)
    try:
        assert enabled.is_symlink(), f"{enabled} was not made"
        # Debian's own nginx.conf (which includes modules-enabled/) still loads.
        run(["nginx", "-t"], env)
        # Installed again (an upgrade): still enabled; disabled by hand: stays disabled.
        run(["dpkg", "-i", str(deb)], env)
        assert enabled.is_symlink(), "a reinstallation dropped the link"
        enabled.unlink()
        run(["dpkg", "-i", str(deb)], env)
        assert not enabled.exists(), "a reinstallation re-enabled a module disabled by hand"
        enabled.symlink_to("/usr/share/nginx/modules-available/mod-http-velvet-rope.conf")
        assert "load_module modules/ngx_http_velvet_rope_module.so;" in enabled.read_text()
        assert Path("/usr/lib/nginx/modules/ngx_http_velvet_rope_module.so").is_file()
        prefix = tmp / "nginx"
        (prefix / "html").mkdir(parents=True)
        (prefix / "tmp").mkdir()
        (prefix / "html/index.html").write_text("origin\n")
        (prefix / "velvet-rope.toml").write_text(ROOM)
        port = free_port()
        conf = prefix / "nginx.conf"
        conf.write_text(NGINX_CONF.format(prefix=prefix, port=port))
        # nginx's own prefix (Debian's /usr/share/nginx, whose modules/ is
        # /usr/lib/nginx/modules): the package's `load_module modules/...` line is relative to it.
        run(["nginx", "-t", "-c", str(conf)], env)
        proc = subprocess.Popen(["nginx", "-c", str(conf), "-g", "daemon off;"], env=env)
        try:
            wait_for(port, proc, "nginx")
            admits_exactly_k(port, "Debian package, Debian's nginx (2 workers)")
        finally:
            stop(proc)
        log("deb: dpkg -r keeps the module off, dpkg --purge forgets it")
        run(["dpkg", "-r", "libnginx-mod-http-velvet-rope"], env)
        assert not enabled.exists() and not enabled.is_symlink(), "still enabled after -r"
        run(["nginx", "-t"], env)
    finally:
        run(["dpkg", "--purge", "libnginx-mod-http-velvet-rope"], env)
    assert not Path(str(enabled) + ".removed").exists()
    assert not Path("/usr/lib/nginx/modules/ngx_http_velvet_rope_module.so").exists()


C_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include <velvet_rope.h>

int main(void) {
    const char *config = "[[rooms]]\nname = \"shop\"\ntotal_active_users = %K%\n"
                         "new_users_per_minute = 1000\n";
    const uint64_t now = 1800000000000ULL;
    vr_engine *engine = NULL;
    if (vr_engine_new(config, strlen(config), now, &engine) != VR_OK) return 2;
    int admitted = 0;
    for (int i = 0; i < %VISITORS%; i++) {
        vr_decision d;
        if (vr_engine_admit(engine, "shop", 4, NULL, 0, now, &d) != VR_OK) return 3;
        admitted += d.outcome == VR_OUTCOME_ADMIT;
    }
    vr_engine_free(engine);
    printf("%s %d\n", vr_version(), admitted);
    return 0;
}
""".replace("%K%", str(K)).replace("%VISITORS%", str(VISITORS))


def soname(version: str) -> str:
    """The soname the library must carry (docs/compatibility.md)."""
    major, minor = version.split(".")[:2]
    return f"libvelvet_rope.so.0.{minor}" if major == "0" else f"libvelvet_rope.so.{major}"


def compile_and_run(tmp: Path, pc_dir: Path | None, what: str, rpath: bool = True) -> None:
    """A program built with pkg-config's flags (`pc_dir` on PKG_CONFIG_PATH, or pkg-config's
    own search path) admits exactly K; with `rpath`, it finds the library through it, else
    through the loader's cache (ldconfig)."""
    env = clean_env(tmp, **({"PKG_CONFIG_PATH": str(pc_dir)} if pc_dir else {}))
    src = tmp / "admit.c"
    src.write_text(C_PROGRAM)
    version = run(["pkg-config", "--modversion", "velvet-rope"], env).strip()
    flags = run(["pkg-config", "--cflags", "--libs", "velvet-rope"], env).split()
    libdir = run(["pkg-config", "--variable=libdir", "velvet-rope"], env).strip()
    exe = tmp / "admit"
    run(["gcc", "-std=c11", "-Wall", "-Werror", "-o", str(exe), str(src), *flags,
         *([f"-Wl,-rpath,{libdir}"] if rpath else [])], env)
    linked = run(["ldd", str(exe)], env)
    assert f"{soname(version)} => {libdir}/{soname(version)}" in linked, linked
    out = run([str(exe)], env).split()
    assert out == [version, str(K)], f"{what}: printed {out}, expected [{version}, {K}]"
    log(f"C, {what}: compiled with pkg-config (velvet-rope {version}), "
        f"{out[1]} of {VISITORS} admitted")


def test_c(tmp: Path) -> None:
    tarball = one("velvet-rope-c-*-x86_64-linux-gnu.tar.gz")
    unpacked = tmp / "c-anywhere"
    with tarfile.open(tarball) as t:
        t.extractall(unpacked, filter="tar")
    (root,) = unpacked.iterdir()
    compile_and_run(tmp, root / "lib/pkgconfig", "the tarball unpacked anywhere")
    prefix = tmp / "c-prefix"
    log(f"C: make install PREFIX={prefix}")
    run(["make", "--no-print-directory", "-C", str(REPO), "install-c-built",
         f"PREFIX={prefix}"], clean_env(tmp))
    compile_and_run(tmp, prefix / "lib/pkgconfig", "make install PREFIX=...")
    if os.geteuid() == 0:
        system_install(tmp)


def system_install(tmp: Path) -> None:
    """`make install PREFIX=/usr/local` as root: pkg-config finds the library with no
    PKG_CONFIG_PATH, and a program linked without an rpath finds it through ldconfig's cache.
    Every installed file is removed afterwards."""
    prefix = Path("/usr/local")
    installed = [prefix / "include/velvet_rope.h", prefix / "lib/pkgconfig/velvet-rope.pc",
                 prefix / "lib/libvelvet_rope.a", prefix / "lib/libvelvet_rope.so"]
    taken = [p for p in installed if p.exists() or p.is_symlink()]
    assert not taken, f"velvet-rope is installed in /usr/local already: {taken}"
    log("C: make install PREFIX=/usr/local (as root; removed afterwards)")
    try:
        run(["make", "--no-print-directory", "-C", str(REPO), "install-c-built",
             "PREFIX=/usr/local"], clean_env(tmp))
        compile_and_run(tmp, None, "make install PREFIX=/usr/local, no rpath", rpath=False)
    finally:
        for p in [*installed, *(prefix / "lib").glob("libvelvet_rope.so.*")]:
            if p.exists() or p.is_symlink():
                p.unlink()
        subprocess.run(["ldconfig"], check=False)


def test_binaries(tmp: Path) -> None:
    env = clean_env(tmp)
    for pattern in ("velvet-rope-[0-9]*-x86_64-linux-gnu.tar.gz",
                    "velvet-rope-envoy-*-x86_64-linux-gnu.tar.gz"):
        with tarfile.open(one(pattern)) as t:
            t.extractall(tmp / "bin", filter="tar")
    (cli,) = (tmp / "bin").glob("velvet-rope-[0-9]*/bin/velvet-rope")
    config = tmp / "velvet-rope.toml"
    config.write_text(ROOM)
    run([str(cli), "check-config", str(config)], env)
    (module,) = (tmp / "bin").glob("velvet-rope-envoy-*/libvelvet_rope_envoy.so")
    symbols = run(["nm", "-D", "--defined-only", str(module)], env)
    assert "envoy_dynamic_module_on_program_init" in symbols
    assert ".debug_info" not in run(["objdump", "-h", str(module)], env)
    log("the velvet-rope command checks a configuration; the Envoy module is stripped and "
        "exports the dynamic-module hooks")


def main() -> int:
    tests = [test_wheel, test_wheel_on_every_python, test_npm, test_deb, test_c, test_binaries]
    only = sys.argv[1:]
    failed = []
    with tempfile.TemporaryDirectory(prefix="velvet-rope-dist-") as tmp:
        # nginx's workers (www-data) read the pages and the configuration from here.
        os.chmod(tmp, 0o755)
        check_no_toolchain(clean_env(Path(tmp)))
        log(f"no cargo, rustc or maturin on PATH={CLEAN_PATH}")
        for test in tests:
            if only and test.__name__ not in only:
                continue
            case = Path(tmp) / test.__name__
            case.mkdir()
            try:
                test(case)
            except AssertionError as e:
                failed.append(test.__name__)
                log(f"FAILED {test.__name__}: {e}")
    if failed:
        log(f"{len(failed)} failed: {', '.join(failed)}")
        return 1
    log("every artifact installed and admitted exactly as configured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
