"""``StatusReporter``: the caller records the latest update, a daemon thread posts it.

The caller's side (``report``) takes a lock for a few assignments and returns: it never
waits for the network, a log handler or the sending thread's work. The sending thread
fits the update to the CRD, posts it over one kept-alive connection and decides what
happens next from the answer:

- 2xx: delivered.
- 401/403: the token file is re-read at once; if it changed the post is repeated with
  the new token, else the update is dropped.
- 408, 429, 5xx and no answer (network, TLS): retried after Retry-After (429/503) or an
  exponential backoff; an update reported meanwhile replaces the one waiting.
- any other answer: dropped, logged (rate-limited).

At most one request starts per ``min_interval``; the newest pending update goes out when
the window opens (trailing edge). ``flush`` sends what is pending without waiting for the
window, bounded by a timeout, and so does an ``atexit`` hook: the last update of a
process that exits is delivered unless the server cannot take it in time. The waits on
the way out (train end in the framework callbacks, ``close``, the exit hook) share one
flush timeout (``WaitBudget``): a server that does not answer holds the process once, not
once per wait. A ``flush`` the caller asks for waits its own timeout, and what it waits
in vain is taken from that shared budget too.

The sending thread never stops by itself: an exception in a round (a bug, a log handler
that raises) is logged and counted, the update is kept and retried after a backoff; a
thread that ends anyway (an exception that is not an ``Exception``) is replaced, with its
update.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple

from . import environment, payload
from .budget import WaitBudget
from .credentials import CAFile, TokenFile
from .logs import RateLimitedLog
from .pacing import Pacer, parse_retry_after
from .payload import Observation
from .transport import NO_ANSWER, Answer, Transport

_RETRY_AFTER_CODES = frozenset({429, 503})


class Report(NamedTuple):
    """What ``report()`` records, as the caller gave it; the sending thread turns it into
    an Observation and fits it to the CRD."""

    progress: object
    estimated_remaining_seconds: object
    metrics: dict[str, object] | None  # a shallow copy of the caller's
    step: object
    epoch: object
    observed_at: float  # Unix time


_TOKEN_CODES = frozenset({401, 403})
# How long close() waits for the sending thread to end once its post is cut short (it
# only has to wake up; a name lookup in progress may take longer, and is not waited for).
_SENDER_END_WAIT = 1.0
# How long the sending thread pauses after a round that failed where even scheduling the
# retry failed (a clock that raises): it must not spin.
_ERROR_PAUSE = 1.0


@dataclass
class Stats:
    """What the sending thread has done so far (read them; they only grow)."""

    posts: int = 0
    delivered: int = 0
    dropped: int = 0
    retries: int = 0
    waits: int = 0  # flushes (``close`` and the exit hook included) that blocked
    errors: int = 0  # rounds of the sending thread that raised (the update was kept)
    restarts: int = 0  # sending threads started to replace one that ended


class StatusReporter:
    """Reports a TrainJob's progress, ETA and metrics from inside its pod.

    ``url``, ``token_path`` and ``ca_path`` default to ``KUBEFLOW_TRAINER_SERVER_URL``,
    ``..._TOKEN`` and ``..._CA_CERT``. ``only_rank_zero`` None means on when ``RANK`` or
    ``WORLD_SIZE`` is set; then a process whose global rank is not 0 reports nothing.
    ``min_interval`` spaces requests (seconds), ``timeout`` bounds each socket operation,
    ``flush_timeout`` is the default bound of ``flush``, ``close`` and the exit flush.
    ``close``, the exit flush and the framework callbacks' train end share that one bound
    while the server delivers nothing: the time one of them (or a ``flush``) waited in
    vain is not waited again.
    ``environ``, ``clock`` (Unix seconds) and ``monotonic`` replace ``os.environ``,
    ``time.time`` and ``time.monotonic``.

    Safe from any thread; nothing it does raises into the caller. Use it as a context
    manager or call ``close()``; otherwise it flushes at interpreter exit.
    """

    def __init__(
        self,
        url: str | None = None,
        token_path: str | None = None,
        ca_path: str | None = None,
        *,
        min_interval: float = 5.0,
        timeout: float = 5.0,
        only_rank_zero: bool | None = None,
        flush_timeout: float = 5.0,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = environment.resolve(
            os.environ if environ is None else environ, url, token_path, ca_path, only_rank_zero
        )
        self.min_interval = min_interval
        self.timeout = timeout
        self.flush_timeout = flush_timeout
        self.stats = Stats()
        self._clock = clock
        self._monotonic = monotonic
        self._log = RateLimitedLog()
        self._tokens = TokenFile(self.settings.token_path, clock)
        self._pacer = Pacer(min_interval)
        self._transport: Transport | None = None
        self._pid = os.getpid()
        self._exit_hooked = False
        self._reset_sync()
        if self.settings.reports:
            assert self.settings.url is not None
            try:
                self._transport = Transport(
                    self.settings.url, CAFile(self.settings.ca_path), timeout
                )
            except ValueError as exc:
                self._log.log(logging.WARNING, "bad-url", "status reporting off error=%s", exc)
        elif self.settings.url:
            self._log.log(
                logging.INFO, "skip", "status reporting off: %s", self.settings.skip_reason
            )
        if self._transport is not None and not self._transport.secure:
            self._log.log(logging.WARNING, "plain-http", "status server URL is plain http")
        _live.add(self)

    def _reset_sync(self) -> None:
        # report() takes the bare lock (cheaper than entering the Condition). Reentrant:
        # a signal handler may report while the main thread is inside report().
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._pending: Report | None = None
        self._pending_seq = 0
        self._taken = 0
        self._settled = 0
        self._delivered = 0
        self._in_flight = False
        self._current: tuple[int, Report] | None = None  # the update the sender holds
        self._flushing = 0
        self._idle = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._budget = WaitBudget()

    @property
    def enabled(self) -> bool:
        """True when reports from this process are sent (URL known, rank allowed)."""
        return self._transport is not None and not self._closed

    # -- the caller's side ---------------------------------------------------------------

    def report(
        self,
        progress_percent: float | None = None,
        estimated_remaining_seconds: float | None = None,
        metrics: Mapping[str, object] | None = None,
        *,
        step: int | None = None,
        epoch: float | None = None,
    ) -> bool:
        """Record the TrainJob's status as of now; the sending thread posts it.

        Each report is the whole ``trainerStatus`` (a field left None is left out, as
        with the Kubeflow SDK); the latest one wins. ``step`` and ``epoch`` become the
        first metrics. Values are fitted to the CRD when sent. Returns True when the
        update was taken, False when this process does not report (or after ``close``).
        """
        if self._transport is None:
            return False
        try:
            taken = Report(
                progress_percent,
                estimated_remaining_seconds,
                None if metrics is None else dict(metrics),
                step,
                epoch,
                self._clock(),
            )
            with self._lock:
                if self._closed:
                    return False
                self._taken += 1
                self._pending = taken
                self._pending_seq = self._taken
                if self._thread is None:
                    self._start()
                elif self._idle:
                    self._cond.notify()
            return True
        except Exception as exc:  # never into the training loop
            self._log.log(logging.WARNING, "report", "status report not taken error=%r", exc)
            return False

    def flush(self, timeout: float | None = None, *, within_budget: bool = False) -> bool:
        """Send what is pending now (not waiting for the throttle window) and wait for it,
        at most ``timeout`` seconds (default ``flush_timeout``). True when every update
        taken so far was delivered (an update replaced by a newer one counts as the newer
        one); vacuously True when none was taken.

        A wait that ends without delivery spends the shared wait budget; a delivery
        restores it. ``within_budget`` also bounds this wait by what is left of that
        budget: the framework callbacks use it at train end (as ``close`` and the exit
        hook do), so the way out of a process waits one ``flush_timeout`` in all."""
        wanted = self.flush_timeout if timeout is None else timeout
        with self._cond:
            target = self._taken
            if self._settled >= target:
                return self._delivered >= target
            if self._closed or (self._thread is None and not self._revive()):
                return False
            self._flushing += 1
            self._cond.notify_all()  # the sender may post now, window or not
            started = self._monotonic()
            if within_budget:
                wanted = self._budget.allowance(wanted, self.flush_timeout)
            deadline = started + max(wanted, 0.0)
            waited = False
            try:
                while self._settled < target:
                    remaining = deadline - self._monotonic()
                    if remaining <= 0 or self._closed:
                        return False
                    if (
                        self._pending is not None
                        and not self._in_flight
                        and self._pacer.retry_at > deadline
                    ):
                        return False  # the server asked for more time than we have
                    if not waited:
                        waited = True
                        self.stats.waits += 1
                    self._cond.wait(remaining)
                return self._delivered >= target
            finally:
                self._flushing -= 1
                if self._delivered < target:
                    self._budget.spend(self._monotonic() - started)

    def close(self, timeout: float | None = None) -> None:
        """Flush (bounded by ``timeout``, default ``flush_timeout``, and by what earlier
        waits left of the shared budget), then stop sending: a post still waiting for its
        answer is cut short, and so is a connect or TLS handshake in progress; the sending
        thread has ended when close returns (unless it is stuck in a name lookup; close
        waits for it at most a second). Later reports return False. Idempotent."""
        if self._closed:
            return
        try:
            self.flush(timeout, within_budget=True)
        finally:
            with self._cond:
                self._closed = True
                thread = self._thread
                self._cond.notify_all()
            atexit.unregister(self._at_exit)
            if thread is not None and thread is not threading.current_thread():
                # The sender stops now: a post still waiting for its answer is cut short,
                # and the thread ends before close returns. A daemon thread still running
                # while the interpreter exits can crash it (PyPy does, now and then).
                if self._transport is not None:
                    self._transport.abort()
                thread.join(_SENDER_END_WAIT)
            if (thread is None or not thread.is_alive()) and self._transport is not None:
                self._transport.close()

    def __enter__(self) -> StatusReporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _start(self) -> None:
        thread = threading.Thread(target=self._run, name="trainjob-status", daemon=True)
        thread.start()  # may raise (e.g. at interpreter shutdown): report() answers False
        self._thread = thread
        self._pid = os.getpid()
        if not self._exit_hooked:
            atexit.register(self._at_exit)
            self._exit_hooked = True

    def _revive(self) -> bool:
        """Under the lock, with no sending thread: start one for the update a thread that
        ended left pending. False when none could start."""
        if self._pending is None:
            return False
        try:
            self._start()
        except RuntimeError:  # interpreter shutdown: no new threads
            return False
        self.stats.restarts += 1
        return True

    def _at_exit(self) -> None:
        if os.getpid() == self._pid:
            self.close(self.flush_timeout)

    def _forget_after_fork(self) -> None:
        """In a forked child: the sending thread and its connection stayed in the parent."""
        taken = self._taken
        self._reset_sync()
        self._taken = self._settled = self._delivered = taken
        self._pid = os.getpid()
        if self._transport is not None:
            self._transport.forget()

    # -- the sending thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                try:
                    with self._cond:
                        job = self._next()
                    if job is None:
                        return
                    seq, taken = job
                    self._settle(seq, taken, self._post(observe(taken)))
                except Exception as exc:  # a bug, a log handler that raises, ...
                    self._round_failed(exc)
        finally:
            self._ended()

    def _round_failed(self, exc: Exception) -> None:
        """A round raised: the update it held is kept (unless a newer one waits) and
        retried after a backoff, as after a failed post."""
        with contextlib.suppress(Exception):  # the log handler may be what raised
            self._log.log(logging.ERROR, "round", "status sender error, update kept error=%r", exc)
        with self._cond:
            self.stats.errors += 1
            self._keep_current()
            try:
                self._pacer.failed(self._monotonic(), None)
            except Exception:
                self._cond.wait(_ERROR_PAUSE)
            self._cond.notify_all()

    def _keep_current(self) -> None:
        """Under the lock: the update the sender held and did not settle waits again."""
        current, self._current = self._current, None
        self._in_flight = False
        if current is not None and current[0] > self._settled and self._pending is None:
            self._pending_seq, self._pending = current

    def _ended(self) -> None:
        """The sending thread's last act, however it ends. Unless closed, an update it
        held or left pending gets a new thread (and the backoff of a failed post, so a
        thread that keeps dying cannot spin)."""
        assert self._transport is not None
        try:
            self._transport.close()
        finally:
            with self._cond:
                if self._thread is threading.current_thread():
                    self._thread = None
                self._keep_current()
                if not self._closed and self._thread is None and self._pending is not None:
                    with contextlib.suppress(Exception):
                        self._pacer.failed(self._monotonic(), None)
                    self._revive()
                self._cond.notify_all()

    def _next(self) -> tuple[int, Report] | None:
        """Wait (holding the condition) until an update may be sent; None once closed.

        While the window is shut the thread sleeps until it opens, and report() does not
        wake it: each wake-up takes the GIL from the training loop, so there is one per
        post, not one per post plus one for the first report after it."""
        while not self._closed:
            now = self._monotonic()
            wait = self._pacer.ready_at(flushing=self._flushing > 0) - now
            if wait > 0:
                self._cond.wait(wait)
            elif self._pending is None:
                self._idle = True
                self._cond.wait()
                self._idle = False
            else:
                job = (self._pending_seq, self._pending)
                self._pending = None
                self._in_flight = True
                self._current = job
                self._pacer.started(now)
                return job
        return None

    def _post(self, observation: Observation) -> Answer:
        assert self._transport is not None
        status, notes = payload.fit(observation)
        for note in sorted(notes):
            self._log.log(logging.WARNING, note, "status update fitted to the CRD change=%r", note)
        body = payload.encode(status)
        token = self._token()
        answer = self._transport.post(body, token)
        if answer.code in _TOKEN_CODES and self._tokens.path is not None:
            self._tokens.invalidate()
            fresh = self._token()
            if fresh is not None and fresh != token:
                answer = self._transport.post(body, fresh)
        return answer

    def _token(self) -> str | None:
        token = self._tokens.get()
        if token is None and self._tokens.error:
            self._log.log(logging.WARNING, "token", "no token sent error=%r", self._tokens.error)
        return token

    def _settle(self, seq: int, taken: Report, answer: Answer) -> None:
        code = answer.code
        ok = 200 <= code < 300
        closed = self._closed  # after close nothing is retried
        retry = not closed and (code == NO_ANSWER or code == 408 or code == 429 or code >= 500)
        retry_after = None
        if code in _RETRY_AFTER_CODES:
            retry_after = parse_retry_after(answer.retry_after, self._clock())
        # Logged before a flush can return, and never under the lock (a log handler may
        # be slow; a caller must never wait for it).
        if closed and not ok:
            self._log.log(
                logging.WARNING,
                "closed",
                "status update not delivered before close code=%d reason=%s message=%r",
                code,
                answer.reason,
                answer.message,
            )
        elif retry:
            self._log.log(
                logging.WARNING,
                f"retry-{code}",
                "status post will be retried code=%d reason=%s message=%r retry_after=%s",
                code,
                answer.reason,
                answer.message,
                "backoff" if retry_after is None else f"{retry_after:g}s",
            )
        elif not ok:
            self._log.log(
                logging.WARNING,
                f"drop-{code}",
                "status update refused, not retried code=%d reason=%s message=%r",
                code,
                answer.reason,
                answer.message,
            )
        with self._cond:
            self._in_flight = False
            self._current = None
            self.stats.posts += 1
            if ok:
                self._pacer.succeeded()
                self._budget.restore()
                self._delivered = max(self._delivered, seq)
                self._settled = max(self._settled, seq)
                self.stats.delivered += 1
            elif retry:
                self._pacer.failed(self._monotonic(), retry_after)
                if self._pending is None:  # else newer data replaces this update
                    self._pending, self._pending_seq = taken, seq
                self.stats.retries += 1
            else:
                self._settled = max(self._settled, seq)
                self.stats.dropped += 1
            self._cond.notify_all()


def observe(taken: Report) -> Observation:
    """The Observation of a report: ``step`` and ``epoch`` first among the metrics."""
    progress, eta, metrics, step, epoch, observed_at = taken
    items = () if metrics is None else tuple(metrics.items())
    if epoch is not None:
        items = (("epoch", epoch), *items)
    if step is not None:
        items = (("step", step), *items)
    return Observation(progress, eta, items, observed_at)


_live: weakref.WeakSet[StatusReporter] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for reporter in list(_live):
        reporter._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
