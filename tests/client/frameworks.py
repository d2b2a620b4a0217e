"""Stand-ins for the parts of Transformers and Lightning the callbacks touch, built from
their documented interfaces. Lightning is not installed in CI (it pulls in torch, ~3 GB
with its CUDA wheels); transformers is, without torch, and ``test_transformers_real.py``
drives its real callback classes; the Transformers stand-in here keeps the clock-driven
progress and ETA checks independent of any transformers version.

Transformers: ``TrainerState`` fields, ``TrainingArguments.report_to``, a
``CallbackHandler`` that calls ``on_<event>(args, state, control, **kwargs)`` on each
callback in order, ``Trainer.add_callback`` / ``remove_callback`` and the event order of
``Trainer.train``. Lightning: the ``Trainer`` attributes the callback reads and the hook
order of ``fit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainerState:
    global_step: int = 0
    max_steps: int = 0
    epoch: float | None = None
    is_world_process_zero: bool = True
    log_history: list[dict[str, float]] = field(default_factory=list)


@dataclass
class TrainingArguments:
    report_to: list[str] = field(default_factory=list)
    logging_steps: int = 5


class TrainerControl:
    pass


class KubeflowCallback:
    """Named as Transformers' own; records that it was called."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.events.append("on_train_begin")


class CallbackHandler:
    def __init__(self, callbacks: list[Any]) -> None:
        self.callbacks = list(callbacks)

    def call_event(self, event: str, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        for callback in self.callbacks:
            hook = getattr(callback, event, None)
            if hook is not None:
                result = hook(args, state, control, model=None, **kwargs)
                if result is not None:
                    control = result
        return control


class Trainer:
    """Drives the callbacks as ``Trainer.train`` does: train begin, per step
    ``on_step_begin``/``on_step_end``, ``on_log`` every ``logging_steps``, an evaluation
    log at each epoch end, train end."""

    def __init__(
        self,
        args: TrainingArguments,
        max_steps: int,
        steps_per_epoch: int,
        callbacks: list[Any] | None = None,
        *,
        is_world_process_zero: bool = True,
        default_callbacks: list[Any] | None = None,
    ) -> None:
        self.args = args
        self.steps_per_epoch = steps_per_epoch
        self.state = TrainerState(max_steps=max_steps, is_world_process_zero=is_world_process_zero)
        self.control = TrainerControl()
        self.callback_handler = CallbackHandler((default_callbacks or []) + (callbacks or []))
        self.on_step: list[Any] = []  # test hooks run after each step's events

    def add_callback(self, callback: Any) -> None:
        self.callback_handler.callbacks.append(callback)

    def remove_callback(self, callback: Any) -> None:
        self.callback_handler.callbacks.remove(callback)

    def train(self) -> None:
        handler, args, state = self.callback_handler, self.args, self.state
        handler.call_event("on_train_begin", args, state, self.control)
        for step in range(1, state.max_steps + 1):
            handler.call_event("on_step_begin", args, state, self.control)
            state.global_step = step
            state.epoch = step / self.steps_per_epoch
            handler.call_event("on_step_end", args, state, self.control)
            if step % args.logging_steps == 0:
                logs = {"loss": round(2.0 / step, 4), "grad_norm": 1.5, "learning_rate": 5e-05}
                logs["epoch"] = round(state.epoch, 2)
                handler.call_event("on_log", args, state, self.control, logs=logs)
            if step % self.steps_per_epoch == 0:
                evaluation = {"eval_loss": 0.5, "eval_runtime": 1.25, "epoch": state.epoch}
                handler.call_event("on_log", args, state, self.control, logs=evaluation)
            for hook in self.on_step:
                hook(step)
        handler.call_event("on_train_end", args, state, self.control)


class Tensor:
    """A one-element tensor as Lightning logs it: ``numel()`` and ``item()``."""

    def __init__(self, value: float, count: int = 1) -> None:
        self.value = value
        self.count = count

    def numel(self) -> int:
        return self.count

    def item(self) -> float:
        if self.count != 1:
            raise RuntimeError("a Tensor with more than one element cannot be an item")
        return self.value


class LightningTrainer:
    """The ``lightning.pytorch.Trainer`` attributes the callback reads, and ``fit``'s
    hook order: train start, per batch ``on_train_batch_end``, per epoch validation
    end and train epoch end, train end (or ``on_exception``)."""

    def __init__(
        self,
        callbacks: list[Any],
        *,
        max_epochs: int,
        batches_per_epoch: int,
        is_global_zero: bool = True,
        sized: bool = True,
    ) -> None:
        self.callbacks = callbacks
        self.max_epochs = max_epochs
        self.batches_per_epoch = batches_per_epoch
        self.is_global_zero = is_global_zero
        self.global_step = 0
        self.current_epoch = 0
        self.sanity_checking = False
        self.callback_metrics: dict[str, Any] = {}
        self._sized = sized

    @property
    def estimated_stepping_batches(self) -> float:
        return self.max_epochs * self.batches_per_epoch if self._sized else float("inf")

    def _call(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self, None, *args)

    def fit(self, fail_at: int | None = None) -> None:
        self.sanity_checking = True
        self.callback_metrics = {"val_loss": Tensor(9.0)}
        self._call("on_validation_end")
        self.sanity_checking = False
        self.callback_metrics = {}  # Lightning resets the sanity check's results
        self._call("on_train_start")
        try:
            for epoch in range(self.max_epochs):
                self.current_epoch = epoch
                for batch in range(self.batches_per_epoch):
                    self.global_step += 1
                    if self.global_step == fail_at:
                        raise RuntimeError("out of memory")
                    self.callback_metrics["train_loss"] = Tensor(1.0 / self.global_step)
                    self._call("on_train_batch_end", {"loss": 0.1}, [batch], batch)
                self.callback_metrics["val_loss"] = Tensor(0.5 / (epoch + 1))
                self.callback_metrics["val_hist"] = Tensor(0.0, count=10)
                self._call("on_validation_end")
                self._call("on_train_epoch_end")
        except Exception as exc:
            self._call("on_exception", exc)
            raise
        self._call("on_train_end")
