"""A pytest plugin for `make test` (tools/run_tests.sh loads it with -p tests.pytest_summary):
with --summary-file FILE it writes a short summary there: the counts per area, each group of
skipped items with its reason, and every failure in full. pytest's own output (every item, the
resource table) goes to a log the summary names, so a passing run reads in a few lines."""
import collections
import time
from pathlib import Path

import pytest

OUTCOMES = ("passed", "skipped", "failed")
MAX_REASON = 160  # characters of a skip reason shown; the log has each in full
MAX_GROUPS = 25   # skip reasons shown, the commonest first; the log has the rest


def pytest_addoption(parser):
    parser.addoption("--summary-file", default=None, help="write the short summary of `make test` to this file")


def area_of(item):
    """Where an item comes from, by the file of its function: fmha_test.py gathers them all."""
    function = getattr(item, "function", None)
    source = Path(function.__code__.co_filename) if function else item.path
    name = getattr(item, "originalname", item.name)
    gtest = {"test_unit": "GoogleTest unit", "test_gpu": "GoogleTest GPU", "test_capi": "GoogleTest C ABI"}
    if source.parent.name == "tests" and source.parent.parent.name == "generator":
        return "generator"
    if source.parent.name == "python" and source.parent.parent.name == "tests":
        return "python package"
    return gtest.get(name, "fmha.exe and set-up")


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
        total = collections.Counter(self.outcome.values())
        lines = [f"pytest: {', '.join(f'{total[o]} {o}' for o in OUTCOMES)} in {time.time() - self.start:.0f} s "
                 f"(exit code {int(exitstatus)})", f"  {'area':22s} " + " ".join(f"{o:>8s}" for o in OUTCOMES)]
        lines += [f"  {area:22s} " + " ".join(f"{counter[o]:8d}" for o in OUTCOMES) for area, counter in sorted(counts.items())]
        # Grouped by the reason's head ("no GPU", "this build's catalogue has no kernel for it"):
        # the rest often names the item's own shape, so one example of it is shown.
        groups = collections.defaultdict(collections.Counter)  # head -> area -> items
        details = collections.defaultdict(set)                 # head -> the rest of each reason
        for nodeid, reason in self.skip_reasons.items():
            if self.outcome.get(nodeid) == "skipped":
                head, _, rest = reason.partition(": ")
                groups[head][self.areas.get(nodeid, "other")] += 1
                details[head].add(rest)
        if groups:
            lines.append("skipped, by reason (items: areas: reason):")
        ordered = sorted(groups.items(), key=lambda group: (-sum(group[1].values()), group[0]))
        for head, by_area in ordered[:MAX_GROUPS]:
            rest = sorted(details[head])
            text = head + (f": {rest[0]}" if len(rest) == 1 and rest[0] else f" (e.g. {rest[0]})" if rest[0] else "")
            text = text if len(text) <= MAX_REASON else text[:MAX_REASON] + "..."
            lines.append(f"  {sum(by_area.values()):5d}: {', '.join(sorted(by_area))}: {text}")
        if len(ordered) > MAX_GROUPS:
            lines.append(f"  ... and {len(ordered) - MAX_GROUPS} more reasons (the log lists every skipped item)")
        for nodeid, when, text in self.failures:
            lines += [f"FAILED {nodeid} ({when})", text.rstrip()]
        return lines

    def pytest_terminal_summary(self, terminalreporter):
        """Into the log (pytest's own output): every skipped item with its whole reason."""
        skipped = [(nodeid, reason) for nodeid, reason in self.skip_reasons.items() if self.outcome.get(nodeid) == "skipped"]
        if skipped:
            terminalreporter.section(f"{len(skipped)} skipped items, each with its reason")
        for nodeid, reason in skipped:
            terminalreporter.write_line(f"SKIPPED {nodeid}: {reason}")

    def pytest_sessionfinish(self, session, exitstatus):
        with open(self.path, "w") as out:
            out.write("\n".join(self.lines(exitstatus)) + "\n")


def pytest_configure(config):
    path = config.getoption("--summary-file")
    if path:
        config.pluginmanager.register(Summary(path), "fmha_summary")
