"""lightningd's side of the plugin protocol, for one plugin process.

As lightningd does: spawn the plugin with ``LIGHTNINGD_PLUGIN=1`` and
``LIGHTNINGD_VERSION`` in its environment, stdin and stdout piped, stderr
inherited (captured here), working directory the network's lightning-dir;
send ``getmanifest`` then ``init`` (``options`` with defaults filled in,
``configuration`` with lightning-dir, rpc-file, startup, network,
feature_set); forward RPC commands the plugin registered; send the
``shutdown`` notification and give the plugin 30 s to exit. Every message in
both directions is one JSON object followed by a blank line. Anything else
the plugin writes to its stdout is recorded in :attr:`PluginHost.protocol_errors`:
lightningd would kill a plugin for it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .server import FakeLightningd

SHUTDOWN_GRACE_S = 30.0  # lightningd's wait before it kills a plugin at shutdown
INIT_TIMEOUT_S = 60.0  # lightningd's limit for getmanifest and for init


class PluginCallError(Exception):
    """The plugin answered a request with a JSON-RPC error."""

    def __init__(self, method: str, error: Mapping[str, Any]) -> None:
        super().__init__(f"{method}: {error.get('message')} (code {error.get('code')})")
        self.code = error.get("code")
        self.message = str(error.get("message", ""))


class PluginHost:
    """Runs one plugin under a FakeLightningd's configuration."""

    def __init__(
        self,
        command: Sequence[str],
        lightningd: FakeLightningd,
        options: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.command = list(command)
        self.lightningd = lightningd
        self.user_options = dict(options or {})
        self.extra_env = dict(env or {})
        self.manifest: dict[str, Any] = {}
        self.init_result: Any = None
        self.disabled: str | None = None
        self.logs: list[tuple[str, str]] = []  # (level, message) from log notifications
        self.notifications: list[dict[str, Any]] = []
        self.protocol_errors: list[str] = []
        self.stderr_lines: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[str, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._readers: list[threading.Thread] = []

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self._proc is not None, "plugin not started"
        return self._proc

    def start(self, timeout_s: float = INIT_TIMEOUT_S) -> None:
        """Spawn, getmanifest, init. Sets :attr:`disabled` if the plugin disabled itself."""
        env = dict(os.environ)
        env.update(self.extra_env)
        env["LIGHTNINGD_PLUGIN"] = "1"
        env["LIGHTNINGD_VERSION"] = "v25.12-fake"
        self._proc = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=self.lightningd.lightning_dir,
            env=env,
        )
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True, name="plugin-stdout"),
            threading.Thread(target=self._read_stderr, daemon=True, name="plugin-stderr"),
        ]
        for reader in self._readers:
            reader.start()
        self.manifest = self.request(
            "getmanifest", {"allow-deprecated-apis": False}, timeout_s=timeout_s
        )
        self._check_manifest()
        self.init_result = self.request(
            "init",
            {
                "options": self._init_options(),
                "configuration": {
                    "lightning-dir": str(self.lightningd.lightning_dir),
                    "rpc-file": self.lightningd.rpc_file,
                    "startup": True,
                    "network": self.lightningd.node.network,
                    "feature_set": {
                        "init": "08a0000a8a5961",
                        "node": "88a0000a8a5961",
                        "channel": "",
                        "invoice": "02000002024100",
                    },
                },
            },
            timeout_s=timeout_s,
        )
        if isinstance(self.init_result, dict) and "disable" in self.init_result:
            # lightningd logs "disabled itself at init" and kills the process.
            self.disabled = str(self.init_result["disable"])
            self.kill()

    def _check_manifest(self) -> None:
        for opt in self.manifest.get("options", []):
            for key in ("name", "type", "description"):
                assert key in opt, f"option without {key}: {opt}"
            assert opt["type"] in ("string", "int", "bool", "flag"), opt
        for method in self.manifest.get("rpcmethods", []):
            assert "name" in method, method
        known = {opt["name"] for opt in self.manifest.get("options", [])}
        unknown = set(self.user_options) - known
        # lightningd refuses to start with an option nobody registered.
        assert not unknown, f"options not registered by the plugin: {unknown}"

    def _init_options(self) -> dict[str, Any]:
        """lightningd's json_add_plugin_options: set values, else defaults, typed by option."""
        out: dict[str, Any] = {}
        for opt in self.manifest.get("options", []):
            name = opt["name"]
            if name in self.user_options:
                value = self.user_options[name]
            elif "default" in opt:
                value = opt["default"]
            else:
                continue
            if opt["type"] == "int":
                value = int(value)
            elif opt["type"] in ("bool", "flag"):
                value = value if isinstance(value, bool) else str(value).lower() == "true"
            else:
                value = str(value)
            out[name] = value
        return out

    def shutdown(self, timeout_s: float = SHUTDOWN_GRACE_S) -> float:
        """Send the shutdown notification; returns the seconds the plugin took to exit.

        Raises TimeoutError (after killing it, as lightningd would) if it did not.
        """
        started = time.monotonic()
        self._send({"jsonrpc": "2.0", "method": "shutdown", "params": {"shutdown": {}}})
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"plugin did not exit within {timeout_s} s of shutdown") from None
        self._join_readers()
        return time.monotonic() - started

    def kill(self) -> None:
        """End the plugin at once (lightningd disabling it, or a crash)."""
        proc = self.process
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        self._join_readers()

    def _join_readers(self) -> None:
        """After exit: drain what the plugin wrote, then close our ends of its pipes."""
        for reader in self._readers:
            reader.join(10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    # -- messages ---------------------------------------------------------------------------

    def _send(self, message: Mapping[str, Any]) -> None:
        data = json.dumps(message).encode("utf-8") + b"\n\n"
        stdin = self.process.stdin
        assert stdin is not None
        with self._write_lock:
            stdin.write(data)
            stdin.flush()

    def request(self, method: str, params: Any, timeout_s: float = 30.0) -> Any:
        """Send a request as lightningd (string ids, as for nonnumericids plugins)."""
        req_id = f"cln:{method}#{next(self._ids)}"
        self._send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while req_id not in self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"plugin did not answer {method} within {timeout_s} s")
                if self.process.poll() is not None and not self._readers_alive():
                    raise ConnectionError(
                        f"plugin exited ({self.process.returncode}) before"
                        f" answering {method}; stderr: {self.stderr_lines}"
                    )
                self._cond.wait(min(remaining, 0.2))
            response = self._pending.pop(req_id)
        if "error" in response:
            raise PluginCallError(method, response["error"])
        return response.get("result")

    def call(self, method: str, params: Any = None, timeout_s: float = 30.0) -> Any:
        """A command a user runs with lightning-cli, forwarded to the plugin that registered it."""
        names = {m["name"] for m in self.manifest.get("rpcmethods", [])}
        if method not in names:
            raise PluginCallError(
                method, {"code": -32601, "message": f"Unknown command '{method}'"}
            )
        return self.request(method, {} if params is None else params, timeout_s)

    def _readers_alive(self) -> bool:
        return any(r.is_alive() for r in self._readers)

    def _read_stdout(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        buf = b""
        while True:
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            *messages, buf = buf.split(b"\n\n")
            for raw in messages:
                self._handle_raw(raw)
        if buf.strip():
            self.protocol_errors.append(f"unterminated output at exit: {buf[:200]!r}")
        with self._cond:
            self._cond.notify_all()

    def _handle_raw(self, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            self.protocol_errors.append(f"not a JSON-RPC message: {raw[:200]!r}")
            return
        if not isinstance(message, dict):
            self.protocol_errors.append(f"not a JSON object: {raw[:200]!r}")
            return
        if "method" not in message and "id" in message:
            with self._cond:
                self._pending[str(message["id"])] = message
                self._cond.notify_all()
        elif message.get("method") == "log" and "id" not in message:
            params = message.get("params", {})
            self.logs.append((str(params.get("level")), str(params.get("message"))))
        else:
            self.notifications.append(message)

    def _read_stderr(self) -> None:
        stderr = self.process.stderr
        assert stderr is not None
        for line in stderr:
            self.stderr_lines.append(line.decode("utf-8", "replace").rstrip("\n"))

    def log_text(self) -> str:
        return "\n".join(message for _, message in self.logs)

    def wait_for_log(self, needle: str, timeout_s: float = 10.0) -> str:
        """Block until a log line containing ``needle`` arrives; returns it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for _, message in list(self.logs):
                if needle in message:
                    return message
            time.sleep(0.05)
        raise TimeoutError(f"no log line with {needle!r}; logs: {self.log_text()}")
