"""A pytest plugin for `make test` (tools/run_tests.sh loads it with -p tests.pytest_summary):
with --summary-file FILE it writes a short summary there: the counts per area, each group of
skipped items with its reason, and every failure in full. pytest's own output (every item, the
resource table) goes to a log the summary names, so a passing run reads in a few lines."""
import collections
import time

import pytest

OUTCOMES = ("passed", "skipped", "failed")
MAX_REASON = 160  # characters of a skip reason shown; the log has each in full
MAX_GROUPS = 25   # skip reasons shown, the commonest first; the log has the rest


def pytest_addoption(parser):
    parser.addoption("--summary-file", default=None, help="write the short summary of `make test` to this file")


def area_of(item):
    """Where an item comes from: fmha_test.py gathers them all into one module."""
    module = getattr(getattr(item, "function", None), "__module__", "") or ""
    name = getattr(item, "originalname", item.name)
    if module.startswith("generator"):
        return "generator"
    if module.startswith("fmha_tests_"):  # tests/python, imported by fmha_test.py
        return "python package"
    return {"test_unit": "GoogleTest unit", "test_gpu": "GoogleTest GPU", "test_capi": "GoogleTest C ABI"}.get(
        name, "fmha.exe and set-up")


class Summary:
    def __init__(self, path):
        self.path = path
        self.start = time.time()
        self.areas = {}                                    # nodeid -> area
        self.outcome = {}                                  # nodeid -> passed/skipped/failed
        self.skip_reasons = {}                             # nodeid -> reason
        self.failures = []                                 # (nodeid, when, text)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        self.areas.update((item.nodeid, area_of(item)) for item in items)

    def pytest_collectreport(self, report):
        if report.failed:
            self.failures.append((report.nodeid or "collection", "collect", report.longreprtext))

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.outcome[report.nodeid] = "failed"
            self.failures.append((report.nodeid, report.when, report.longreprtext))
        elif report.skipped and self.outcome.get(report.nodeid) != "failed":
            self.outcome[report.nodeid] = "skipped"
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.skip_reasons[report.nodeid] = reason.removeprefix("Skipped: ")
        elif report.when == "call" and report.passed and report.nodeid not in self.outcome:
            self.outcome[report.nodeid] = "passed"

    def lines(self, exitstatus):
        counts = collections.defaultdict(collections.Counter)
        for nodeid, outcome in self.outcome.items():
            counts[self.areas.get(nodeid, "other")][outcome] += 1
        total = collections.Counter()
        for counter in counts.values():
            total.update(counter)
        lines = [f"pytest: {', '.join(f'{total[o]} {o}' for o in OUTCOMES)} in {time.time() - self.start:.0f} s "
                 f"(exit code {int(exitstatus)})", f"  {'area':22s} " + " ".join(f"{o:>8s}" for o in OUTCOMES)]
        lines += [f"  {area:22s} " + " ".join(f"{counter[o]:8d}" for o in OUTCOMES) for area, counter in sorted(counts.items())]
        groups = collections.defaultdict(collections.Counter)  # reason -> area -> items
        for nodeid, reason in self.skip_reasons.items():
            if self.outcome.get(nodeid) == "skipped":
                groups[reason][self.areas.get(nodeid, "other")] += 1
        if groups:
            lines.append("skipped, by reason (items: areas):")
        ordered = sorted(groups.items(), key=lambda group: -sum(group[1].values()))
        for reason, by_area in ordered[:MAX_GROUPS]:
            short = reason if len(reason) <= MAX_REASON else reason[:MAX_REASON] + "..."
            lines.append(f"  {sum(by_area.values()):5d}: {', '.join(sorted(by_area))}: {short}")
        if len(ordered) > MAX_GROUPS:
            lines.append(f"  ... and {len(ordered) - MAX_GROUPS} more reasons (the log lists every skipped item)")
        for nodeid, when, text in self.failures:
            lines += [f"FAILED {nodeid} ({when})", text.rstrip()]
        return lines

    def pytest_sessionfinish(self, session, exitstatus):
        with open(self.path, "w") as out:
            out.write("\n".join(self.lines(exitstatus)) + "\n")


def pytest_configure(config):
    path = config.getoption("--summary-file")
    if path:
        config.pluginmanager.register(Summary(path), "fmha_summary")
