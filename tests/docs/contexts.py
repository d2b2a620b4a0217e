"""What a framework example in the docs assumes is already there (``model``,
``train_dataset``, ``train_loader``), made before the block runs in its own interpreter.

Where torch and Lightning are installed the examples run with them: a tiny model and
dataset. Where they are not (CI installs transformers without torch, and no Lightning)
stand-ins take their place, built from their documented interfaces:

- ``transformers``: ``Trainer`` replaced by one that drives transformers' own
  ``CallbackHandler``, ``TrainerState`` and ``TrainingArguments`` as ``Trainer.train``
  does (``tests/client_with_server/hf_trainer.py``); every other name is transformers'.
- ``lightning``: a module whose ``Trainer(max_epochs=..., callbacks=[...]).fit(model,
  train_dataloaders=...)`` calls the hooks in ``fit``'s order (``tests/client/frameworks.py``).
- ``torch``: the few calls the plain loop makes (``nn.Linear``, ``optim.SGD``,
  ``randn`` and a scalar tensor's arithmetic, ``backward`` and ``item``).

``python -m docs.contexts CONTEXT FILE`` runs FILE (a block) after the set-up, then prints
the callbacks of the ``trainer`` it made, if any, on a line starting ``callbacks:``.
"""

from __future__ import annotations

import importlib.util
import random
import runpy
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


# -- transformers ----------------------------------------------------------------------------


def transformers_context() -> dict[str, Any]:
    if installed("torch"):
        return _real_transformers_inputs()
    import transformers

    from client_with_server.hf_trainer import ShellTrainer

    class Trainer(ShellTrainer):
        """``transformers.Trainer``'s constructor, without torch."""

        def __init__(
            self,
            model: Any = None,
            args: Any = None,
            train_dataset: Any = None,
            callbacks: list[Any] | None = None,
            **_: Any,
        ) -> None:
            super().__init__(args, callbacks, max_steps=len(train_dataset or ()))

    transformers.Trainer = Trainer  # type: ignore[misc]  # stand-in: torch is missing
    return {"model": None, "train_dataset": list(range(20))}


def _real_transformers_inputs() -> dict[str, Any]:
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, x: Any, labels: Any = None) -> dict[str, Any]:
            loss = (self.linear(x).squeeze(-1) - labels).pow(2).mean()
            return {"loss": loss}

    data = [{"x": torch.randn(4), "labels": torch.tensor(1.0)} for _ in range(32)]
    return {"model": Tiny(), "train_dataset": data}


# -- lightning -------------------------------------------------------------------------------


def lightning_context() -> dict[str, Any]:
    if installed("lightning"):
        return _real_lightning_inputs()
    from client.frameworks import LightningTrainer

    class Callback:
        pass

    class Trainer(LightningTrainer):
        def __init__(self, *, max_epochs: int = 1, callbacks: list[Any] | None = None) -> None:
            super().__init__(list(callbacks or []), max_epochs=max_epochs, batches_per_epoch=0)

        def fit(self, model: Any, train_dataloaders: Any = None) -> None:  # type: ignore[override]
            self.batches_per_epoch = len(train_dataloaders)
            super().fit()

    lightning = types.ModuleType("lightning")
    pytorch = types.ModuleType("lightning.pytorch")
    pytorch.Callback = Callback  # type: ignore[attr-defined]
    pytorch.Trainer = Trainer  # type: ignore[attr-defined]
    lightning.pytorch = pytorch  # type: ignore[attr-defined]
    lightning.Trainer = Trainer  # type: ignore[attr-defined]
    sys.modules.update({"lightning": lightning, "lightning.pytorch": pytorch})
    return {"model": None, "train_loader": list(range(10))}


def _real_lightning_inputs() -> dict[str, Any]:
    import lightning
    import torch

    class Tiny(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            loss = (self.linear(x).squeeze(-1) - y).pow(2).mean()
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(40, 4), torch.ones(40))
    return {"model": Tiny(), "train_loader": torch.utils.data.DataLoader(data, batch_size=4)}


# -- torch -----------------------------------------------------------------------------------


class _Scalar:
    """A tensor as the plain loop uses it: arithmetic, ``mean``, ``backward``, ``item``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __sub__(self, other: _Scalar) -> _Scalar:
        return _Scalar(self.value - other.value)

    def pow(self, exponent: float) -> _Scalar:
        return _Scalar(self.value**exponent)

    def sum(self, dim: int | None = None, keepdim: bool = False) -> _Scalar:
        return self

    def mean(self) -> _Scalar:
        return self

    def backward(self) -> None:
        pass

    def item(self) -> float:
        return self.value


class _Linear:
    def __init__(self, inputs: int, outputs: int) -> None:
        self.weight = 1.0

    def __call__(self, x: _Scalar) -> _Scalar:
        return _Scalar(self.weight * x.value)

    def parameters(self) -> Iterator[float]:
        yield self.weight


class _SGD:
    def __init__(self, parameters: Iterator[float], lr: float) -> None:
        self.lr = lr

    def zero_grad(self) -> None:
        pass

    def step(self) -> None:
        pass


def torch_context() -> dict[str, Any]:
    if not installed("torch"):
        torch = types.ModuleType("torch")
        torch.nn = types.SimpleNamespace(Linear=_Linear)  # type: ignore[attr-defined]
        torch.optim = types.SimpleNamespace(SGD=_SGD)  # type: ignore[attr-defined]
        torch.randn = lambda *shape: _Scalar(random.gauss(0, 1))  # type: ignore[attr-defined]
        sys.modules["torch"] = torch
    return {}


CONTEXTS: dict[str, Callable[[], dict[str, Any]]] = {
    "none": dict,
    "transformers": transformers_context,
    "lightning": lightning_context,
    "torch": torch_context,
}


def main(context: str, path: str) -> None:
    namespace = runpy.run_path(path, init_globals=CONTEXTS[context](), run_name="__main__")
    trainer = namespace.get("trainer")
    handler = getattr(trainer, "callback_handler", None)
    callbacks = getattr(handler, "callbacks", None) or getattr(trainer, "callbacks", None)
    if callbacks is not None:
        print("callbacks:", *(type(c).__name__ for c in callbacks))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
