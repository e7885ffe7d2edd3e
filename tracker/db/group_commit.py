"""Group commit for SQLite: write transactions that arrive together share one transaction and one commit.

SQLite takes one writer at a time, so concurrent ingest batches already run one after another; what each
pays on its own is the transaction around its work: ``BEGIN IMMEDIATE``, the commit (the WAL's write) and
the session's set-up, about a fifth of a small batch's cost. Here the first caller to find the writer free
becomes the leader: it takes every job waiting (its own and those that queued behind it, up to
``max_jobs``), runs them in one transaction, commits once, and wakes their callers.

Each job keeps the semantics of a transaction of its own. When one raises (or the commit fails), nothing of
the group is stored and the group runs again with each job in its own savepoint: one that raises is rolled
back to its savepoint (its writes undone, the others' kept) and its caller gets the error; an integrity
error becomes :class:`~tracker.errors.ConflictError`, as in :meth:`Database.session`. Nothing is answered
before the commit, so a crash loses only batches that no caller was told were stored (their senders send
them again). If the commit itself fails, every job of the group gets that error.

Jobs queued as ``urgent`` (ingest's batches that bring a value the rules judge: a trainer waits on their
answer) go first: a leader that finds any takes only those, and a group of other jobs that sees one
arrive stops after the job it is running, commits what it has run and puts the rest back first in line.
A judged batch so waits for one job and a commit, never for the training-only batches queued before it,
while those still share commits by the dozen (in groups of 16 a batch cost half as much CPU again: each
commit writes the pages its jobs share again).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from plateau_tracker.server.errors import ConflictError

T = TypeVar("T")

SessionScope = Callable[..., AbstractContextManager[Session]]


@dataclass(eq=False)
class _Job(Generic[T]):
    work: Callable[[Session], T]
    done: threading.Event = field(default_factory=threading.Event)
    result: T | None = None
    error: BaseException | None = None


class GroupCommit:
    """Runs write jobs in shared transactions of ``session`` (the database's write scope)."""

    def __init__(self, session: SessionScope, *, max_jobs: int = 64) -> None:
        self._session = session
        self._max_jobs = max_jobs
        self._waiting: deque[_Job[Any]] = deque()
        self._urgent: deque[_Job[Any]] = deque()
        self._leader = threading.Lock()

    def run(self, work: Callable[[Session], T], *, urgent: bool = False) -> T:
        """``work(session)``'s result once the transaction it ran in has committed; its error otherwise.
        ``urgent`` jobs go before the others waiting."""
        outcome = self.run_all([work], urgent=[urgent])[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def run_all(
        self, works: Sequence[Callable[[Session], T]], *, urgent: Sequence[bool] = ()
    ) -> list[T | Exception]:
        """Each of ``works``' result once the transaction it ran in has committed, else its error, in
        order: the jobs queue together, so they share transactions (up to ``max_jobs`` each). A job whose
        ``urgent`` flag is set goes before every job not urgent (the flags default to False)."""
        jobs: list[_Job[T]] = [_Job(work) for work in works]
        flags = list(urgent) or [False] * len(jobs)
        if len(flags) != len(jobs):
            raise ValueError(f"{len(jobs)} jobs, {len(flags)} urgent flags")
        for job, first in zip(jobs, flags, strict=True):
            (self._urgent if first else self._waiting).append(job)
        for job in jobs:
            while not job.done.is_set():
                with self._leader:
                    if not job.done.is_set():
                        self._lead()
        outcomes: list[T | Exception] = []
        for job in jobs:
            if job.error is not None and not isinstance(job.error, Exception):
                raise job.error
            outcomes.append(job.error if job.error is not None else job.result)  # type: ignore[arg-type]
        return outcomes

    def _lead(self) -> None:
        urgent, jobs = self._take()
        answered = jobs  # the jobs this lead settles; a group cut short puts the rest back in line
        try:
            if len(jobs) > 1:
                committed = self._all_at_once(jobs, yielding=not urgent)
                if committed is not None:
                    answered = jobs[:committed]
                    self._waiting.extendleft(reversed(jobs[committed:]))  # not run: first in line again
                    return
            with self._session(write=True) as session:
                if len(jobs) == 1:  # alone: its own transaction, as without grouping (no savepoint to pay)
                    jobs[0].result = jobs[0].work(session)
                    return
                for job in jobs:
                    self._run_one(session, job)
        except BaseException as exc:  # a lone job's error, or the group's commit failed: none of it is stored
            for job in jobs:
                if job.error is None:
                    job.error, job.result = exc, None
            if not isinstance(exc, Exception):
                raise
        finally:
            for job in answered:
                job.done.set()

    def _all_at_once(self, jobs: list[_Job[Any]], *, yielding: bool) -> int | None:
        """Run the jobs in one transaction without savepoints (a savepoint per job cost more than the
        commits it saves), and how many of them were run and committed: ``yielding``, the group is cut
        short as soon as an urgent job waits, and commits what it has run. None, with nothing stored, when
        one of them or the commit failed: they are then run again, each in a savepoint, so that the
        failure is that job's alone."""
        results: list[Any] = []
        try:
            with self._session(write=True) as session:
                for job in jobs:
                    results.append(job.work(session))
                    if yielding and self._urgent:
                        break
        except Exception:
            return None
        for job, result in zip(jobs, results, strict=False):
            job.result = result
        return len(results)

    def _take(self) -> tuple[bool, list[_Job[Any]]]:
        """The next group, and whether it is urgent: urgent jobs alone while there are any, else the
        others, in order."""
        urgent = bool(self._urgent)
        queue = self._urgent if urgent else self._waiting
        jobs: list[_Job[Any]] = []
        while len(jobs) < self._max_jobs:
            try:
                jobs.append(queue.popleft())
            except IndexError:
                break
        return urgent, jobs

    @staticmethod
    def _run_one(session: Session, job: _Job[Any]) -> None:
        try:
            with session.begin_nested():
                job.result = job.work(session)
        except IntegrityError as exc:
            job.error = ConflictError(f"conflicting write: {exc.orig}")
        except Exception as exc:  # this job's alone: rolled back to its savepoint, the group goes on
            job.error = exc
        if job.error is not None:
            # The ORM expires only what it wrote itself under the savepoint; rows written in Core (ingest
            # writes a run's progress so) would keep the rolled-back values in the session for the next
            # job of the group that loads the same row. Every object is read afresh instead.
            session.expire_all()
