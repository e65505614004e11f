"""tests/kinds.py: a test is marked by the fixtures it uses, `--pure` leaves the marked ones out, and one that starts
a service without its marker fails under `--pure` instead of running. No services: the nats-server is refused by
its name before anything runs (were it not, there is none on PATH, and the failure would say something else)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.kinds import _service_in

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = '''
import pytest
from tests.kinds import needs

pytest_plugins = ["tests.kinds"]


@pytest.fixture(scope="session")
@needs("services")
def appliance():
    return "up"


@pytest.fixture
def client(appliance):  # built on it: marked all the same
    return appliance
'''

TESTS = '''
import subprocess


def test_on_the_appliance(appliance):
    pass


def test_through_another_fixture(client):
    pass


def test_pure():
    pass


def test_starts_a_nats_server_unmarked(tmp_path):
    subprocess.run(["nats-server", "-p", "4222"], check=False)
'''


def test_markers_come_from_fixtures_and_pure_refuses_an_unmarked_service(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_sample.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pure", "-rf",
                          "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path), f"--basetemp={tmp_path / 't'}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert "1 failed, 1 passed, 2 deselected" in out, out
    assert "test_starts_a_nats_server_unmarked starts" in out and "mark it `services`" in out, out
    assert run.returncode == 1, out


def test_the_tripwire_knows_a_service_by_its_binary_or_module() -> None:
    assert _service_in(["/venv/bin/nats-server", "-c", "nats.conf"]) == "services"
    assert _service_in(["runuser", "-u", "postgres", "--", "/pg/bin/pg_ctl", "start"]) == "services"
    assert _service_in([sys.executable, "-m", "workers.completion"]) == "services"
    assert _service_in([sys.executable, "-m", "serving.engine.triton_server"]) == "services"
    assert _service_in(["/e2e/nvim", "--headless"]) == "editors"
    assert _service_in([sys.executable, "-m", "ctxpress.cli", "complete", "f.py"]) is None
    assert _service_in(["git", "-C", "/srv/nvim", "status"]) is None  # an argument named like one is not it
    assert _service_in("git status") is None
