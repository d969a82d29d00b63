"""tests/pytest_summary.py, the summary `make test` prints: run on a small made-up suite."""
import subprocess
import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
_SUITE = '''
import pytest
def test_passes(): pass
@pytest.mark.parametrize("n", range(3))
def test_needs_a_gpu(n): pytest.skip(f"no GPU: shape {n}")
def test_fails(): assert 1 == 2, "the failure's own message"
'''


def _summary(tmp_path, suite):
    (tmp_path / "test_suite.py").write_text(suite)
    summary = tmp_path / "summary.txt"
    # --rootdir: node ids relative to the suite's folder wherever the clone is (under /tmp too).
    run = subprocess.run([sys.executable, "-m", "pytest", str(tmp_path / "test_suite.py"), "-p", "tests.pytest_summary",
                          "--summary-file", str(summary), "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
                         cwd=_REPO, capture_output=True, text=True)
    return run, summary.read_text()


def test_summary_counts_groups_skips_and_shows_failures_in_full(tmp_path):
    run, summary = _summary(tmp_path, _SUITE)
    assert run.returncode == 1
    lines = summary.splitlines()
    assert lines[0].startswith("pytest: 1 passed, 3 skipped, 1 failed in ") and lines[0].endswith("(exit code 1)")
    # One group for the three skips, with an example of what differs.
    assert "3: fmha.exe and set-up: no GPU (e.g. shape 0)" in [line.strip() for line in lines]
    assert any(line.startswith("FAILED ") and line.endswith("::test_fails (call)") for line in lines)
    assert "the failure's own message" in summary and "assert 1 == 2" in summary
    assert "SKIPPED" not in summary and run.stdout.count("SKIPPED test_suite.py::test_needs_a_gpu") == 3  # in the log


def test_nothing_collected_still_fails(tmp_path):
    run, summary = _summary(tmp_path, "")
    assert run.returncode == 5 and "0 passed, 0 skipped, 0 failed" in summary and "(exit code 5)" in summary
