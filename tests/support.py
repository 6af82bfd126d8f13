"""What many tests share: the repository root, running code in a fresh Python process, and
a local web server standing in for a download site."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

# The repository root: entry points, configs/ and scripts/ are found from it.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_python(
    args: Sequence[str],
    cwd: str | os.PathLike = ROOT,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> str:
    """``python ARGS`` in a fresh process (this interpreter); its stdout, after asserting
    that it exited 0 (the failure shows the end of its stderr). A fresh process keeps
    MindSpore's process-wide state (device, context, kernels) out of the test's own."""
    out = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


class FileServer:
    """Serves ``files`` (name -> bytes) at ``http://127.0.0.1:<free port>/<name>`` from a
    thread, recording each requested path; any other path is a 404. A context manager."""

    def __init__(self, files: Mapping[str, bytes] | None = None):
        self.files = dict(files or {})
        self.requests: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.requests.append(self.path)
                body = server.files.get(self.path.lstrip("/"))
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # keep the test output clean
                pass

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
