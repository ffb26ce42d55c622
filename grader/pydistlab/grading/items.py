"""Running a pass's items (each a test process: runner.run_test, in its jail) and putting the
passes' outcomes together into the modules' item results."""
from __future__ import annotations

import dataclasses
import queue
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from .. import manifest as mf, runner, sandbox, workspace as ws
from ..results import ItemResult, ModuleResult
from .passes import NOT_RUN, Pass, wants_tsan

Outcomes = dict[tuple[str, str], runner.Outcome]   # (module, item) -> what happened


@dataclass
class Job:
    """One test process to run."""
    result: ModuleResult              # its module's result
    item: mf.TestItem
    binary: Path
    timeout: float                    # seconds
    env: dict[str, str]
    cwd: Path
    jail: sandbox.TestJail | None     # None: --sandbox off

    @property
    def key(self) -> tuple[str, str]:
        return self.result.module.name, self.item.name


def test_jobs(results: list[ModuleResult], bin_dir: Path, cwd: Path, hidden: bool, pass_: Pass,
              status: sandbox.Status | None = None, only: set[tuple[str, str]] | None = None) -> list[Job]:
    """The test processes of a pass, in manifest order except that the items named in the pass's
    order.first come first (in that order). only: just these (module, item)."""
    jobs: list[Job] = []
    for res in results:
        jail = sandbox.jail_for(status, res.module, cwd, pass_.sanitized) if status is not None else None
        for item in res.module.items(hidden):
            if only is not None and (res.module.name, item.name) not in only:
                continue
            jobs.append(Job(res, item, bin_dir / res.module.binary_for(item), item.timeout_s * pass_.timeout_factor,
                            dict(pass_.env, DISTLAB_ROOT=str(cwd)), cwd, jail))
    rank = {name: i for i, name in enumerate(pass_.order.first)}
    return sorted(jobs, key=lambda j: rank.get(j.item.name, len(rank)))   # stable: the rest in order


def run_items(jobs: list[Job], workers: int, say: ws.Progress, pass_: Pass) -> Outcomes:
    """Runs the jobs, `workers` at a time. With the pass's order.stop_early, after the first
    failure the items not yet started are not run (their outcome says NOT_RUN)."""
    out: Outcomes = {}
    if not jobs:
        return out
    done = 0
    slots: queue.Queue[int] = queue.Queue()
    for i in range(max(1, workers)):
        slots.put(i)

    def one(job: Job) -> runner.Outcome:
        slot = slots.get()   # each worker's tests run as a uid of their own (sandbox.TEST_UID_BASE)
        try:
            return runner.run_test(job.binary, job.item.filter, job.timeout, job.cwd, job.env, str(job.cwd) + "/",
                                   jail=dataclasses.replace(job.jail, worker=slot) if job.jail else None)
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futs = {pool.submit(one, job): job for job in jobs}
        for fut in as_completed(futs):
            job = futs[fut]
            if fut.cancelled():
                out[job.key] = runner.Outcome(False, NOT_RUN, "", 0.0)
                continue
            try:
                oc = fut.result()
            except Exception as e:  # never lose the other results
                oc = runner.Outcome(False, f"grader error while running the test: {e}", "", 0.0)
            out[job.key] = oc
            done += 1
            status = "passed" if oc.passed else f"FAILED: {oc.reason}"
            say.status(f"  [{done}/{len(jobs)}] {job.item.full_name}{pass_.tag}: {status} ({oc.seconds:.1f} s)")
            if pass_.order.stop_early and not oc.passed:
                for other in futs:
                    other.cancel()
    sandbox.close_agents()   # the workers' sandboxes end with the run (see sandbox.Agent)
    say.done()
    return out


def collect(res: ModuleResult, hidden: bool, first: Outcomes, tsan_pass: Pass | None, tsan: Outcomes,
            tsan_built: list[str]) -> None:
    """The module's item results from the first pass and, for a module that asks for it, the
    ThreadSanitizer pass: an item passes only if it passed both (a module that did not build
    under ThreadSanitizer fails its items, except when stop_early left that pass out)."""
    n = res.module.name
    for item in res.module.items(hidden):
        oc = first[(n, item.name)]
        passed, reason, output, secs = oc.passed, oc.reason, oc.output, oc.seconds
        if tsan_pass is not None and wants_tsan(res) and not (tsan_pass.order.stop_early and n not in tsan_built):
            toc = tsan.get((n, item.name))
            if toc is None and n not in tsan_built:
                passed, reason = False, reason or "did not build under ThreadSanitizer"
            elif toc is None:
                pass   # failed in the first pass; not run again under ThreadSanitizer
            elif not toc.passed:
                if passed:
                    passed, reason, output = False, f"under ThreadSanitizer: {toc.reason}", toc.output
                else:
                    output += f"\n\nunder ThreadSanitizer: {toc.reason}"
            secs += toc.seconds if toc else 0.0
        res.items.append(ItemResult(item, passed, reason, output, secs))
        res.test_seconds += secs   # the module's own test time (items run side by side)
