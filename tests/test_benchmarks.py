"""The benchmark scripts still run against the library they measure.

Benchmarks are scripts, not tests, so nothing exercised them when the library's internals changed: two of them
(``table1.py``, ``step_overhead.py``, and through it ``peers.py``'s hand-written loop) imported an iterator
that no longer existed, and ``peers.py --check`` compared our kernel with a hand-written loop that no longer
drew the same noise. The default run imports every script (their module-level code runs, ``main`` does not);
``step_overhead.py --check`` (seconds) runs by default, and the slow run also runs the correctness checks of
``peers.py`` on its small workload.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py"))


def _run(code: str, timeout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(BENCHMARKS.parent), str(BENCHMARKS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", code], cwd=BENCHMARKS, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_every_benchmark_script_imports():
    assert len(SCRIPTS) >= 10  # the scripts were found
    code = ("import importlib, traceback\nfailed = []\n"
            f"for name in {SCRIPTS!r}:\n"
            "    try:\n        importlib.import_module(name)\n"
            "    except Exception:\n        failed.append(name + ': ' + traceback.format_exc().splitlines()[-1])\n"
            "print('\\n'.join(failed))\nraise SystemExit(1 if failed else 0)\n")
    result = _run(code, timeout=300)
    assert result.returncode == 0, f"benchmark scripts that fail to import:\n{result.stdout}{result.stderr[-2000:]}"


@pytest.mark.slow
def test_the_peers_correctness_checks_pass():
    """``peers.py --check`` on the 30-16-2 workload: the same potential, gradient step and update (same noise) as
    the hand-written torch loop, and the right variance on a Gaussian target (the peers that are not installed
    are skipped by the script)."""
    result = _run("import sys, peers; sys.exit(peers.main(['--check', '--workloads', 'mlp30']))", timeout=1200)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "FAIL" not in result.stdout and "PASS" in result.stdout


def test_the_step_overhead_same_update_checks_pass():
    """``step_overhead.py --check``: each of the six kernels (sgld, sghmc, sgnht, baoab, hmc, tacthmc) takes the
    same ten steps as its hand-written torch loop from the same streams, so the overhead the script reports is
    measured against the same update (a few seconds)."""
    result = _run("import sys, step_overhead; sys.exit(step_overhead.main(['--check']))", timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "FAIL" not in result.stdout and result.stdout.count("PASS") == 6, result.stdout[-4000:]
