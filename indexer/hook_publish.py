"""What a git hook runs: publish the paths a commit changed, with their contents, to JetStream.

Run by the installed hooks as ``python -I -S indexer/hook_publish.py HOOK [ARGS...] --repository
NAME --nats URL``. Standard library only, on purpose: an interpreter without site-packages starts
in ~20 ms, and a minimal NATS client (CONNECT, SUB, PUB with a reply inbox, wait for the
JetStream ack) finishes in a few more, so the hook never slows a commit down. When NATS cannot
be reached it says so in one line and exits 0: a commit never fails because of us.

The message (``ctxpress_core.wire.v1.IndexEvent``) carries the content of every changed path at the
new commit, so the index worker needs no access to this disk. Secrets (``indexer.filters``) are
never read, and binaries and files over the size limit are sent as names only.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

STARTED = time.time()
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from indexer.filters import DEFAULT_MAX_FILE_BYTES, content_reason, path_reason  # noqa: E402

SUBJECT = "ctxpress.v1.index.git"  # ctxpress_core.wire.v1.SUBJECT_INDEX_GIT (this script runs without the package)
HOOKS_USER = "hooks"  # ctxpress_core.identity.HOOKS_USER
# A developer's own events, checked against their grants: ctxpress_core.identity.user_subject(user, "index_git")
USER_SUBJECT = "ctxpress.v1.u.{user}.index_git"
MAX_PATH_BYTES = 1024  # ctxpress_core.wire.v1.MAX_INDEX_PATH_BYTES
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
CONNECT_TIMEOUT_S = 0.5
ACK_TIMEOUT_S = 2.0


class PublishError(RuntimeError):
    pass


def _git(*args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", *args], input=stdin, capture_output=True, check=False)
    if proc.returncode != 0:
        raise PublishError(f"git {args[0]}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def _rev(name: str) -> str | None:
    proc = subprocess.run(["git", "rev-parse", "--verify", "-q", f"{name}^{{commit}}"], capture_output=True,
                          check=False)
    if proc.returncode != 0:
        return None
    return proc.stdout.decode().strip() or None


def _rebasing() -> bool:
    git_dir = Path(_git("rev-parse", "--git-dir").decode().strip())
    return (git_dir / "rebase-merge").exists() or (git_dir / "rebase-apply").exists()


def commits_for(hook: str, args: list[str]) -> tuple[str | None, str] | None:
    """(old, new) commits whose difference this hook reports; None: nothing to report."""
    new = _rev("HEAD")
    if new is None:
        return None
    if hook in ("post-commit", "post-checkout") and _rebasing():
        return None  # a rebase reports once, at its end, through post-rewrite
    if hook == "post-commit":
        return _rev("HEAD^1"), new
    if hook == "post-merge":
        return _rev("ORIG_HEAD"), new
    if hook == "post-checkout":
        if len(args) >= 3 and args[2] == "0":
            return None  # a file checkout: the working tree, not a commit, changed
        old = args[0] if args and set(args[0]) != {"0"} else None
        return (old, new) if old != new else None
    if hook == "post-rewrite":
        return (_rev("HEAD@{1}") if args and args[0] == "amend" else _rev("ORIG_HEAD")), new
    return None


def _name(raw: bytes) -> str | None:
    """A path as the wire carries it (JSON text), or None for a name that is not UTF-8: it has no exact form
    there, and the index worker could never match it to the file again; None too for one the index cannot hold
    (the worker would refuse the whole event)."""
    if len(raw) > MAX_PATH_BYTES:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def diff(old: str | None, new: str) -> tuple[list[dict[str, str | None]], list[str | None], int]:
    """The paths ``new`` changed since ``old``, the blob id of each at ``new`` (None for a deletion), and how many
    paths were left out because their names are not UTF-8.

    ``git diff --raw -z``: every name is NUL-terminated, so a name holding a newline cannot shift the fields,
    and the blob ids come with the names (contents are then asked for by id, never by name)."""
    out = _git("diff", "--raw", "-z", "-M", "--no-abbrev", "--no-ext-diff", old or EMPTY_TREE, new)
    fields = out.split(b"\0")
    changes: list[dict[str, str | None]] = []
    blobs: list[str | None] = []
    unnamed = 0
    i = 0
    while i < len(fields) and fields[i].startswith(b":"):
        # ":<old mode> <new mode> <old blob> <new blob> <status><score>"
        _, _, _, blob, status = fields[i].decode("ascii").split()[:5]
        two_names = status[0] in "RC"
        source, path = _name(fields[i + 1]), _name(fields[i + 2] if two_names else fields[i + 1])
        i += 3 if two_names else 2
        if path is None:  # the file's new name cannot be sent; its old one (if any) no longer exists
            unnamed += 1
            if status[0] == "R" and source is not None:
                changes.append({"path": source, "status": "D", "old_path": None})
                blobs.append(None)
            continue
        if status[0] == "R" and source is None:  # never indexed under its old name: a new file
            unnamed += 1
            status = "A"
        if status[0] == "R":
            changes.append({"path": path, "status": "R", "old_path": source})
        else:
            kind = {"D": "D", "A": "A", "C": "A"}.get(status[0], "M")
            changes.append({"path": path, "status": kind, "old_path": None})
        blobs.append(None if status[0] == "D" else blob)
    return changes, blobs, unnamed


def attach_contents(changes: list[dict[str, str | None]], blobs: list[str | None], max_bytes: int) -> None:
    """Fill in each path's content (its blob at the new commit) with one ``git cat-file --batch`` that is given
    blob ids only: hex, one a line, whatever the file names hold."""
    wanted: list[tuple[dict[str, str | None], str]] = []
    for change, blob in zip(changes, blobs, strict=True):
        change["text"] = None
        change["skipped"] = None
        if change["status"] == "D" or blob is None:
            continue
        reason = path_reason(str(change["path"]))
        if reason:
            change["skipped"] = reason  # never read a secret; vendored/generated are not indexed anyway
            continue
        wanted.append((change, blob))
    if not wanted:
        return
    out = _git("cat-file", "--batch", stdin="".join(f"{blob}\n" for _, blob in wanted).encode("ascii"))
    pos = 0
    for change, _ in wanted:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) < 3 or header[-1] == b"missing" or header[1] != b"blob":  # a submodule's commit, say
            change["skipped"] = "missing"
            continue
        size = int(header[2])
        data = out[pos : pos + size]
        pos += size + 1
        reason = content_reason(data, max_bytes)
        if reason:
            change["skipped"] = reason
        else:
            change["text"] = data.decode("utf-8")


def split_messages(event: dict[str, object], changes: list[dict[str, str | None]], limit: int) -> list[bytes]:
    """One message per ``limit`` bytes of payload (a rebase can change many files)."""
    groups: list[list[dict[str, str | None]]] = [[]]
    size = 0
    for change in changes:
        n = len(json.dumps(change, ensure_ascii=False).encode()) + 2
        if groups[-1] and size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(change)
        size += n
    return [json.dumps({**event, "changes": g, "part": i, "parts": len(groups)}, ensure_ascii=False).encode()
            for i, g in enumerate(groups)]


def read_credentials(path: str) -> tuple[str, str, str, str | None]:
    """(url, user, password, CA certificate or None) of a ctxpress credentials file (what
    ctxpress_core.identity.load_credentials reads; JSON, so the standard library is enough)."""
    try:
        raw = json.loads(Path(path).read_text())
        ca = raw.get("ca")
        return str(raw["nats_url"]), str(raw["user"]), str(raw["password"]), str(ca) if ca else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise PublishError(f"unusable credentials file {path}: {exc}") from None


class TinyNats:
    """Just enough of the NATS client protocol to publish and wait for JetStream's acks."""

    def __init__(self, url: str, user: str | None = None, password: str | None = None, ca: str | None = None) -> None:
        """``ca``: the PEM certificate that signed the server's, when it speaks TLS (a team appliance)."""
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        if parts.scheme not in ("nats", "tls", "tcp", ""):
            raise PublishError(f"the hook speaks nats:// and tls:// only, not {parts.scheme}://")
        self.address = (parts.hostname or "127.0.0.1", parts.port or 4222)
        self.user, self.password = user or parts.username, password or parts.password
        self.sock = socket.create_connection(self.address, timeout=CONNECT_TIMEOUT_S)
        self.buffer = b""
        info = self._line()
        if not info.startswith(b"INFO "):
            raise PublishError(f"unexpected greeting from {url}: {info[:60]!r}")
        self.info = json.loads(info[5:])
        if (parts.scheme == "tls" or ca) and not self.info.get("tls_required"):
            # TLS was asked for (a tls:// URL, or the appliance's CA): a server that does not require it may be
            # one answering in its place, waiting for the password in clear (ctxpress_core.nats_connect)
            self.sock.close()
            raise PublishError(f"{url} did not offer TLS, which the hook's configuration requires; nothing sent")
        if self.info.get("tls_required"):
            import ssl

            # Verified against the appliance's CA (or the system's), for the host the URL names.
            context = ssl.create_default_context(cadata=ca) if ca else ssl.create_default_context()
            self.sock = context.wrap_socket(self.sock, server_hostname=self.address[0])
        options: dict[str, object] = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                                      "name": "ctxpress-git-hook", "lang": "python", "version": "1", "protocol": 1}
        if self.user and self.password:
            options.update(user=self.user, **{"pass": self.password})
        elif self.user:
            options["auth_token"] = self.user
        self.sock.sendall(b"CONNECT " + json.dumps(options).encode() + b"\r\n")

    @property
    def max_payload(self) -> int:
        return int(self.info.get("max_payload", 1 << 20))

    def _receive(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise PublishError("connection closed by the server")
        self.buffer += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            self._receive()
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n + 2:
            self._receive()
        data, self.buffer = self.buffer[:n], self.buffer[n + 2 :]
        return data

    def publish_all(self, subject: str, payloads: list[bytes], timeout_s: float) -> list[int]:
        """Publish and wait for every JetStream ack; returns the stream sequences."""
        # A user in team mode may subscribe only under _INBOX.<user> (ctxpress_core.identity.inbox_prefix).
        owner = f"{self.user}." if self.user and self.password else ""
        inbox = f"_INBOX.{owner}{secrets.token_hex(8)}"
        out = [f"SUB {inbox}.* 1\r\n".encode()]
        for i, payload in enumerate(payloads):
            out.append(f"PUB {subject} {inbox}.{i} {len(payload)}\r\n".encode() + payload + b"\r\n")
        self.sock.sendall(b"".join(out))
        seqs: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        while len(seqs) < len(payloads):
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            line = self._line()
            if line.startswith(b"PING"):
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise PublishError(line.decode(errors="replace"))
            elif line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                fields = line.split()
                reply_to = fields[1].decode()
                if line.startswith(b"HMSG "):
                    header_len, total = int(fields[-2]), int(fields[-1])
                    data = self._exactly(total)
                    headers, body = data[:header_len], data[header_len:]
                    if b" 503" in headers.split(b"\r\n", 1)[0]:
                        raise PublishError("no index stream on the server (is `ctxpress up` running?)")
                else:
                    body = self._exactly(int(fields[-1]))
                ack = json.loads(body or b"{}")
                if "error" in ack:
                    raise PublishError(f"stream refused the event: {ack['error'].get('description', ack['error'])}")
                seqs[int(reply_to.rsplit(".", 1)[1])] = int(ack.get("seq", 0))
        return [seqs[i] for i in range(len(payloads))]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def connect(urls: str, user: str | None = None, password: str | None = None, ca: str | None = None) -> TinyNats:
    """The first server of a (comma-separated, a cluster's) NATS URL that answers."""
    error: Exception = PublishError(f"no NATS URL in {urls!r}")
    for url in (u.strip() for u in urls.split(",")):
        if not url:
            continue
        try:
            return TinyNats(url, user, password, ca)
        except OSError as exc:
            error = exc
    raise error


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="ctxpress-hook")
    parser.add_argument("hook")
    parser.add_argument("hook_args", nargs="*")
    parser.add_argument("--repository", required=True)
    parser.add_argument("--nats", required=True)
    parser.add_argument("--credentials", help="a ctxpress credentials file (team mode): its URL and user win")
    parser.add_argument("--subject", default=SUBJECT)
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_FILE_BYTES)
    args = parser.parse_args(argv)
    try:
        span = commits_for(args.hook, args.hook_args)
        if span is None:
            return 0
        old, new = span
        changes, blobs, unnamed = diff(old, new)
        if unnamed:  # the rest of the commit is still sent
            print(f"ctxpress: {unnamed} path(s) of {new[:10]} left out of the index: their names are not UTF-8 "
                  f"or longer than {MAX_PATH_BYTES} bytes",
                  file=sys.stderr)
        if not changes:
            return 0
        attach_contents(changes, blobs, args.max_bytes)
        event = {"repository": args.repository, "commit": new, "previous": old, "hook": args.hook,
                 "published_at": STARTED}
        if args.credentials:
            args.nats, user, password, ca = read_credentials(args.credentials)
            client = connect(args.nats, user, password, ca)
            if user != HOOKS_USER:  # a developer's credential may publish only on their own subjects
                args.subject = USER_SUBJECT.format(user=user)
        else:
            client = connect(args.nats)
        try:
            payloads = split_messages(event, changes, max(64 * 1024, min(client.max_payload - 4096, 4 << 20)))
            client.publish_all(args.subject, payloads, ACK_TIMEOUT_S)
        finally:
            client.close()
    except (OSError, PublishError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        print(f"ctxpress: index not updated (NATS at {args.nats}: {reason}); "
              "`ctxpress index --changed` catches up later", file=sys.stderr)
        return 0
    trace = os.environ.get("CTXPRESS_HOOK_TRACE")
    if trace:  # freshness measurement: when this hook started, per commit
        with open(trace, "a") as f:
            f.write(f"{new} {STARTED:.6f} {time.time():.6f}\n")
    if os.environ.get("CTXPRESS_HOOK_VERBOSE"):
        print(f"ctxpress: {len(changes)} path(s) of {new[:10]} sent in {(time.time() - STARTED) * 1000:.0f} ms",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
