"""A local web server standing in for a download site (tests never reach the internet)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Mapping


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
