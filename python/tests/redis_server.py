"""A real redis-server (Debian's) for the tests: started on a free 127.0.0.1 port with
persistence off, spoken to with single RESP commands, killed at the end. Standard library
only, so the nginx and Envoy tests (run outside the package's environment) use it too."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """A running `redis-server`; `kill()` (SIGKILL) ends it."""

    def __init__(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("redis-server is missing (make test installs Debian's)")
        self.port = _free_port()
        # A directory of its own: a server loads a dump.rdb it finds in its directory.
        self.dir = tempfile.mkdtemp(prefix="vr-redis-")
        self.proc = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while self.command("PING") != "+PONG":
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)

    def command(self, *args: str) -> str | list[str] | None:
        """One RESP command: a list for an array answer, else the answer's first line; None
        when the server cannot be reached."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
                req = f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
                s.sendall(req.encode())
                data = b""
                while not data.endswith(b"\r\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError:
            return None
        lines = data.decode().split("\r\n")
        if lines[0].startswith("*"):
            return [x for x in lines[2::2] if x != ""]
        return lines[0]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)
