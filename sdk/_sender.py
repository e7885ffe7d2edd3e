"""The background sender: one daemon thread that batches logged metrics and posts them to the tracker.

The training loop only appends to a bounded deque (``submit``); everything slow happens here. The thread
wakes when the monitored metric is logged (so decisions are not held back), when a batch is full, on a
flush, or every ``flush_interval`` seconds. The monitored step's batch then waits for the rest of its step
(:data:`STEP_HOLD_S` at most): a loop that logs its learning rate or losses in a call after the monitored
value's, at the same step, has them judged with it, not one evaluation late.

Online, it posts batches; the tracker applies each ``batch_id`` once, so a retried batch is never counted
twice. When the tracker cannot be reached (network errors, 408, 429, 5xx) the sender goes offline: the
failed batch and everything logged after it go to the disk spool, and a probe (capped, jittered
exponential backoff, honouring Retry-After) looks for the tracker; when it answers, the run is created or
joined and the spool is replayed in order before new batches. Other 4xx answers are reported once and the
batch is dropped (sending it again would not help). Without a spool, batches wait in memory instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from plateau_tracker._batcher import Batch, Batcher, Marker, Queue, queued_points
from plateau_tracker._decision import Answer
from plateau_tracker._link import Link
from plateau_tracker._refusal import without_refused
from plateau_tracker._spool import Spool, replay, replay_summary
from plateau_tracker._summary_sync import SummarySync
from plateau_tracker._transport import RejectedError, RetryableError, Transport

logger = logging.getLogger("plateau")

STEP_HOLD_S = 0.1
"""How long, at most, the batch holding a newly logged monitored value waits for the rest of its step: the
keys a loop logs at that step in later calls (``run.log({"val/acc": acc}, step=e)`` then
``run.log({"lr": lr, "val_loss": loss}, step=e)``). It goes at once when the loop asks for the verdict
(``should_stop()``, ``should_checkpoint()``, ``decision()``), flushes, or logs another step, so a loop that
asks waits no longer than it must. A batch sent as the monitored value is logged would have the tracker
judge that step with the rate and losses of the step before, which makes the default policy's stops
markedly worse (HISTORY.md has the replay)."""
FLUSH_INTERVAL_S = 2.0
"""How long, at most, logged points other than the monitored metric's wait in memory before they are sent
(or spooled, with the tracker away): ``init(flush_interval=...)``. The monitored value goes at once, so
verdicts never wait for it; the rest (training losses, rates, system figures) rides in fewer, larger
batches, which is what lets one tracker serve a fleet. A kill loses at most this much of them."""
# A run whose loop logs nothing for this long (an epoch of an hour, a long evaluation) tells the tracker it
# is alive, so the tracker's heartbeat time (5 minutes by default) does not mark it crashed.
HEARTBEAT_S = 60.0


class Sender:
    """Owns the queue, the thread, the spool, and the run's creation on the tracker."""

    def __init__(
        self,
        transport: Transport,
        *,
        create_body: dict[str, Any],
        monitor: str | None,
        rank: int,
        on_created: Callable[[dict[str, Any]], None],
        on_answer: Callable[[Answer, int | None], None],
        spool: Spool | None = None,
        max_pending: int = 100_000,
        batch_points: int = 2_000,
        flush_interval: float = FLUSH_INTERVAL_S,
        max_backoff: float = 30.0,
    ) -> None:
        self._transport = transport
        self._create_body = create_body
        self.run_key = str(create_body.get("run_key"))
        self._monitor = monitor
        self._on_created = on_created
        self._on_answer = on_answer
        self.spool = spool
        self._max_pending = max_pending
        self.batcher = Batcher(monitor=monitor, rank=rank, batch_points=batch_points, warn=self._warn_once)
        self._wake_records = self.batcher.wake_records  # read by submit() on every log(): one lookup
        self._flush_interval = flush_interval
        self._max_backoff = max_backoff
        self.run_id: int | None = None
        self.created = threading.Event()
        # Attempts to reach the tracker (create the run, replay the spool): ``init`` waits for the first,
        # ``close`` for one more, and neither waits longer than an attempt takes.
        self.attempts = 0
        self.attempted = threading.Event()
        self.init_waiting = False
        self.create_error: str | None = None
        self.dropped_points = 0
        self.rejected_points = 0
        self._last_replay_spill = 0.0
        self.spooled_points = 0
        self._warned: set[str] = set()
        self._summary = SummarySync(transport, spool, self._warn_once)
        self._last_keys: tuple[Any, ...] = ()
        # The newest step at which this process logged the monitored metric for its own rank (set by
        # ``submit``, in the training thread), and a condition notified on every answer from the tracker
        # and on every change of reachability: ``Run`` waits on it for the verdict on that step.
        self.monitor_step: int | None = None
        # Every monitored value this process logged for its own rank, in the order logged, until the run's
        # local judge takes them (in the training thread); None where the run has no local judge, so
        # nothing collects unread.
        self.monitored: deque[tuple[int, Any]] | None = None
        # Called with the run id after each round that delivered while online (the run's report of the
        # SDK's own verdicts); None where there is none.
        self.after_round: Callable[[int], None] | None = None
        self._last_word = time.monotonic()
        # PLATEAU_DISABLED: nothing logged is kept, sent or spooled (the run's own judge still reads the
        # monitored values, so should_checkpoint() keeps marking each new best).
        self.discard = False
        self._heartbeats = True  # False once the tracker has no heartbeat route (a tracker before it)
        self.progress = threading.Condition()
        self._reset_threading()

    def _reset_threading(self) -> None:
        self._pending: Queue = deque()
        self._inflight: Batch | None = None
        self._wake = threading.Event()
        # The monitored step whose batch waits for the rest of its step (see STEP_HOLD_S), and the event
        # that lets it go; both are only hints between the threads: a race costs at most one hold.
        self._held_step: int | None = None
        self._step_done = threading.Event()
        self._abandon = threading.Event()
        self.link = Link(self._transport.url, max_backoff=self._max_backoff)
        self._thread = threading.Thread(target=self._loop, name="plateau-sender", daemon=True)

    def start(self) -> None:
        self._wake.set()  # create the run at once, not after the first flush interval
        self._thread.start()

    def restart_after_fork(self) -> None:
        """In a forked child the thread is gone: start afresh, without the parent's unsent records."""
        self._reset_threading()
        self._thread.start()

    # --- called from the training loop: must be fast and never raise -------------------------------

    def submit(self, step: int, metrics: Mapping[str, Any], rank: int | None = None) -> None:
        if self.discard:  # PLATEAU_DISABLED: only what the run's own judge reads is kept
            if rank is None and self._monitor in metrics:
                self.monitor_step = step
                if self.monitored is not None:
                    self.monitored.append((step, metrics[self._monitor]))  # type: ignore[index]  # a str
            return
        pending = self._pending
        if len(pending) >= self._max_pending and not self._relieve():
            self.dropped_points += len(metrics)
            self._warn_once("full", "plateau: the send queue and the spool are full; dropping points")
            return
        if self._held_step is not None and step != self._held_step:
            self._step_done.set()  # the loop has moved on: the held step is complete
        keys = tuple(metrics)
        if keys == self._last_keys:
            keys = self._last_keys
        else:
            self._last_keys = keys
        pending.append((step, time.time(), keys, tuple(metrics.values()), rank))
        # Event.set takes a lock: only when the thread is not already woken (while it sends, the queue
        # stays over the mark and every call would otherwise pay for it).
        monitor = self._monitor
        if monitor in metrics:
            if rank is None:
                self.monitor_step = self._held_step = step
                if self.monitored is not None:
                    self.monitored.append((step, metrics[monitor]))  # type: ignore[index]  # in metrics: a str
            if not self._wake.is_set():
                self._wake.set()
        elif len(pending) >= self._wake_records and not self._wake.is_set():
            self._wake.set()

    def _relieve(self) -> bool:
        """The queue is full (the tracker is slow or hung and the sender is stuck in a send): move its
        older half to the spool from the caller's thread, one disk write per batch, rather than drop."""
        if self.spool is None:
            return False
        self._warn_once("spill", "plateau: the send queue is full; spilling it to the disk spool")
        try:
            target = self._max_pending // 2
            while len(self._pending) > target:
                batch = self.batcher.take(self._pending)
                if batch is None:
                    break
                if batch.points:
                    self._stash(batch)
                self._finish_markers(batch)
        except Exception:  # never raise into the training loop
            logger.exception("plateau: could not spill the queue to the spool")
        return len(self._pending) < self._max_pending

    def update_summary(self, figures: Mapping[str, Any]) -> None:
        """Merge ``figures`` into the run's summary; the thread sends it (spooled while offline)."""
        self._summary.update(figures)
        self._wake.set()

    def _sync_summary(self, *, may_send: bool = True) -> None:
        """Online: send the summary if it changed. Offline (or ``may_send=False``): keep it in the spool."""
        failure = self._summary.sync(self.run_id if may_send and self.link.online else None)
        if failure is not None:
            self._go_offline(failure)

    def step_complete(self) -> None:
        """The loop asks for the verdict on the monitored step it logged last: that step is complete, and
        its batch goes now."""
        if self._held_step is not None:
            self._step_done.set()

    def flush(self, timeout: float) -> bool:
        """Wait until everything logged before this call is sent or in the spool; False on timeout."""
        if self.discard:  # nothing is kept, so nothing is waited for
            return True
        self.step_complete()
        if not self._thread.is_alive():
            return not self._pending and self._inflight is None
        marker = Marker()
        self._pending.append(marker)
        self._wake.set()
        return marker.done.wait(max(0.0, timeout))

    def close(self, timeout: float) -> int:
        """Flush with a deadline, keep trying to deliver the spool until then, stop the thread, and spool
        what is left. Returns points lost (neither sent nor spooled)."""
        deadline = time.monotonic() + timeout
        self.flush(timeout)
        self._reach_before(deadline)
        self._abandon.set()
        self._wake.set()
        self._notify()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
        try:
            self._sync_summary(may_send=time.monotonic() < deadline)
        except Exception:  # closing must not raise into the caller's exit path
            logger.exception("plateau: could not deliver the run summary")
        if self._inflight is not None and self._inflight.points:
            self._stash(self._inflight)
        self._inflight = None
        while True:
            batch = self.batcher.take(self._pending)
            if batch is None:
                break
            self._stash(batch)
        return self.unsent_points() + self.lost_points

    @property
    def lost_points(self) -> int:
        """Points that reached neither the tracker nor the spool: dropped while both were full, or refused
        by the tracker as a whole batch."""
        return self.dropped_points + self.rejected_points

    def _reach_before(self, deadline: float) -> None:
        """Offline at the end: attempts now rather than after the backoff. A tracker this run has reached
        went away mid-run (a restart, most often): it is tried until the deadline. One never reached is
        tried once: a tracker that is not there costs one failed connection, not the whole timeout."""
        while (
            self.spool is not None
            and self.create_error is None
            and (not self.link.online or self.run_id is None)
            and time.monotonic() < deadline
            and self._thread.is_alive()
        ):
            with self.progress:
                attempts = self.attempts
                self.link.probe_now()
                self._wake.set()
                while self.attempts == attempts and (remaining := deadline - time.monotonic()) > 0:
                    self.progress.wait(min(remaining, 0.5))
            if self.run_id is None:
                return
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def unsent_points(self) -> int:
        return queued_points(self._pending) + (self._inflight.points if self._inflight else 0)

    # --- the thread ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._abandon.is_set():
            # Woken by the loop's monitored values; else once a flush interval, and in time to say it
            # is alive when nothing is logged.
            self._wake.wait(min(self._flush_interval, HEARTBEAT_S))
            self._wake.clear()
            if self._held_step is not None:  # a monitored value: wait for the rest of its step
                self._step_done.wait(STEP_HOLD_S)
                self._held_step = None
                self._step_done.clear()
            try:
                self._one_round()
            except Exception:  # a bug here must not kill the thread and silently stop sending
                logger.exception("plateau: unexpected error in the sender thread")
                self._abandon.wait(1.0)

    def _one_round(self) -> None:
        refused = self.create_error is not None  # refused is final: asking again only repeats the error
        live = bool(self._pending)  # the loop logged since the last round
        if not refused and (self.run_id is None or not self.link.online) and self.link.probe_due(live=live):
            self._reconnect()
        if self.create_error is not None:
            self._discard_pending()
        elif self.run_id is None or not self.link.online:
            if self.spool is not None:
                self._spill()
                self._sync_summary(may_send=False)
        else:
            self._drain()
            self._sync_summary()
            self._keep_alive(live)
            if self.after_round is not None and self.run_id is not None and self.link.online:
                self.after_round(self.run_id)

    def go_offline_by_choice(self, *, discard: bool) -> None:
        """PLATEAU_OFFLINE or PLATEAU_DISABLED: the tracker is not reached by choice, which ``init`` has
        said; ``discard``: keep nothing logged (disabled)."""
        self.discard = discard
        self._warned.add("unreachable")

    def _keep_alive(self, live: bool) -> None:
        """Send a heartbeat after :data:`HEARTBEAT_S` without a batch; never an error into the loop."""
        now = time.monotonic()
        if live or not self._heartbeats or self.run_id is None:
            self._last_word = now
            return
        if now - self._last_word < HEARTBEAT_S:
            return
        self._last_word = now
        try:
            self._transport.heartbeat(self.run_id)
        except RejectedError:  # 404: a tracker without the route, or the run deleted; said by the next batch
            self._heartbeats = False
        except RetryableError as exc:  # the tracker is away: the next batch spools and probes
            logger.debug("plateau: heartbeat not delivered: %s", exc)

    def _reconnect(self) -> None:
        """Create or join the run if needed, then replay the spool; stay offline on failure."""
        try:
            if self.run_id is None:
                created = self._transport.create_run(self._create_body)
                self.run_id = int(created["id"])
                self._on_created(created)
                self.created.set()
                if self.spool is not None:  # an earlier process's finish of this run key: it goes on now
                    self.spool.forget_finish()
            # Until the spool is empty: what is logged while it replays goes to the spool too, behind it
            # (in order), every flush interval, instead of waiting in memory where a kill would lose it.
            while self.spool is not None and self.spool.pending():
                result = replay(
                    self._transport,
                    self.run_id,
                    self.spool.pending(),
                    lambda a: self._deliver(a, None),
                    between=self._spill_while_replaying,
                )
                self.rejected_points += result.rejected
                if not result.complete:
                    raise RetryableError(result.errors[-1] if result.errors else "spool replay interrupted")
            if self.spool is not None:
                replay_summary(self._transport, self.run_id, self.spool.dir)
        except RetryableError as exc:
            self._go_offline(exc)
        except RejectedError as exc:
            self.create_error = str(exc)
            if not self.init_waiting:  # else init() raises it: said once
                logger.error("plateau: the tracker refused to create the run: %s", exc)
            self.created.set()
        else:
            self._recovered()
        finally:
            self.attempts += 1
            self.attempted.set()
            self._notify()

    def _spill_while_replaying(self) -> None:
        now = time.monotonic()
        if now - self._last_replay_spill >= self._flush_interval:
            self._last_replay_spill = now
            if self._pending:
                self._spill()

    def _deliver(self, answer: Answer, monitor_step: int | None) -> None:
        """Hand the tracker's answer to the run and wake a loop waiting for it."""
        with self.progress:
            self._on_answer(answer, monitor_step)
            self.progress.notify_all()

    def _notify(self) -> None:
        with self.progress:
            self.progress.notify_all()

    @property
    def waitable(self) -> bool:
        """Whether an answer from the tracker can be expected: the run exists, the tracker answered last
        time, and the sender is running."""
        return self.run_id is not None and self.link.online and not self._abandon.is_set()

    def _in_hand(self) -> Batch | None:
        """The batch in hand (not yet sent nor stashed), else the next one built from the queue, now in
        hand; None when nothing is queued."""
        if self._inflight is None:
            self._inflight = self.batcher.take(self._pending)
        return self._inflight

    def _drain(self) -> None:
        assert self.run_id is not None
        while not self._abandon.is_set():
            batch = self._in_hand()
            if batch is None:
                return
            if batch.points:
                try:
                    answer = self._transport.send_series(
                        self.run_id, batch.batch_id, batch.series, urgent=batch.monitor_step is not None
                    )
                except RetryableError as exc:
                    self._go_offline(exc)
                    if self.spool is None:
                        return  # keep it in hand; try again after the backoff
                    self._stash(batch)
                except RejectedError as exc:
                    if self._salvage(batch, exc):
                        continue  # the rest of the batch, sent again
                    self.rejected_points += batch.points
                    self._warn_once(
                        f"rejected:{str(exc)[:12]}", f"plateau: the tracker rejected points: {exc}"
                    )
                else:
                    self._recovered()
                    self._deliver(answer, batch.monitor_step)
            self._finish(batch)
            if not self.link.online:
                return

    def _salvage(self, batch: Batch, exc: RejectedError) -> bool:
        """A batch refused for some of its points: put the rest in hand to be sent again (the tracker wrote
        none of it), and count the refused ones as invalid. False when the refusal names no points, or
        already refused what was left once."""
        rest = None if batch.salvaged or exc.status != 422 else without_refused(batch.series, exc.detail)
        if rest is None:
            return False
        kept, refused = rest
        self.batcher.invalid_points += len(refused)
        key, step = refused[0] if refused else ("?", "?")
        self._warn_once(
            f"refused:{key}",
            f"plateau: the tracker refused {len(refused)} point(s), the first {key!r} at step {step}; the "
            f"rest of the batch is sent again, and those are counted in run.invalid_points ({exc})",
        )
        self._inflight = replace(batch, series=kept, points=batch.points - len(refused), salvaged=True)
        return True

    def _spill(self) -> None:
        """Offline: move everything queued to the spool, so memory stays bounded and nothing is lost."""
        while not self._abandon.is_set():
            batch = self._in_hand()
            if batch is None:
                return
            if batch.points:
                self._stash(batch)
            self._finish(batch)

    def _finish(self, batch: Batch) -> None:
        self._inflight = None
        self._finish_markers(batch)

    @staticmethod
    def _finish_markers(batch: Batch) -> None:
        for marker in batch.markers:
            marker.done.set()

    def _stash(self, batch: Batch) -> None:
        try:
            written = self.spool is not None and self.spool.write(batch.batch_id, batch.series)
        except OSError as exc:  # a full disk, a spool folder removed: counted as lost, never raised
            self._warn_once("spool-error", f"plateau: cannot write to the spool ({exc}); dropping points")
            written = False
        if written:
            self.spooled_points += batch.points
            return
        self.dropped_points += batch.points
        self._warn_once("spool-full", "plateau: the spool is full or disabled; dropping points")

    def _discard_pending(self) -> None:
        while self._pending:
            item = self._pending.popleft()
            if isinstance(item, Marker):
                item.done.set()
            else:
                self.rejected_points += len(item[2])

    def _go_offline(self, exc: RetryableError) -> None:
        delay = self.link.failed(exc)
        where = f"; points go to the spool at {self.spool.dir}" if self.spool is not None else ""
        self._warn_once(
            "unreachable",
            f"plateau: cannot reach the tracker at {self._transport.url} ({exc}); training goes on{where} "
            "and they are sent when it is back",
        )
        self._notify()  # a loop waiting for a verdict goes on at once
        if self.spool is None:
            self._abandon.wait(delay)

    def _recovered(self) -> None:
        if self.link.answered():
            logger.warning("plateau: the tracker at %s is reachable again", self._transport.url)
            self._warned.discard("unreachable")

    def _warn_once(self, topic: str, message: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            logger.warning(message)
