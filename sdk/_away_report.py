"""What the SDK answered alone, for steps the tracker had not judged when the loop asked, told to the
tracker once it has judged them: it compares, and a step the two judged differently becomes an
``sdk_disagreed`` alert on the run (the loop kept a checkpoint, or left at a step, the tracker would not
have). Said once in the training process too.
"""

from __future__ import annotations

import logging
import threading

from plateau_tracker._transport import RejectedError, RetryableError, Transport

logger = logging.getLogger("plateau")

MAX_KEPT = 100_000
"""Answers kept for the tracker at most (the oldest go first): a run away for longer is compared on its
newest steps."""

_CHUNK = 5_000  # answers per request (the tracker takes up to 10,000)


class AwayReport:
    """The loop's local answers per step (``checkpoint``, ``stop``), until the tracker has compared them."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._answers: dict[int, dict[str, bool]] = {}  # step -> question -> answer, oldest step first
        self._lock = threading.Lock()
        self._said = False
        self.disagreed: list[int] = []
        """Steps the tracker judged differently from the SDK, as it answered."""

    def said(self, step: int, question: str, answer: bool) -> None:
        """The loop was told ``answer`` to ``question`` (``checkpoint`` or ``stop``) at ``step`` by the SDK
        alone (from the training thread)."""
        with self._lock:
            entry = self._answers.get(step)
            if entry is None:
                entry = self._answers[step] = {}
                if len(self._answers) > MAX_KEPT:
                    del self._answers[next(iter(self._answers))]
            entry[question] = entry.get(question, False) or answer

    def send(self, run_id: int, judged: int) -> None:
        """Send the answers for steps up to ``judged`` (the tracker has judged them); those it compared are
        forgotten. A tracker that cannot compare (too old) is not asked again. Never raises."""
        with self._lock:
            ready = [(step, dict(entry)) for step, entry in self._answers.items() if step <= judged]
        for start in range(0, len(ready), _CHUNK):
            chunk = ready[start : start + _CHUNK]
            body = [{"step": step, **entry} for step, entry in chunk]
            try:
                result = self._transport.compare_away_verdicts(run_id, body)
            except RetryableError:
                return  # the next round tries again
            except RejectedError as exc:
                logger.debug("plateau: the tracker cannot compare the SDK's own verdicts: %s", exc)
                with self._lock:
                    self._answers.clear()
                return
            except Exception:  # a bug here must not reach the loop or the sender
                logger.debug("plateau: could not send the SDK's own verdicts", exc_info=True)
                return
            waiting = set(int(step) for step in result.get("not_judged", ()))
            with self._lock:
                for step, _ in chunk:
                    if step not in waiting:
                        self._answers.pop(step, None)
            self._say([int(step) for step in result.get("disagreed", ())])

    @property
    def waiting(self) -> int:
        """Steps answered alone that the tracker has not compared yet."""
        return len(self._answers)

    def _say(self, disagreed: list[int]) -> None:
        self.disagreed += disagreed
        if disagreed and not self._said:
            self._said = True
            logger.warning(
                "plateau: the tracker judged step %d differently from the SDK, which answered alone while "
                "the tracker had not judged it; the run's sdk_disagreed alert says how",
                disagreed[0],
            )
