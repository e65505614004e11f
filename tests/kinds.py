"""Which tests need a part of the appliance, and ``pytest --pure`` (``make check``): the tests that need none.

A test's kinds are markers (registered in pyproject.toml), so ``-m`` selects by them and ``pytest --markers`` lists
them. They are applied here from what a test uses, not kept by hand:

* ``services``: a real NATS, PostgreSQL, Triton or worker: the session's appliance, or parts a fixture or module
  starts itself.
* ``model``: the real GGUF model, joined or loaded (no server).
* ``editors``: a real editor client or browser; everything under tests/e2e drives one.
* ``scripted``: the completion service against the scripted engine (serving/scripted_engine.py), its own logic
  with no model: informative, these need nothing and run in ``make check``.

A fixture that starts something says so with ``@needs(...)`` under its ``@pytest.fixture``; every test whose fixture
closure holds it (directly, or through fixtures built on it) gets those markers, so a new test on ``appliance`` is
marked without anyone remembering to. A module whose tests start parts inline says ``pytestmark =
pytest.mark.services``. What neither reveals is caught the other way round: under ``--pure`` every subprocess the
tests start passes a tripwire that refuses a service's binary (nats-server, pg_ctl, tritonserver, an editor …) or
process (the workers, Triton's), and the packaged model refuses to be joined, so an unmarked test fails ``make
check`` at once, with a message naming the marker it lacks, instead of slowing it down. The tripwire sees this
process's subprocesses only: what a ``ctxpress up`` it runs starts in turn is its child's.
"""

from __future__ import annotations

import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])
KINDS_ATTRIBUTE = "ctxpress_test_kinds"


def needs(*kinds: str) -> Callable[[F], F]:
    """Put under ``@pytest.fixture``: the fixture starts ``kinds`` (services, model, editors), and so does, for
    ``make check``, every test that uses it."""

    def mark(fixture: F) -> F:
        setattr(fixture, KINDS_ATTRIBUTE, (*getattr(fixture, KINDS_ATTRIBUTE, ()), *kinds))
        return fixture

    return mark


# What ``--pure`` leaves out: a test of any of these kinds needs something `make check` does not start.
NEEDS_SOMETHING = ("services", "model", "editors", "faults", "quiet")
SCRIPTED_ENGINE = "serving.scripted_engine"

E2E_DIR = Path(__file__).parent / "e2e"

# Executables that are a service or an editor client, by file name: what a subprocess runs, or what a wrapper
# (runuser … -- pg_ctl) runs. PostgreSQL itself is started by pg_ctl, never directly.
_SERVICE_BINARIES = {
    "nats-server": "services", "pg_ctl": "services", "initdb": "services", "tritonserver": "services",
    "nvim": "editors", "code-server": "editors", "chromium": "editors", "tabby-agent": "editors",
}
# ``python -m MODULE``: the appliance's own processes.
_SERVICE_MODULES = ("serving.engine.triton_server", "workers.", "ctxpress.parts.supervisor", "ctxpress.console")


class NeedsAService(Exception):
    """A test under ``--pure`` started a service: it lacks the marker that would have left it out."""


_refused: list[str] = []  # what the tripwire refused, reported at the end even where a test swallowed it
_current_test = ""


def _service_in(argv: Any) -> str | None:
    """The kind of service ``argv`` starts, or None."""
    args = [str(a) for a in ([argv] if isinstance(argv, str | bytes | Path) else argv)]
    executables = [*args[:1], args[args.index("--") + 1]] if "--" in args[:-1] else args[:1]
    for executable in executables:
        kind = _SERVICE_BINARIES.get(Path(executable).name)
        if kind is not None:
            return kind
    if "-m" in args[:-1] and args[args.index("-m") + 1].startswith(_SERVICE_MODULES):
        return "services"
    return None


def _refuse(what: str, kind: str) -> None:
    message = (f"{_current_test} starts {what} under --pure (make check): mark it `{kind}` "
               f"(pytestmark = pytest.mark.{kind}) or use a fixture that does (tests/kinds.py)")
    _refused.append(message)
    raise NeedsAService(message)


def _arm_tripwire() -> None:
    """Refuse, for the rest of this process, every start of a service or of the packaged model."""
    popen_init = subprocess.Popen.__init__

    def guarded_popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        kind = _service_in(args)
        if kind is not None:
            _refuse(" ".join(str(a) for a in ([args] if isinstance(args, str) else args))[:200], kind)
        popen_init(self, args, *rest, **options)

    subprocess.Popen.__init__ = guarded_popen  # type: ignore[method-assign]

    import serving.weights as weights

    ensure_model = weights.ensure_model

    def guarded_ensure_model(model: Any, *args: Any, **kwargs: Any) -> Path:
        if model is weights.TARGET or model is weights.DRAFT:
            _refuse("the packaged model", "model")
        return ensure_model(model, *args, **kwargs)

    weights.ensure_model = guarded_ensure_model  # type: ignore[assignment]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--pure", action="store_true",
                     help="only the tests that need no service, model or editor (make check); refuses any that "
                          "starts one")
    parser.addoption("--shard", metavar="K/N",
                     help="only the test files of shard K of N (0-based; a file's shard is a hash of its path): "
                          "`make check` runs N pytest processes at once")


def _shard(option: str) -> tuple[int, int]:
    try:
        k, n = (int(part) for part in option.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--shard {option}: expected K/N, as 0/2") from None
    if not 0 <= k < n:
        raise pytest.UsageError(f"--shard {option}: K must be 0 to N-1")
    return k, n


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``--shard K/N``, the test files of the other shards are not even imported (importing them is a good part
    of a run). A whole file goes to one shard, so its module fixtures are set up once."""
    option = config.getoption("--shard")
    if not option or not (collection_path.name.startswith("test_") and collection_path.suffix == ".py"):
        return None
    k, n = _shard(option)
    relative = collection_path.relative_to(config.rootpath).as_posix()
    return True if zlib.crc32(relative.encode()) % n != k else None  # None: no opinion (other ignores still apply)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--pure"):
        _arm_tripwire()  # before collection: modules that import ensure_model get the guarded one


def kinds_of(item: pytest.Item) -> set[str]:
    """The kinds ``item`` is of, from its fixtures, its folder and its module."""
    kinds: set[str] = set()
    # The definitions in effect for each name of the test's closure (pytest has no public accessor for them).
    definitions = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        chain = definitions.name2fixturedefs.get(name) if definitions is not None else None
        if chain:
            kinds.update(getattr(chain[-1].func, KINDS_ATTRIBUTE, ()))
    if E2E_DIR in item.path.parents:
        kinds.add("editors")
    module = getattr(item, "module", None)
    imported = vars(module).values() if module is not None else ()
    if any(SCRIPTED_ENGINE in (getattr(value, "__module__", None), getattr(value, "__name__", None))
           for value in imported):
        kinds.add("scripted")
    return kinds


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for kind in sorted(kinds_of(item) - {mark.name for mark in item.iter_markers()}):
            item.add_marker(kind)
    if config.getoption("--pure"):
        left_out = [item for item in items if any(item.get_closest_marker(kind) for kind in NEEDS_SOMETHING)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            kept = set(map(id, left_out))
            items[:] = [item for item in items if id(item) not in kept]


def pytest_runtest_setup(item: pytest.Item) -> None:
    global _current_test
    _current_test = item.nodeid


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _refused:
        terminalreporter.section("tests that started a service under --pure (mark them)")
        for line in dict.fromkeys(_refused):
            terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _refused and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a tripped test may have caught the refusal itself

