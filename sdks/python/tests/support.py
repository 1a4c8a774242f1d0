"""Test support: the real ``spendgate`` binary on ephemeral ports, its database (to
inject faults behind its back), a signed-in dashboard session, a flaky forwarding
proxy, a fake OpenAI upstream and a fake payment processor."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import httpx

REPO = Path(__file__).resolve().parents[3]
PASSWORD = "correct-horse-battery"


def binary() -> str:
    """``SPENDGATE_BIN``, else the workspace's debug build (built when missing)."""
    path = os.environ.get("SPENDGATE_BIN") or str(REPO / "target" / "debug" / "spendgate")
    if not Path(path).exists():
        subprocess.run(["cargo", "build", "--bin", "spendgate"], cwd=REPO, check=True)
    return path


class Database:
    """A fresh SQLite file, or a fresh PostgreSQL database when
    ``SPENDGATE_TEST_BACKEND=postgres``."""

    def __init__(self) -> None:
        self.pg_name: Optional[str] = None
        self.dir = tempfile.mkdtemp(prefix="spendgate-sdk-")
        if os.environ.get("SPENDGATE_TEST_BACKEND") == "postgres":
            admin = os.environ.get("SPENDGATE_TEST_PG_URL", "postgres://postgres@127.0.0.1:5432")
            self.pg_name = f"sg_sdk_{uuid.uuid4().hex}"
            subprocess.run(["psql", f"{admin}/postgres", "-qc", f"CREATE DATABASE {self.pg_name}"], check=True)
            self.url = f"{admin}/{self.pg_name}"
            self._admin = admin
        else:
            self.url = f"sqlite://{self.dir}/spendgate.db"

    def sql(self, script: str) -> None:
        """Runs SQL statements on the database behind the running server's back,
        as an operator or a failing disk would."""
        if self.pg_name:
            subprocess.run(["psql", self.url, "-v", "ON_ERROR_STOP=1", "-qc", script], check=True,
                           capture_output=True)
            return
        conn = sqlite3.connect(f"{self.dir}/spendgate.db", timeout=10)
        try:
            conn.executescript(script)
        finally:
            conn.close()

    def drop(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.pg_name:
            subprocess.run(["psql", f"{self._admin}/postgres", "-qc",
                            f"DROP DATABASE IF EXISTS {self.pg_name} WITH (FORCE)"], check=False)


class Server:
    """One ``spendgate serve`` process; ``control`` and ``proxy`` are its URLs."""

    def __init__(self, extra_env: Optional[Dict[str, str]] = None) -> None:
        self.db = Database()
        env = {
            "PATH": os.environ.get("PATH", ""),
            "SPENDGATE_DATABASE_URL": self.db.url,
            "SPENDGATE_CONTROL_ADDR": "127.0.0.1:0",
            "SPENDGATE_PROXY_ADDR": "127.0.0.1:0",
            "SPENDGATE_DEV": "1",
            "SPENDGATE_WORKERS": "2",
            "SPENDGATE_ARBITERS": "2",
            "SPENDGATE_DB_MAX_CONNECTIONS": "4",
            "SPENDGATE_DEFAULT_PLAN": "free",
            "SPENDGATE_LOG": "warn",
            # Nothing leaves the machine: a call that passes enforcement meets a
            # closed loopback port unless a test gives a fake upstream.
            "SPENDGATE_UPSTREAM_OPENAI": "http://127.0.0.1:9",
            "SPENDGATE_UPSTREAM_ANTHROPIC": "http://127.0.0.1:9",
            "SPENDGATE_UPSTREAM_GEMINI": "http://127.0.0.1:9",
            **(extra_env or {}),
        }
        self.log = open(Path(self.db.dir) / "server.log", "w")
        self.proc = subprocess.Popen([binary(), "serve"], env=env, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        ready = self._ready_line()
        fields = dict(p.split("=", 1) for p in ready.split() if "=" in p)
        self.control, self.proxy = fields["control"], fields["proxy"]

    def _ready_line(self) -> str:
        found: List[str] = []
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:  # read to the end: the pipe must not fill
                if line.startswith("spendgate ready") and not found:
                    found.append(line)
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or not found:
            self.stop()
            raise RuntimeError("spendgate did not become ready: " + (Path(self.db.dir) / "server.log").read_text())
        return found[0]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()
        self.db.drop()


class Dashboard:
    """A signed-in dashboard user: what a human does in the browser."""

    def __init__(self, server: Server, email: str, org: Optional[str] = None) -> None:
        self.base = server.control
        self.http = httpx.Client(base_url=server.control, headers={"Origin": server.control}, timeout=30)
        if org is None:
            r = self.http.post("/api/auth/signup", json={"email": email, "password": PASSWORD})
            assert r.status_code == 201, r.text
            return
        subprocess.run([binary(), "user", "create", "--email", email, "--password", PASSWORD, "--org", org,
                        "--role", "owner"], check=True, capture_output=True,
                       env={"PATH": os.environ.get("PATH", ""), "SPENDGATE_DATABASE_URL": server.db.url,
                            "SPENDGATE_DEFAULT_PLAN": "free"})
        r = self.http.post("/api/auth/login", json={"email": email, "password": PASSWORD})
        assert r.status_code == 200, r.text

    def create_key(self, name: str, **fields: Any) -> Tuple[str, str]:
        r = self.http.post("/api/keys", json={"name": name, **fields})
        assert r.status_code == 201, r.text
        return r.json()["data"]["id"], r.json()["data"]["rawKey"]

    def approve(self, action_id: str) -> httpx.Response:
        return self.http.post(f"/api/actions/{action_id}/approve")

    def reject(self, action_id: str) -> httpx.Response:
        return self.http.post(f"/api/actions/{action_id}/reject")

    def action(self, action_id: str) -> Dict[str, Any]:
        r = self.http.get(f"/api/actions/{action_id}")
        assert r.status_code == 200, r.text
        data: Dict[str, Any] = r.json()["data"]
        return data

    def events_tagged(self, key: str, value: str) -> List[Dict[str, Any]]:
        r = self.http.get("/api/cost-events", params={f"tag.{key}": value, "limit": 100})
        assert r.status_code == 200, r.text
        events: List[Dict[str, Any]] = r.json()["data"]
        return events


class Recorder(ThreadingHTTPServer):
    """A loopback HTTP server whose handler is a plain function of the request."""

    def __init__(self, handle: Callable[[str, str, Dict[str, str], bytes], Tuple[int, Dict[str, str], bytes]]):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append((self.command, self.path, headers, body))
                status, out_headers, out = handle(self.command, self.path, headers, body)
                self.send_response(status)
                for k, v in out_headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.requests: List[Tuple[str, str, Dict[str, str], bytes]] = []
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


def flaky_forwarder(target: str, failures: int, retry_after: str = "1", status: int = 503) -> Recorder:
    """Forwards every request to ``target``; the first ``failures`` answers are
    replaced by ``status`` (503) with ``Retry-After`` after the request reached the server, as when
    a load balancer loses the answer."""
    left = [failures]

    def handle(method: str, path: str, headers: Dict[str, str], body: bytes) -> Tuple[int, Dict[str, str], bytes]:
        fwd = {k: v for k, v in headers.items() if k not in ("host", "content-length", "connection")}
        r = httpx.request(method, target + path, headers=fwd, content=body, timeout=30)
        if left[0] > 0:
            left[0] -= 1
            return status, {"retry-after": retry_after, "content-type": "application/json"}, json.dumps(
                {"error": {"code": "service_unavailable", "message": "try again", "details": None}}).encode()
        return r.status_code, {"content-type": r.headers.get("content-type", "application/json")}, r.content

    return Recorder(handle)


def fake_openai(script: List[Dict[str, Any]]) -> Recorder:
    """An OpenAI-compatible chat completions upstream answering the scripted
    assistant messages in order (the last one repeats)."""
    turn = [0]

    def handle(method: str, path: str, headers: Dict[str, str], body: bytes) -> Tuple[int, Dict[str, str], bytes]:
        message = script[min(turn[0], len(script) - 1)]
        turn[0] += 1
        answer = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": json.loads(body or b"{}").get("model", "gpt-4o-mini"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }
        return 200, {"content-type": "application/json", "x-request-id": uuid.uuid4().hex}, json.dumps(answer).encode()

    return Recorder(handle)


def fake_processor() -> Recorder:
    """A payment processor answering like Stripe's REST API to a key it does not
    know: every call is 401 with its error body."""

    def handle(method: str, path: str, headers: Dict[str, str], body: bytes) -> Tuple[int, Dict[str, str], bytes]:
        error = {"type": "invalid_request_error", "message": "Invalid API Key provided: rk_test_****0001"}
        return 401, {"content-type": "application/json"}, json.dumps({"error": error}).encode()

    return Recorder(handle)
