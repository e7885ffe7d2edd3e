"""``Run``: what a training loop holds. ``log`` never blocks; decisions are read from memory."""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections import deque
from collections.abc import Mapping
from contextlib import AbstractContextManager, suppress
from types import TracebackType
from typing import Any

from plateau_tracker import _live_runs
from plateau_tracker._agree import Agreement, agreement
from plateau_tracker._away_report import AwayReport
from plateau_tracker._decision import Decision
from plateau_tracker._link import recently_unreachable
from plateau_tracker._local_judge import AwayVerdicts
from plateau_tracker._rate import RateWatch
from plateau_tracker._sender import FLUSH_INTERVAL_S, Sender
from plateau_tracker._spool import UNDELIVERED, Spool, spooled_points
from plateau_tracker._system import SystemMetrics
from plateau_tracker._transport import RejectedError, RetryableError, Transport
from plateau_tracker._types import FinalStatus
from plateau_tracker._verdicts import Verdicts
from plateau_tracker.complexity import StepTimes, peak_rss_bytes, profile_model, timed

logger = logging.getLogger("plateau")


class Run:
    """A run on the tracker, seen from a training process. Create it with :func:`plateau_tracker.init`.

    Decisions arrive in the answer to each batch the sender posts; the monitored metric's batch is posted
    as soon as its step is complete (the loop asks for the verdict, or logs another step; 0.1 s at most).
    ``should_stop()`` and ``should_checkpoint()`` called after ``log()`` of the monitored metric at step s
    answer for step s: they wait (up to ``decision_timeout``) for the tracker's verdict on s. See
    :meth:`should_stop` for what they cost and when they do not wait.
    """

    def __init__(
        self,
        *,
        transport: Transport,
        create_body: dict[str, Any],
        monitor: str | None,
        rank: int = 0,
        flush_interval: float = FLUSH_INTERVAL_S,
        max_pending: int = 100_000,
        exit_timeout: float = 10.0,
        decision_timeout: float = 5.0,
        spool: Spool | None = None,
        away: AwayVerdicts | None = None,
    ) -> None:
        self._transport = transport
        self._away = away
        self.monitor = monitor
        self.rank = rank
        self.exit_timeout = exit_timeout
        self.created: dict[str, Any] = {}
        """The run as the tracker created or joined it (its id, name, status, policy...); empty until the
        tracker has answered."""
        self._verdicts = Verdicts(transport, rank=rank, decision_timeout=decision_timeout)
        self._checkpoint_taken = 0
        self._agreement: Agreement | None = None
        self._next_step = 0
        self._finished = False
        self._step_times = StepTimes()
        self._step_times_published = 0.0
        self._summarised = False
        self._lock = threading.Lock()
        self._rate: RateWatch | None = None
        self._away_report: AwayReport | None = None
        self._system: SystemMetrics | None = None
        self._sender = Sender(
            transport,
            create_body=create_body,
            monitor=monitor,
            rank=rank,
            on_created=self._on_created,
            on_answer=self._verdicts.on_answer,
            flush_interval=flush_interval,
            max_pending=max_pending,
            spool=spool,
        )

    # --- lifecycle ----------------------------------------------------------------------------------

    def _start(self, wait: float) -> None:
        self._agreement = agreement()
        self._verdicts.agreed = self._agreement is not None
        if self._agreement is not None:
            self._away = None  # ranks agree on the tracker's verdicts; a rank does not judge alone
        if self._away is not None:
            self._sender.monitored = deque()
            self._away_report = AwayReport(self._transport)
            self._sender.after_round = self._report_away
        _live_runs.add(self)
        sender = self._sender
        if recently_unreachable(self._transport.url):
            wait = 0.0  # this process just found it away: the sender keeps probing in the background
        sender.init_waiting = True
        sender.start()
        # The first attempt settles it: created, refused, or away (a refused connection takes
        # milliseconds; a silent host at most the connect timeout, within ``wait``).
        answered = sender.attempted.wait(wait)
        sender.init_waiting = False
        if sender.create_error is not None:
            error = sender.create_error
            self._close_quietly()
            raise ValueError(f"the tracker refused this run: {error}")
        if not answered and wait > 0:  # a failed attempt says so itself
            logger.warning(
                "plateau: no answer from the tracker at %s within %.1fs; training goes on and the run "
                "is created when it answers",
                self._transport.url,
                wait,
            )

    def restart_after_fork(self) -> None:
        """In a forked child: a new connection pool and sender thread, without the parent's unsent
        records (called by the fork hook)."""
        self._transport.reset_after_fork()
        self._sender.restart_after_fork()

    @property
    def spooled_points(self) -> int:
        """Points written to the disk spool because the tracker could not take them."""
        return self._sender.spooled_points

    @property
    def invalid_points(self) -> int:
        """Points the tracker cannot store, each dropped alone and warned about once per key with its step:
        a value that cannot become a float64 (``2**1024``, a tensor of several elements), a key it refuses
        (empty, over 250 characters, a NUL or a lone surrogate), a step or rank out of its range."""
        return self._sender.batcher.invalid_points

    @property
    def lost_points(self) -> int:
        """Points that reached neither the tracker nor the spool: the queue and the spool were full (or the
        spool is disabled), or the tracker refused their batch as a whole."""
        return self._sender.lost_points

    @property
    def run_key(self) -> str:
        """The key this run is joined by: another process (a resumed training, another rank) that gives it
        to ``plateau_tracker.init(run_key=...)`` continues this run."""
        return self._sender.run_key

    @property
    def id(self) -> int | None:
        """The tracker's id for this run; None until the tracker has answered."""
        return self._sender.run_id

    @property
    def info(self) -> dict[str, Any]:
        """Deprecated name of :attr:`created`."""
        warnings.warn("Run.info is deprecated: use Run.created", DeprecationWarning, stacklevel=2)
        return self.created

    @property
    def decision_timeout(self) -> float:
        """How long ``should_stop()``/``should_checkpoint()`` wait at most for a verdict, in seconds."""
        return self._verdicts.decision_timeout

    @decision_timeout.setter
    def decision_timeout(self, seconds: float) -> None:
        self._verdicts.decision_timeout = seconds

    def _on_created(self, created: dict[str, Any]) -> None:
        self.created = created
        self._verdicts.on_created(created)

    # --- the training loop's calls ------------------------------------------------------------------

    def log(self, metrics: Mapping[str, Any], step: int | None = None, *, rank: int | None = None) -> None:
        """Queue ``metrics`` at ``step`` (the previous step + 1 when omitted). Never blocks, never raises.

        ``rank`` logs on behalf of another rank (the distributed helpers do, from rank 0).
        """
        try:
            if step is None:
                step = self._next_step
            self._next_step = step + 1
            rate = self._rate
            if rate is not None and self.monitor in metrics and rate.key not in metrics:
                value = rate.value()
                if value is not None:
                    metrics = {**metrics, rate.key: value}
            self._sender.submit(step, metrics, rank)
        except Exception:  # the loop must go on whatever the user passed
            logger.warning("plateau: could not queue %r at step %r", metrics, step, exc_info=True)

    def sample_system(self, every_s: float) -> None:
        """Log the process's and the host's CPU and memory (and torch's GPU memory) every ``every_s``
        seconds, from a thread of its own, at the step the loop logged last (``init(system_metrics=S)``)."""
        if self._system is None and every_s > 0:
            self._system = SystemMetrics(every_s, self._latest_step, self._sender.submit).start()

    def _latest_step(self) -> int | None:
        """The step the loop logged last; None before its first."""
        return self._next_step - 1 if self._next_step > 0 else None

    def watch_optimizer(self, optimizer: Any, *, key: str = "lr") -> None:
        """Log the learning rate ``optimizer``'s latest step trained at (its first parameter group's), as
        ``key``, in each ``log()`` call that carries the monitored metric, unless that call logs ``key``
        itself: the rate the rules of the default policy read beside the metric.

        Read by a hook after each ``optimizer.step()``, before ``scheduler.step()`` changes it, so an epoch's
        value is logged with the rate the epoch trained at (a loop reading ``param_groups`` after the
        scheduler's step logs the next epoch's). Takes a torch optimizer (torch >= 2.0), or a wrapper of
        one (Accelerate's ``AcceleratedOptimizer``: the hook goes on the optimizer it wraps); raises
        ``TypeError`` for anything else. A second call replaces the first.
        """
        watch = RateWatch(optimizer, key)
        if self._rate is not None:
            self._rate.remove()
        self._rate = watch

    def should_stop(self, *, deferred: bool = False) -> bool:
        """True once the tracker has decided this run should stop.

        Called after ``log()`` of the monitored metric at step s, it answers for step s: it waits for the
        tracker's verdict on s (one judged round trip, ~2 ms on loopback: the step's batch goes as it asks),
        at most ``decision_timeout`` seconds. Calls with no new monitored value since the last answer read
        memory (well under a microsecond). It never waits while the tracker is away: the loop goes on,
        and where the tracker has not judged the step logged last, the SDK's own judgement of the rules
        that need only the run's values (``patience``, ``non_finite``, ``threshold``) answers, with the
        tracker's definitions; a stop reached so stays. A verdict later than the bound is said once; the
        loop then goes unblocked until the tracker has caught up (and for twice as many calls after each
        further timeout). Only rank 0 waits; other ranks read memory (the agreement below makes them exact).

        Under torch.distributed with several ranks it is a collective (one all-reduce MAX of an int):
        every rank must call it at the same point of the loop, and all get rank 0's answer for step s,
        so they leave the loop at the same step. ``deferred=True`` starts the all-reduce and returns the
        previous call's agreed answer, so the loop never waits on the collective: it answers for the
        monitored step logged before the previous call, and the loop leaves one step after the stop step
        (on every rank at once).
        """
        target = self._verdicts.await_verdict(self._sender)
        local = self._verdicts.stop is not None
        away = self._away
        if not local and away is not None:
            # The SDK's own stop, where the tracker has not judged the step logged last (single process).
            if target is None:
                self._catch_up(away)
                logged = self._sender.monitor_step
                local = away.stop(logged) is not None
                self._said_alone(logged, "stop", local)
            else:
                monitored = self._sender.monitored
                if monitored is not None and len(monitored) > 4096:  # memory stays bounded between calls
                    away.catch_up(monitored)
                local = away.acted is not None
        if self._agreement is None:
            return local
        return self._agreement.max("stop", int(local), deferred=deferred) > 0

    def _catch_up(self, away: AwayVerdicts) -> None:
        """Hand the local judge what the loop logged since it last judged."""
        monitored = self._sender.monitored
        if monitored:
            away.catch_up(monitored)

    def should_checkpoint(self, *, deferred: bool = False) -> bool:
        """True when the monitored step logged last is a new best: save the model now, and the saved
        network is the one of ``run.latest.best_step`` when the run stops. True once per new best; under
        the default policy also at an evaluation that equals the best with a lower validation loss than the
        one saved (``checkpoint``'s ``tie_loss_key``), which the stop then names.

        Waits like :meth:`should_stop` for the verdict on the step logged last, and is only ever about that
        step: a checkpoint verdict that arrives late, about an earlier step, shows in ``run.latest`` but does
        not make it True (the model has moved on since; saving it would keep a network that is not the best).

        Under torch.distributed it is a collective like :meth:`should_stop`: the ranks agree on the newest
        checkpoint decision any of them has, so all return True together, once; save on rank 0. With
        ``deferred=True`` it answers for the previous call's step, when the model has moved on by a step:
        use the blocking form to save the exact network.
        """
        target = self._verdicts.await_verdict(self._sender)
        logged = self._sender.monitor_step if target is None else target
        checkpoint = self._verdicts.checkpoint
        seq = 0
        if checkpoint is not None and checkpoint.step == logged:
            seq = checkpoint.seq
        if self._agreement is not None:
            seq = self._agreement.max("checkpoint", seq, deferred=deferred)
        away = self._away
        if away is not None:
            self._catch_up(away)
        if seq > self._checkpoint_taken:
            self._checkpoint_taken = seq
            if away is not None:
                away.saved(logged)
            return True
        if target is None and away is not None:
            # The tracker has not judged the step logged last: the SDK's own test answers for it.
            saved = away.checkpoint(logged)
            self._said_alone(logged, "checkpoint", saved)
            return saved
        return False

    def _said_alone(self, step: int | None, question: str, answer: bool) -> None:
        """Keep the SDK's own answer at ``step``, for the tracker to compare once it has judged it."""
        if step is not None and self._away_report is not None:
            self._away_report.said(step, question, answer)

    def _report_away(self, run_id: int) -> None:
        """From the sender's thread: the SDK's own answers the tracker has judged since, for comparing."""
        report = self._away_report
        if report is not None and report.waiting:
            report.send(run_id, self._verdicts.judged)

    @property
    def latest(self) -> Decision:
        """The newest decision received; the stop decision once there is one (the SDK's own, reached
        while the tracker was away, when the tracker has made none)."""
        if self._verdicts.stop is None and self._away is not None and self._away.acted is not None:
            return self._away.acted
        return self._verdicts.shown

    def decision(self, step: int, timeout: float = 30.0) -> Decision:
        """Flush, then wait up to ``timeout`` seconds for the tracker's verdict on exactly ``step``.

        Blocks by design (for strict loops and tests). On timeout or when the tracker is away it returns
        the latest decision it has, with ``judged=False``; it never raises.
        """
        deadline = time.monotonic() + timeout
        self._sender.flush(timeout)
        run_id = self.id
        if run_id is None or not self._sender.link.online:
            return self._verdicts.unjudged()
        try:
            decision = self._transport.get_decision(
                run_id, step=step, wait=max(0.0, deadline - time.monotonic())
            )
        except (RetryableError, RejectedError) as exc:
            logger.warning("plateau: could not get the decision for step %d: %s", step, exc)
            return self._verdicts.unjudged()
        self._verdicts.record(decision)
        if decision.judged:
            self._verdicts.judged = max(self._verdicts.judged, step)
        return decision

    # --- summary figures: model complexity, time per step -------------------------------------------

    def update_summary(self, figures: Mapping[str, Any]) -> None:
        """Merge ``figures`` (JSON-able values) into the run's summary on the tracker; ``None`` removes a
        key. Never blocks: the sender delivers it (or keeps it in the spool while the tracker is away)."""
        try:
            self._summarised = True
            self._sender.update_summary(dict(figures))
        except Exception:
            logger.warning("plateau: could not queue the summary %r", figures, exc_info=True)

    def profile_model(
        self, model: Any, example_input: Any, *, batch_size: int = 32, warmup: int = 3, repeats: int = 20
    ) -> dict[str, Any]:
        """Measure ``model`` (parameters, FLOPs per sample, inference latency at batch 1 and at
        ``batch_size``, peak memory; see :func:`plateau_tracker.complexity.profile_model`), store the figures
        in the run's summary and return them. Needs torch; call it before or after training, not inside a
        step."""
        figures = profile_model(model, example_input, batch_size=batch_size, warmup=warmup, repeats=repeats)
        self.update_summary(figures)
        return figures

    def step_timer(self, *, cuda_sync: bool = False) -> AbstractContextManager[None]:
        """Time one training step: ``with run.step_timer(): train_step(batch)``.

        Each step's time is logged as ``time/step_ms`` (steps counted by the timer), and the median and
        90th percentile (first step left out) go to the summary as ``step_time_s``/``step_time_p90_s``,
        at most every 10 s and at finish. ``cuda_sync`` waits for queued GPU work at both ends, so a GPU
        step is timed to its completion (it costs a synchronisation per step)."""
        return timed(self._step_done, cuda_sync=cuda_sync)

    def record_step_time(self, seconds: float) -> None:
        """Record one training step's duration measured elsewhere (what :meth:`step_timer` does)."""
        try:
            self._step_done(seconds)
        except Exception:
            logger.warning("plateau: could not record a step time", exc_info=True)

    def _step_done(self, seconds: float) -> None:
        times = self._step_times
        times.add(seconds)
        self.log({"time/step_ms": seconds * 1e3}, step=times.count - 1)
        now = time.monotonic()
        if now - self._step_times_published >= 10.0 and times.count > 1:
            self._step_times_published = now
            self.update_summary(times.figures())

    def _final_summary(self) -> None:
        if self._step_times.count:
            self.update_summary(self._step_times.figures())
        if self._summarised:  # the peak over the whole run, not only at profiling time
            self.update_summary({"peak_rss_bytes": peak_rss_bytes()})

    def flush(self, timeout: float = 10.0) -> bool:
        """Send everything logged so far; False if ``timeout`` ran out first."""
        return self._sender.flush(timeout)

    def finish(self, status: FinalStatus | None = None, timeout: float = 10.0) -> int:
        """Flush (up to ``timeout`` seconds), mark the run ended, stop the sender.

        ``status`` defaults to ``stopped`` when the tracker decided to stop, else ``finished``. What the
        tracker did not take in time goes to the disk spool (``plateau sync`` sends it later). Returns the
        number of points lost: neither sent nor spooled. Calling it again does nothing.
        """
        with self._lock:
            if self._finished:
                return 0
            self._finished = True
        deadline = time.monotonic() + timeout
        if self._system is not None:
            self._system.stop()
        if self._rate is not None:
            self._rate.remove()
        self._final_summary()
        left = self._sender.close(timeout)
        self._warn_if_monitor_never_logged()
        stopped = self._verdicts.stop is not None or (self._away is not None and self._away.acted is not None)
        status = status or ("stopped" if stopped else "finished")
        run_id = self.id
        spool = self._sender.spool
        finished = False
        if run_id is not None and self._sender.link.online:
            try:
                self._transport.finish_run(run_id, status, timeout=max(0.5, deadline - time.monotonic()))
                finished = True
            except (RetryableError, RejectedError) as exc:
                logger.warning("plateau: could not mark run %d %s: %s", run_id, status, exc)
        if finished and self._away_report is not None and self._away_report.waiting:
            assert run_id is not None
            self._away_report.send(run_id, self._verdicts.judged)
        if not finished and spool is not None and self._sender.create_error is None:
            # `plateau sync` replays it after the points, so the run does not stay `running` forever.
            spool.write_finish(status, time.time())
        if spool is not None and spool.pending():
            waiting = spooled_points(spool.pending())
            logger.warning(
                "plateau: %d points of run %s are in the spool at %s, not on the tracker yet: run "
                "`plateau sync` to deliver them",
                waiting,
                run_id if run_id is not None else f"{self.run_key!r} (not created yet)",
                spool.dir,
            )
            if run_id is not None and self._sender.link.online:
                # The run says it is incomplete until `plateau sync` delivers the rest (it clears this).
                with suppress(RetryableError, RejectedError):
                    self._transport.update_summary(run_id, {UNDELIVERED: waiting})
        if left:
            logger.warning(
                "plateau: %d points of run %s were lost (queue or spool full, or spool disabled)",
                left,
                run_id if run_id is not None else repr(self.run_key),
            )
        _live_runs.discard(self)
        self._transport.close()
        return left

    def _warn_if_monitor_never_logged(self) -> None:
        """The policy judged nothing because its monitor never came (the tracker may have said so while
        training, from keys like it; this is certain): say so once, naming what was logged."""
        logged = sorted(k for k in self._sender.batcher.keys_logged if not k.startswith("time/"))
        if self.monitor is None or self._sender.monitor_step is not None or not logged or self.rank != 0:
            return
        if "missing_monitor" in self._verdicts.warned:
            return
        logger.warning(
            "plateau: monitor %r was never logged, so nothing was judged (this process logged: %s)",
            self.monitor,
            ", ".join(logged[:10]),
        )

    def _close_quietly(self) -> None:
        self._finished = True
        self._sender.close(0.0)
        _live_runs.discard(self)
        self._transport.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish("failed" if exc_type is not None and exc_type is not KeyboardInterrupt else None)
