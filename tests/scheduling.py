"""Which pytest-xdist worker runs which GPU test next: the longest tests
first, each to the worker expected to be free soonest.

The GPU suite sorts its tests longest first (conftest.py), by how long each
took when its record was made. pytest-xdist's own load scheduler then hands
them out without those times, and a worker must always hold the test it
runs and the one after (it starts a test only once it knows the next, for
teardown). So the test after is promised to a worker before anyone knows
when that worker will be free. With fewer than two tests a worker, xdist
deals out every test at once, round robin: in Part I's timed pass (22
tests, 16 workers) the three chapter notebooks, which must come last,
each waited behind one of the longest benchmarks while other workers sat
idle (H200 machine, 2026-12-02: started 10 s after the first worker was
free).

LongestFirst makes the same promises with the times in hand. Whenever a
worker needs a test, it plays the rest of the pass forward: the tests
still to give, in the suite's order, each to the worker expected to be
free first, given what every worker holds and how long it has run. The
worker gets the first test the play gives it. The workers write the
expected times (`write_expected`) when they collect; where they did not
(pytest run without the GPU tests, or without a staging folder), the
scheduler is xdist's own.
"""

from __future__ import annotations

import heapq
import json
import os
import time
from pathlib import Path

try:
    from xdist.scheduler import LoadScheduling
except ImportError:                    # no pytest-xdist: no -n, nothing to schedule
    LoadScheduling = object

#: A test whose time is unknown is expected to take this long (as in conftest's order).
UNKNOWN_S = 60.0


def expected_path(testrunuid: str) -> Path | None:
    """Where the workers of one pytest-xdist run keep the expected times."""
    staging = os.environ.get("CUDABOOK_STAGING")
    return Path(staging) / f"expected-{testrunuid}.json" if staging else None


def write_expected(config, expected: dict[str, float]) -> None:
    """On a pytest-xdist worker, keep {node id: expected seconds} for the
    scheduler (every worker writes the same; a reader never sees half a file)."""
    workerinput = getattr(config, "workerinput", None)
    path = expected_path(workerinput["testrunuid"]) if workerinput else None
    if path is None or not expected:
        return
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    part.write_text(json.dumps(expected))
    os.replace(part, path)


class LongestFirst(LoadScheduling):
    """LoadScheduling that gives each worker the test a longest-first
    play of the rest of the pass would give it (see the module's doc)."""

    def __init__(self, config, log=None, clock=time.monotonic):
        super().__init__(config, log)
        self.clock = clock
        self.seconds: list[float] | None = None   # expected time of each test, by index
        self.started: dict = {}                   # node -> when the test it runs now started

    def _load_expected(self) -> None:
        path = expected_path(self.nodes[0].workerinput["testrunuid"]) if self.nodes else None
        try:
            known = json.loads(path.read_text()) if path else None
        except (OSError, ValueError):
            known = None
        if known:
            self.seconds = [float(known.get(nodeid, UNKNOWN_S)) for nodeid in self.collection]

    def schedule(self) -> None:
        first = self.collection is None
        if first and self.collection_is_completed and self._check_nodes_have_same_collection():
            self.collection = next(iter(self.node2collection.values()))
            self.pending[:] = range(len(self.collection))
            self._load_expected()
            if self.seconds is not None and self.collection:
                now = self.clock()
                for node in self.nodes:
                    self.started[node] = now
                plan = self.play(now)             # every worker's first two tests, from one play
                for node in self.nodes:
                    for index in plan[node][:2]:
                        self._give(node, index)
                for node in self.nodes:           # a worker the play gave one test needs a second, or the end
                    self.check_schedule(node)
                return
            self.collection = None                # xdist's own, from the start
            self.pending[:] = []
        super().schedule()

    def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
        if self.seconds is not None:
            self.started[node] = self.clock()     # its next test starts now
        super().mark_test_complete(node, item_index, duration)

    def check_schedule(self, node, duration: float = 0) -> None:
        if self.seconds is None:
            return super().check_schedule(node, duration)
        if node.shutting_down:
            return
        while self.pending and len(self.node2pending[node]) < 2:
            self._give(node, self.pick(node))
        if not self.pending:
            for other in self.nodes:              # nothing left to give: let every worker finish
                if not other.shutting_down:
                    other.shutdown()

    def _give(self, node, index: int) -> None:
        self.pending.remove(index)
        self.node2pending[node].append(index)
        node.send_runtest_some([index])

    def free_at(self, node, now: float) -> float:
        """When a worker is expected to be done with every test it holds."""
        held = self.node2pending.get(node, [])
        if not held:
            return now
        running = max(now, self.started.get(node, now) + self.seconds[held[0]])
        return running + sum(self.seconds[i] for i in held[1:])

    def play(self, now: float) -> dict:
        """{worker: the tests still to give that it would get}: the tests in
        the suite's order, each to the worker expected to be free first."""
        workers = [(self.free_at(n, now), k, n) for k, n in enumerate(self.nodes) if not n.shutting_down]
        heapq.heapify(workers)
        plan = {n: [] for n in self.nodes}
        for index in self.pending:
            free, k, n = heapq.heappop(workers)
            plan[n].append(index)
            heapq.heappush(workers, (free + self.seconds[index], k, n))
        return plan

    def pick(self, node) -> int:
        """The test to give `node` now: the first the play gives it. If the
        play gives it none (it is expected to be busy until the end), the
        shortest test left, so that the tests meant for the other workers,
        the long ones and those that come last, stay theirs."""
        mine = self.play(self.clock()).get(node)
        if mine:
            return mine[0]
        return min(reversed(self.pending), key=lambda i: self.seconds[i])
