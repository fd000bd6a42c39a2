"""The GPU suite's scheduler (tests/scheduling.py), played out on made-up
workers that keep pytest-xdist's rule: a worker starts a test only once it
holds the next one, or has been told there is none."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import pytest

xdist = pytest.importorskip("xdist")
from xdist.scheduler import LoadScheduling  # noqa: E402

import scheduling  # noqa: E402

WORKERS = 16


class Worker:
    def __init__(self, k: int, uid: str):
        self.gateway = SimpleNamespace(id=f"gw{k}")
        self.workerinput = {"workerid": f"gw{k}", "testrunuid": uid}
        self.shutting_down = False
        self.queue: list[int] = []
        self.running: tuple[int, float] | None = None     # (test, when it ends)
        self.ran: list[tuple[int, float]] = []             # (test, when it started)

    def send_runtest_some(self, indices):
        assert not self.shutting_down, "a test sent after shutdown"
        self.queue.extend(indices)

    def shutdown(self):
        self.shutting_down = True

    def __repr__(self):
        return self.gateway.id


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def play(scheduler_class, seconds: list[float], expected: list[float] | None, tmp_path, monkeypatch):
    """Run tests of these durations on WORKERS made-up workers; return
    {test: (worker, start)} and the time the last one ended. `expected`
    (or None: the workers wrote no times) is what the scheduler is told."""
    uid = "run1"
    monkeypatch.setenv("CUDABOOK_STAGING", str(tmp_path))
    ids = [f"tests/test_gpu.py::t[{i}]" for i in range(len(seconds))]
    if expected is not None:
        (tmp_path / f"expected-{uid}.json").write_text(json.dumps(dict(zip(ids, expected))))
    config = SimpleNamespace(getvalue=lambda name: [f"{WORKERS}*popen"],
                             getoption=lambda name: 1)
    clock = Clock()
    sched = (scheduler_class(config, None, clock=clock) if scheduler_class is scheduling.LongestFirst
             else scheduler_class(config, None))
    workers = [Worker(k, uid) for k in range(WORKERS)]
    for w in workers:
        sched.add_node(w)
    for w in workers:
        sched.add_node_collection(w, ids)
    sched.schedule()
    started: dict[int, tuple[str, float]] = {}
    while True:
        for w in workers:
            if w.running is None and (len(w.queue) >= 2 or (w.queue and w.shutting_down)):
                test = w.queue.pop(0)
                assert test not in started, f"test {test} ran twice"
                started[test] = (w.gateway.id, clock.now)
                w.running = (test, clock.now + seconds[test])
        busy = [w for w in workers if w.running is not None]
        if not busy:
            break
        w = min(busy, key=lambda w: (w.running[1], w.gateway.id))
        test, clock.now = w.running
        w.running = None
        sched.mark_test_complete(w, test)
    assert sorted(started) == list(range(len(seconds))), "every test runs, once"
    assert all(w.shutting_down and not w.queue for w in workers), "every worker is let go"
    return started, clock.now


# Part I's timed pass (H200 machine, 2026-12-02, suite_part1_second.log),
# rounded: 15 benchmarks and two listings that measure the machine, longest
# first, then three short runs, then the three chapter notebooks, which
# come last whatever their length.
TIMED_PASS = [33, 32, 31, 31, 31, 30, 28, 26, 25, 24, 22, 22, 21, 20, 20, 19,
              3.5, 3, 2.5,
              23, 18, 9]
NOTEBOOKS = (19, 20, 21)


def test_timed_pass_notebooks_start_on_the_first_free_workers(tmp_path, monkeypatch):
    """xdist deals out 22 tests on 16 workers round robin, all at once: the
    notebooks wait behind the longest benchmarks. The play puts them behind
    the shortest, and the pass ends sooner."""
    theirs, their_end = play(LoadScheduling, TIMED_PASS, None, tmp_path, monkeypatch)
    ours, our_end = play(scheduling.LongestFirst, TIMED_PASS, TIMED_PASS, tmp_path, monkeypatch)
    # xdist: tests 16 to 21 go to the workers of tests 0 to 5, the longest.
    assert [theirs[i][1] for i in NOTEBOOKS] == [31, 31, 30]
    # The play: the short runs go to the workers free at 19, 20 and 20 s;
    # the notebooks, in order, to the next free: at 21, 22 and 22 s.
    assert [ours[i][1] for i in NOTEBOOKS] == [21, 22, 22]
    assert (our_end, their_end) == (21 + 23, 31 + 23)


def test_without_expected_times_it_is_xdists_own(tmp_path, monkeypatch):
    theirs, _ = play(LoadScheduling, TIMED_PASS, None, tmp_path, monkeypatch)
    ours, _ = play(scheduling.LongestFirst, TIMED_PASS, None, tmp_path / "x", monkeypatch)
    assert ours == theirs


@pytest.mark.parametrize("seed", range(5))
def test_every_test_runs_once_when_the_times_are_wrong(seed, tmp_path, monkeypatch):
    """A checks pass: 180 tests, the times the scheduler is told off by up to
    a factor of two either way. Every test still runs once, every worker is
    let go, and the pass ends within the bound of any list schedule (the
    mean load plus the longest test) plus one longest test more: the one
    a worker was promised before its turn."""
    rng = random.Random(seed)
    expected = sorted((rng.expovariate(1 / 5) for _ in range(180)), reverse=True)
    seconds = [t * rng.uniform(0.5, 2.0) for t in expected]
    started, end = play(scheduling.LongestFirst, seconds, expected, tmp_path, monkeypatch)
    assert end <= sum(seconds) / WORKERS + max(seconds) * 2


def test_workers_write_the_expected_times(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDABOOK_STAGING", str(tmp_path))
    controller = SimpleNamespace()
    scheduling.write_expected(controller, {"a": 1.0})
    assert list(tmp_path.iterdir()) == []            # only pytest-xdist workers write
    worker = SimpleNamespace(workerinput={"testrunuid": "u1"})
    scheduling.write_expected(worker, {"a": 1.0, "b": 2.5})
    assert json.loads((tmp_path / "expected-u1.json").read_text()) == {"a": 1.0, "b": 2.5}
    assert [p.name for p in tmp_path.iterdir()] == ["expected-u1.json"]
