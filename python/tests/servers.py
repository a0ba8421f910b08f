"""Real servers for the tests: started as subprocesses on 127.0.0.1, stopped by signal."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).parent
CONFIG = HERE / "apps" / "rooms.toml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server command (uvicorn, gunicorn) serving a test app from `tests.apps`."""

    def __init__(self, kind: str, state: pathlib.Path, config: pathlib.Path = CONFIG,
                 app: str | None = None) -> None:
        """`app`: the module of `tests.apps` serving (default: `fastapi_app` under uvicorn,
        `flask_app` under gunicorn)."""
        self.kind = kind
        self.port = free_port()
        if kind == "uvicorn":
            argv = [sys.executable, "-m", "uvicorn", f"tests.apps.{app or 'fastapi_app'}:app",
                    "--host", "127.0.0.1", "--port", str(self.port), "--workers", "2",
                    "--log-level", "warning"]
        else:
            argv = [sys.executable, "-m", "gunicorn", "--workers", "2",
                    "--bind", f"127.0.0.1:{self.port}", "--log-level", "warning",
                    f"tests.apps.{app or 'flask_app'}:app"]
        multiproc = state.with_suffix(".prometheus")
        multiproc.mkdir(exist_ok=True)
        env = dict(os.environ, VR_CONFIG=str(config), VR_STATE=str(state),
                   PYTHONPATH=str(HERE.parent), PROMETHEUS_MULTIPROC_DIR=str(multiproc))
        self.log = state.with_suffix(".log")
        self._log_file = open(self.log, "w")
        self.proc = subprocess.Popen(argv, cwd=HERE.parent, env=env,
                                     stdout=self._log_file, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, workers: int = 2) -> None:
        """Until every worker answers (the socket is bound before the workers are up)."""
        from .http_client import get

        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited: {self.log.read_text()}")
            try:
                pid = get(self.port, "/health").header("X-Worker-Pid")
            except OSError:
                time.sleep(0.1)
                continue
            if pid is not None:
                seen.add(pid)
            if len(seen) >= workers:
                return
            time.sleep(0.01)
        raise RuntimeError(f"{self.kind}: {len(seen)} of {workers} workers answered: "
                           f"{self.log.read_text()}")

    def stop(self) -> int | None:
        """Graceful stop (SIGTERM); the exit status, or None if it had to be killed."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    return self.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                    return None
            return self.proc.returncode
        finally:
            self._log_file.close()
