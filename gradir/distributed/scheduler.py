"""Opening the engine a sharded run uses (``open_scheduler``): ``inline``, a local Dask cluster, or a
Dask scheduler at an address, and the checks that make a wrong address an error in seconds.

Dask's own client retries a connection for its whole timeout and reads whatever a listener sends as a
length-prefixed frame, so a dead address, a foreign listener (a dashboard's HTTP port) or one that never
speaks hung the run or failed it with "out of memory".  ``probe`` speaks the first bytes of Dask's
handshake itself, within ``connect_timeout()`` seconds, and says which of these it met; ``check_client``
refuses what is no engine at all before anything is started.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Iterator, Optional

from ..errors import ArgumentError, Diagnostic, GradirError, ShardError, shown

__all__ = ["open_scheduler", "setup_error", "check_client", "probe", "tcp_host_port", "connect_timeout", "DASK_HINT",
           "MALLOC_ENV", "CONNECT_TIMEOUT", "TIMEOUT_ENV", "SCHEMES"]


DASK_HINT = 'Dask is not installed: pip install "gradir[dask]" (or run the shards with --scheduler inline)'


# glibc's allocator in the workers of a local:N cluster.  Dask sets MALLOC_TRIM_THRESHOLD_=65536 in its
# workers, which also turns off glibc's adaptive mmap threshold: every array over 128 KiB (a shard's
# inputs, its intermediates, a result being received) is then a fresh mmap whose pages fault in on
# first touch, and the pages go back to the system when it is freed.  On the VMs measured that is
# 1-2 ms per MB: 40-100 ms per task of the LSTM LM at B=256.  A worker runs the same shard graph
# again and again, so it keeps its arrays' memory instead (up to its peak use).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 31)}


@contextlib.contextmanager
def open_scheduler(spec: Any) -> Iterator[Any]:
    """``None``/``"inline"`` -> ``"inline"``; ``"local:N"`` -> a client of a ``LocalCluster`` of N worker
    processes (one thread each) closed on exit; ``"tcp://host:port"`` (or any address Dask takes) -> a
    client of that scheduler; a ``distributed.Client`` is used as it is."""
    check_client(spec)
    if spec is None or spec == "inline":
        yield "inline"
        return
    if not isinstance(spec, str):
        yield spec  # a Client (or anything with submit/as_completed-compatible futures)
        return
    try:
        import logging
        from distributed import Client, LocalCluster
    except ImportError:
        raise ShardError(setup_error(DASK_HINT)) from None
    if spec.startswith("local:"):
        n = spec[6:]
        if not n.isdigit() or not 1 <= int(n) <= 256:
            raise ArgumentError(f"scheduler {spec!r}: local:N needs a number of worker processes from 1 to 256")
        try:
            import dask
            # Without the workers' statistical profiler, which samples the task's stack every 10 ms
            # holding the GIL: a shard of the LSTM LM computed in 617 instead of 638 ms.
            env = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
            env.update(MALLOC_ENV)
            # and with the workers' periodic monitors slowed down (system monitor 500 ms -> 5 s,
            # memory monitor 100 ms -> 1 s, event-loop tick 20 ms -> 500 ms): on their worker
            # they run beside the shard, and the slower of two shards had computed 567-645 ms
            # against 552-591 with them slowed (five runs each)
            quiet = {"distributed.admin.system-monitor.interval": "5s",
                     "distributed.worker.memory.monitor-interval": "1s", "distributed.admin.tick.interval": "500ms"}
            with dask.config.set({"distributed.worker.profile.enabled": False, **quiet,
                                  "distributed.nanny.pre-spawn-environ": env}):
                # No dashboard: with bokeh installed, dashboard_address=":0" served one on every interface
                # (0.0.0.0).  The scheduler's HTTP server (health and metrics routes) still starts; it
                # listens on a free port of 127.0.0.1 (by default 8787, with a warning when taken).
                cluster = LocalCluster(n_workers=int(n), threads_per_worker=1, processes=True,
                                       dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                                       silence_logs=logging.ERROR)
        except (RuntimeError, OSError) as e:  # e.g. a worker could not start (spawn re-runs __main__)
            raise ShardError(setup_error(f"cannot start a local Dask cluster ({spec}): {e}; a script that starts "
                                    f"one must guard its main code with `if __name__ == \"__main__\":`")) from None
        try:
            # results come straight from the workers, not through the scheduler (a 16 MB result
            # of the LSTM LM at B=256: 10-20 ms after its task ends instead of 25-100 ms)
            with Client(cluster, direct_to_workers=True) as client:
                yield client
        finally:
            cluster.close()
        return
    seconds = connect_timeout()
    probe(spec, seconds)
    try:
        client = Client(spec, timeout=f"{seconds}s")
    except GradirError:
        raise
    except Exception as e:  # OSError, a timeout, MemoryError (a length read from a non-Dask peer), ...
        raise ShardError(setup_error(f"cannot connect to the Dask scheduler {spec!r}: {type(e).__name__}: "
                                f"{str(e)[:300]}")) from None
    with client:
        yield client


def setup_error(message: str) -> Diagnostic:
    """An error of the run's set-up (Dask, the scheduler), not of a file: "gradir: error: ..."."""
    return Diagnostic(message, filename="gradir")


