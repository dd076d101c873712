"""A ready Trainer for any torch.nn.Module: the PyTorch user's path."""
from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .samples import Samples
from .types import Evaluation, ModelInfo, TensorKind, TrainSettings


class TorchTrainer:
    """Trains `module` (any torch.nn.Module whose named_parameters(), then named_buffers(),
    are the job's tensors, in order: the module the job was exported from,
    torch.jit.script(m).save) on the SDK's records. Buffers (BatchNorm's running statistics)
    travel both ways with the parameters: training updates them, evaluation (in eval mode)
    uses them, as the exported model does.

    A batch of records becomes the module's inputs and the targets in one of two ways:
     - `input_shape`: each record is float32 values, the input values (`input_shape`), then
       the target (the class index for cross-entropy, the target values for mse), as
       DatasetSource and float_record write them;
     - `collate(records) -> (inputs, targets)`: your function of the batch's records (a list
       of bytes objects) to the module's inputs (a tensor, or a tuple of tensors the module
       takes as its arguments, of any dtype: int64 token ids for an nn.Embedding) and the
       targets (int64 class indices for cross-entropy, float values for mse), one row per
       record.

    Local SGD as the task asks (batch size, learning rate, momentum, weight decay, FedProx's
    proximal term), reporting each batch's per-sample losses after its step; evaluation gives
    the mean loss and, for cross-entropy, "accuracy". Parameters and buffers are copied once
    into the module's tensors and once out of them per round."""

    def __init__(self, module: torch.nn.Module, input_shape: Sequence[int] | None = None,
                 eval_batch_size: int = 256,
                 collate: Callable[[list[bytes]], tuple[Any, torch.Tensor]] | None = None):
        if (input_shape is None) == (collate is None):
            raise ValueError("TorchTrainer takes input_shape (float32 records) or collate "
                             "(records to inputs and targets), one of them")
        self.module = module
        self.collate = collate
        self.input_shape = tuple(int(d) for d in input_shape) if input_shape is not None else ()
        if input_shape is not None and (not self.input_shape or min(self.input_shape) < 1):
            raise ValueError("input_shape needs dimensions >= 1")
        self.input_values = int(np.prod(self.input_shape)) if self.input_shape else 0
        self.eval_batch_size = eval_batch_size
        self.loss = "cross_entropy"
        self._params = [p for _, p in module.named_parameters()]
        self._tensors = self._params + [b for _, b in module.named_buffers()]
        self._trained = self._params  # the parameters that train (prepare says which)

    def prepare(self, model: ModelInfo) -> None:
        """Checks that the job's tensors are this module's (names, shapes and kinds, in
        order)."""
        if model.loss not in ("cross_entropy", "mse"):
            raise ValueError(f"unknown loss '{model.loss}'")
        mine = [(n, tuple(p.shape), TensorKind.PARAMETER)
                for n, p in self.module.named_parameters()]
        mine += [(n, tuple(b.shape), TensorKind.INTEGER_BUFFER if b.dtype == torch.int64
                  else TensorKind.FLOAT_BUFFER) for n, b in self.module.named_buffers()]
        theirs = [(t.name, tuple(t.shape), t.kind) for t in model.tensors]
        if mine != theirs:
            raise ValueError(f"the job's tensors {theirs} are not this module's {mine}")
        self.loss = model.loss
        # A job that fine-tunes part of the model: the frozen parameters take no gradient.
        frozen = {t.name for t in model.tensors if not t.trainable}
        for name, p in self.module.named_parameters():
            p.requires_grad_(name not in frozen)
        self._trained = [p for name, p in self.module.named_parameters() if name not in frozen]

    def _load(self, values: list[np.ndarray]) -> None:
        if len(values) != len(self._tensors):
            raise ValueError(f"{len(values)} tensors for a module of {len(self._tensors)}")
        with torch.no_grad(), warnings.catch_warnings():
            # The SDK's buffer is read-only; torch only reads it here.
            warnings.simplefilter("ignore", UserWarning)
            for t, value in zip(self._tensors, values):
                source = torch.from_numpy(value).view_as(t)
                # An integer buffer takes the nearest integer (copy_ alone would truncate).
                t.copy_(source if t.is_floating_point() else source.round())

    def _batch(self, samples: Samples, first: int, count: int):
        """The inputs (a tuple of the module's arguments) and targets of positions
        [first, first + count)."""
        if self.collate is not None:
            records = [samples.read(first + k) for k in range(count)]
            inputs, target = self.collate(records)
            inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
            for i, t in enumerate(inputs):
                if not isinstance(t, torch.Tensor) or t.dim() < 1 or t.shape[0] != count:
                    raise ValueError(f"collate's input {i} is not a tensor of {count} rows")
            if not isinstance(target, torch.Tensor) or target.dim() < 1 or \
                    target.shape[0] != count:
                raise ValueError(f"collate's targets are not a tensor of {count} rows")
            if self.loss == "cross_entropy" and target.dtype != torch.int64:
                raise ValueError("collate's cross-entropy targets must be int64 class indices")
            return inputs, target
        rows = samples.read_batch(first, count)
        if rows.shape[1] % 4:
            raise ValueError(f"a record of {rows.shape[1]} bytes is not float32 values")
        values = rows.view("<f4")  # no copy
        if values.shape[1] <= self.input_values:
            raise ValueError(f"a record holds {values.shape[1]} values, the input alone "
                             f"{self.input_values}")
        x = torch.from_numpy(values[:, :self.input_values]).reshape(count, *self.input_shape)
        target = values[:, self.input_values:]
        if self.loss == "mse":
            return (x,), torch.from_numpy(np.ascontiguousarray(target))
        classes = target[:, 0]
        if target.shape[1] != 1 or (classes < 0).any() or (np.floor(classes) != classes).any():
            raise ValueError("a cross-entropy record's target is not one class index")
        return (x,), torch.from_numpy(classes.astype(np.int64))

    def _per_sample_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.loss == "mse":
            return torch.nn.functional.mse_loss(outputs, targets.view_as(outputs),
                                                reduction="none").flatten(1).mean(1)
        return torch.nn.functional.cross_entropy(outputs, targets, reduction="none")

    def train(self, parameters: list[np.ndarray], samples: Samples,
              settings: TrainSettings) -> list[np.ndarray]:
        self._load(parameters)
        self.module.train()
        sgd = torch.optim.SGD(self._trained, lr=settings.lr, momentum=settings.momentum,
                              weight_decay=settings.weight_decay)
        anchor = [p.detach().clone() for p in self._trained] if settings.prox_mu > 0 else None
        n = len(samples)
        for first in range(0, n, settings.batch_size):
            count = min(settings.batch_size, n - first)
            x, y = self._batch(samples, first, count)
            per_sample = self._per_sample_loss(self.module(*x), y)
            objective = per_sample.mean()
            if anchor is not None:
                prox = sum(((p - a) ** 2).sum() for p, a in zip(self._trained, anchor))
                objective = objective + 0.5 * settings.prox_mu * prox
            sgd.zero_grad()
            objective.backward()
            sgd.step()
            samples.report_losses(first, per_sample.detach().numpy())
        return [t.detach().to(torch.float32).numpy() for t in self._tensors]

    def evaluate(self, parameters: list[np.ndarray], samples: Samples) -> Evaluation:
        self._load(parameters)
        self.module.eval()
        n, loss_sum, correct = len(samples), 0.0, 0
        with torch.no_grad():
            for first in range(0, n, self.eval_batch_size):
                count = min(self.eval_batch_size, n - first)
                x, y = self._batch(samples, first, count)
                outputs = self.module(*x)
                loss_sum += float(self._per_sample_loss(outputs, y).sum())
                if self.loss == "cross_entropy":
                    correct += int((outputs.argmax(1) == y).sum())
        metrics = {"accuracy": correct / n} if self.loss == "cross_entropy" and n else {}
        return Evaluation(samples=n, loss=loss_sum / n if n else 0.0, metrics=metrics)
