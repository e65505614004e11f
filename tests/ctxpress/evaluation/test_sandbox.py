"""The sandbox that runs model-written code: what it lets through and what it stops (no services)."""

from __future__ import annotations

from pathlib import Path

from ctxpress.evaluation.sandbox import network_isolation, run_program


def test_a_program_that_exits_cleanly_passes() -> None:
    outcome = run_program("print(sum(range(10)))", timeout_s=5)
    assert outcome.passed and outcome.status == "passed"
    assert "45" in outcome.output


def test_a_failing_assertion_fails() -> None:
    outcome = run_program("assert 1 + 1 == 3, 'arithmetic'", timeout_s=5)
    assert not outcome.passed and outcome.status == "failed"
    assert "AssertionError: arithmetic" in outcome.output


def test_a_completion_that_loops_forever_is_killed_at_the_limit() -> None:
    outcome = run_program("while True:\n    pass\n", timeout_s=1.5)
    assert outcome.status == "timeout" and not outcome.passed
    assert 1.5 <= outcome.seconds < 6


def test_a_child_that_outlives_its_parent_is_killed_with_the_group() -> None:
    # the hook refuses fork, so the loop stays in the one process; the group kill must still end it
    outcome = run_program("import os\ntry:\n    os.fork()\nexcept PermissionError:\n    pass\nwhile True: pass\n",
                          timeout_s=1)
    assert outcome.status == "timeout"


def test_writing_outside_the_scratch_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    for source in (f"open({str(target)!r}, 'w').write('x')",
                   f"import os\nfd = os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'x')",
                   f"import pathlib\npathlib.Path({str(target)!r}).write_text('x')",
                   f"import shutil\nshutil.copyfile(__file__, {str(target)!r})"):
        outcome = run_program(source, timeout_s=5)
        assert not outcome.passed, source
        assert "PermissionError" in outcome.output, outcome.output
    assert not target.exists()


def test_removing_or_renaming_outside_is_refused(tmp_path: Path) -> None:
    keep = tmp_path / "keep.txt"
    keep.write_text("still here")
    for source in (f"import os\nos.remove({str(keep)!r})", f"import os\nos.rename({str(keep)!r}, 'mine.txt')",
                   f"import shutil\nshutil.rmtree({str(tmp_path)!r})"):
        outcome = run_program(source, timeout_s=5)
        assert not outcome.passed and "PermissionError" in outcome.output, source
    assert keep.read_text() == "still here"


def test_files_inside_the_scratch_directory_work_and_are_gone_after() -> None:
    outcome = run_program("import os\nopen('notes.txt', 'w').write('ok')\nprint(open('notes.txt').read())\n"
                          "print(os.getcwd())", timeout_s=5)
    assert outcome.passed, outcome.output
    scratch = Path(outcome.output.strip().splitlines()[-1])
    assert not scratch.exists()


def test_exhausting_memory_fails_without_taking_the_host() -> None:
    outcome = run_program("blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 1024 * 1024))\n",
                          timeout_s=10, memory_mb=512)
    assert not outcome.passed
    assert outcome.status == "failed" and "MemoryError" in outcome.output


def test_new_processes_and_sockets_are_refused() -> None:
    for source in ("import subprocess\nsubprocess.run(['true'])", "import os\nos.system('true')",
                   "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)"):
        outcome = run_program(source, timeout_s=5)
        assert not outcome.passed and "PermissionError" in outcome.output, (source, outcome.output)


def test_another_audit_hook_does_not_lift_the_fence(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    outcome = run_program(f"import sys\nsys.addaudithook(lambda *a: None)\nopen({str(target)!r}, 'w')", timeout_s=5)
    assert not outcome.passed and "PermissionError" in outcome.output
    assert not target.exists()


def test_the_environment_is_minimal() -> None:
    import os

    os.environ["CTXPRESS_SECRET_FOR_TEST"] = "leaked"
    try:
        outcome = run_program("import os\nprint(sorted(os.environ))", timeout_s=5)
    finally:
        del os.environ["CTXPRESS_SECRET_FOR_TEST"]
    assert outcome.passed and "CTXPRESS_SECRET_FOR_TEST" not in outcome.output


def test_the_network_namespace_reaches_no_listener() -> None:
    """Without the audit hook: the namespace alone keeps a program from a port the host can reach."""
    import socket
    import subprocess
    import sys

    import pytest

    prefix, reason = network_isolation()
    if not prefix:
        pytest.skip(reason)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); print('connected')"
        host = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=20)
        fenced = subprocess.run([*prefix, sys.executable, "-c", probe], capture_output=True, text=True, timeout=20)
    assert "connected" in host.stdout
    assert fenced.returncode != 0 and "connected" not in fenced.stdout
