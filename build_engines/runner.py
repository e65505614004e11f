"""Run a plan step by step (with progress), or render it as a shell script."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from build_engines.options import BuildOptions
from build_engines.plan import PYTHON, Layout, Step, plan_record


def _command_lines(argv: Sequence[str]) -> str:
    """One "--flag value" pair per line: reviewable, and diffable between GPU families."""
    words = ['"$PYTHON"' if i == 0 and a == PYTHON else shlex.quote(a) for i, a in enumerate(argv)]
    groups: list[str] = []
    for w in words:
        if groups and not w.startswith("--") and groups[-1].startswith("--") and " " not in groups[-1]:
            groups[-1] += " " + w
        elif groups and not w.startswith("--") and not groups[-1].startswith("--"):
            groups[-1] += " " + w
        else:
            groups.append(w)
    return " \\\n    ".join(groups)


def render_script(opts: BuildOptions, steps: Sequence[Step]) -> str:
    """A standalone bash script doing what :func:`run_plan` does."""
    layout = Layout(opts.out)
    record = json.dumps(plan_record(opts, list(steps)), indent=2)
    lines = [
        "#!/usr/bin/env bash",
        f"# ctxpress build-engines --gpu {opts.gpu}: generated dry run; each step is what a real run executes.",
        "set -euo pipefail",
        "SECONDS=0",
        # The interpreter that has ctxpress and the gpu extra installed.
        'PYTHON="${PYTHON:-python3}"',
        f"mkdir -p {shlex.quote(str(layout.plan_json.parent))}",
        # The manifest step reads the plan back, so the script writes it first.
        f"cat > {shlex.quote(str(layout.plan_json))} <<'CTXPRESS_PLAN'",
        record,
        "CTXPRESS_PLAN",
    ]
    for i, step in enumerate(steps, 1):
        lines.append("")
        lines.append(f"# {step.why}")
        lines.append(f"echo {shlex.quote(f'[{i}/{len(steps)}] {step.name}')}")
        lines.append(_command_lines(step.argv))
    lines.append("")
    lines.append('echo "build-engines: done in ${SECONDS}s; manifest at ' + str(layout.manifest) + '"')
    return "\n".join(lines) + "\n"


def run_plan(
    opts: BuildOptions,
    steps: Sequence[Step],
    execute: Callable[[list[str]], int] | None = None,
    echo: Callable[[str], None] = print,
) -> int:
    """Execute every step in order; stop at the first failure. Returns an exit status."""
    layout = Layout(opts.out)
    layout.plan_json.parent.mkdir(parents=True, exist_ok=True)
    layout.plan_json.write_text(json.dumps(plan_record(opts, list(steps)), indent=2) + "\n")
    run = execute or (lambda argv: subprocess.run(argv, check=False).returncode)
    timings: list[tuple[str, float]] = []
    started = time.monotonic()
    for i, step in enumerate(steps, 1):
        argv = [sys.executable if a == PYTHON and j == 0 else a for j, a in enumerate(step.argv)]
        echo(f"[{i}/{len(steps)}] {step.name}: {step.why}")
        t0 = time.monotonic()
        rc = run(argv)
        timings.append((step.name, time.monotonic() - t0))
        if rc != 0:
            echo(f"build-engines: step '{step.name}' failed with exit status {rc}")
            echo("  command: " + shlex.join(argv))
            return rc
    total = time.monotonic() - started
    echo("build-engines summary:")
    for name, secs in timings:
        echo(f"  {name:<24} {secs:8.1f} s")
    echo(f"  {'total':<24} {total:8.1f} s -> {layout.manifest}")
    return 0