def tcp_host_port(spec: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` (or another scheme's address) as (host, port); ``ValueError`` saying what is
    expected otherwise."""
    from urllib.parse import urlsplit
    try:
        u = urlsplit(spec)
        host, port = u.hostname, u.port
    except ValueError:
        host = port = None
    if not host or not port:
        scheme = spec.partition("://")[0] if "://" in spec else "tcp"
        raise ValueError(f"scheduler {spec!r}: expected {scheme}://HOST:PORT, e.g. {scheme}://10.0.0.5:8786")
    return host, port


# How long gradir waits for a scheduler to accept the connection and greet it (seconds): a Dask
# scheduler greets a client at once, so a few seconds tell a dead or foreign listener from a scheduler
# without hanging on it.  GRADIR_SCHEDULER_TIMEOUT sets it (a slow network; the tests make it short).
CONNECT_TIMEOUT = 5.0
TIMEOUT_ENV = "GRADIR_SCHEDULER_TIMEOUT"
# the address schemes gradir connects to: Dask's TCP, its TLS (certificates from Dask's configuration)
# and its websockets; others (ucx://, inproc://) are refused with a message, not attempted
SCHEMES = ("tcp", "tls", "ws", "wss")


def connect_timeout() -> float:
    """``GRADIR_SCHEDULER_TIMEOUT`` (seconds) when it is set, else ``CONNECT_TIMEOUT``."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return CONNECT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 3600:
        raise ShardError(setup_error(f"{TIMEOUT_ENV} must be a number of seconds more than 0 and at most 3600, "
                                     f"got {text[:40]!r}"))
    return value


def check_client(spec: Any) -> None:
    """``ArgumentError`` unless ``spec`` is ``None``, ``"inline"``, ``"local:N"``, a scheduler address
    (``SCHEME://HOST:PORT``) or a Dask client (an object with ``submit`` and ``scatter``)."""
    if spec is None:
        return
    if isinstance(spec, str):
        if spec == "inline" or "://" in spec:
            return
        if spec.startswith("local:"):
            n = spec[6:]
            if not (n.isascii() and n.isdigit() and 1 <= int(n) <= 256):
                raise ArgumentError(f"scheduler {shown(spec)}: local:N needs a number of worker processes from 1 "
                                    f"to 256")
            return
        raise ArgumentError(f"scheduler {shown(spec)}: expected \"inline\", \"local:N\" or a scheduler address "
                            f"such as tcp://host:8786")
    if not (callable(getattr(spec, "submit", None)) and callable(getattr(spec, "scatter", None))):
        raise ArgumentError(f"client must be None, \"inline\", \"local:N\", a scheduler address such as "
                            f"tcp://host:8786 or a distributed.Client, got {type(spec).__name__}")


def _tls_context(scheme: str = "tls") -> Any:
    """The client TLS context of Dask's configuration (``distributed.comm.tls.*``), or a ``ShardError``
    saying it is not configured (naming ``scheme``, the one the address used: tls or wss)."""
    from distributed.security import Security
    try:
        ctx = Security().get_connection_args("client").get("ssl_context")
    except Exception as e:  # a certificate file that cannot be read, ...
        raise ShardError(setup_error(f"Dask's TLS configuration cannot be used: {type(e).__name__}: {e}")) from None
    if ctx is None:
        raise ShardError(setup_error(f"a {scheme}:// scheduler needs TLS certificates in Dask's configuration "
                                "(distributed.comm.tls.ca-file, distributed.comm.tls.client.cert and .key, or the "
                                "DASK_DISTRIBUTED__COMM__TLS__... environment variables); none is set"))
    return ctx


def probe(spec: str, timeout: Optional[float] = None) -> None:
    """Fail within ``timeout`` seconds (``connect_timeout()``), with a message naming the address, not
    after Dask's retries or never: a scheme gradir does not connect to, nothing listening (a refused
    connection, an unknown host), a listener that does not accept in time, and, over tcp:// and tls://,
    a listener that does not greet the client as a Dask scheduler does at once (Dask's handshake: a
    length-prefixed frame; a listener that never speaks hung the run, and an HTTP server's reply was
    read as a length of exabytes: "out of memory")."""
    import socket
    import struct
    scheme = spec.partition("://")[0].lower()
    if scheme not in SCHEMES:
        raise ShardError(setup_error(f"scheduler {spec!r}: gradir connects to a Dask scheduler over tcp:// (or tls://, "
                                f"ws://, wss://), not {scheme}://"))
    try:
        host, port = tcp_host_port(spec)
    except ValueError as e:
        raise ArgumentError(str(e)) from None
    if timeout is None:
        timeout = connect_timeout()
    ctx = _tls_context(scheme) if scheme in ("tls", "wss") else None
    where = f"the Dask scheduler {spec!r}"
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except socket.timeout:
        raise ShardError(setup_error(f"cannot reach {where}: no connection within {timeout:g} s (set {TIMEOUT_ENV} "
                                f"to wait longer)")) from None
    except (OSError, UnicodeError) as e:
        raise ShardError(setup_error(f"cannot reach {where}: {getattr(e, 'strerror', None) or e}")) from None

    def read(n: int) -> bytes:
        data = b""
        while len(data) < n:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk = sock.recv(n - len(data))
            if not chunk:
                break
            data += chunk
        return data

    silent = (f"scheduler {spec!r} accepted the connection but did not answer within {timeout:g} s, as a Dask "
              f"scheduler does at once: is it a Dask scheduler (its port, usually 8786, not its dashboard's "
              f"8787)? (set {TIMEOUT_ENV} to wait longer)")
    try:
        with sock:
            if ctx is not None:
                sock = ctx.wrap_socket(sock, server_hostname=host if ctx.check_hostname else None)
            if scheme in ("ws", "wss"):  # the client speaks first: a websocket upgrade, answered by "101"
                _websocket_probe(sock, host, port, read, f"scheduler {spec!r}")
                return
            head = read(8)
            if len(head) < 8:
                raise ShardError(setup_error(f"scheduler {spec!r} closed the connection without greeting gradir as a "
                                        f"Dask scheduler does: is it a Dask scheduler?"))
            total = struct.unpack("<Q", head)[0]
            body = read(total) if 16 <= total <= 1 << 20 else b""
            nframes = struct.unpack("<Q", body[:8])[0] if len(body) >= 8 else 0
            ok = len(body) == total and 1 <= nframes <= 64 and len(body) >= 8 * (nframes + 1) and (
                8 * (nframes + 1) + sum(struct.unpack(f"<{nframes}Q", body[8:8 * (nframes + 1)])) == total)
            if not ok:
                if not body:  # what else it sent at once, to show
                    sock.settimeout(0.2)
                    with contextlib.suppress(OSError):
                        body = sock.recv(32)
                text = (head + body)[:40]
                raise ShardError(setup_error(
                    f"scheduler {spec!r} is not a Dask scheduler: it answered {text!r}, not Dask's handshake (is "
                    f"the port the scheduler's, usually 8786, not its dashboard's?)"))
    except socket.timeout:
        raise ShardError(setup_error(silent)) from None
    except OSError as e:  # a reset connection, a failed TLS handshake (ssl.SSLError)
        raise ShardError(setup_error(f"cannot connect to {where}: {type(e).__name__}: {e}")) from None


def _websocket_probe(sock: Any, host: str, port: int, read: Any, where: str) -> None:
    """Ask the listener to upgrade ``/`` to a websocket, as Dask's ws:// client does; a Dask scheduler
    answers ``HTTP/1.1 101``."""
    import base64
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    line = b""
    while not line.endswith(b"\n") and len(line) < 200:
        c = read(1)
        if not c:
            break
        line += c
    if not line.startswith(b"HTTP/1.1 101"):
        what = f"it answered {line[:60]!r}" if line else "it closed the connection"
        raise ShardError(setup_error(f"{where} is not a Dask scheduler: {what}, not a websocket upgrade"))
