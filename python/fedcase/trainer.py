"""What an app implements to train its own model: a Trainer, and how the SDK calls it.

Parameters cross as numpy arrays, one per tensor of the job's model in its order, shaped as the
task says: views over the SDK's own buffer (no copy; read-only). A trainer returns the new
parameters as arrays of the same shapes, which the SDK copies once into its buffer.
"""
from __future__ import annotations

import ctypes
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from . import _capi
from ._capi import lib
from .samples import Samples
from .types import Evaluation, ModelInfo, TensorKind, TensorSpec, TrainSettings


class RoundAborted(Exception):
    """Raised by a trainer to give up the round on purpose (reported as "cancelled"). Any
    other exception fails the round too, reported as "internal" with its message; either
    way the session sends nothing for the round and goes on with the next task."""


@runtime_checkable
class Trainer(Protocol):
    """The app's model code. Called from the session's thread only, one call at a time."""

    def prepare(self, model: ModelInfo) -> None:
        """Gets ready for the job's model; raise (saying why) if this app cannot train it:
        the session then sends nothing and backs off."""

    def train(self, parameters: list[np.ndarray], samples: Samples,
              settings: TrainSettings) -> Sequence[np.ndarray]:
        """Trains from `parameters` over every position of `samples` in order, calling
        samples.report_losses after each batch's optimizer step, and returns the new
        parameters (same shapes, all finite)."""

    def evaluate(self, parameters: list[np.ndarray], samples: Samples) -> Evaluation:
        """Scores `parameters` on every position of `samples` without training."""


def split_tensors(flat: np.ndarray, tensors: Sequence[TensorSpec] | None) -> list[np.ndarray]:
    """`flat`'s values as one array per tensor, each a view that references `flat` (and so
    keeps its memory alive); `[flat]` when the layout is unknown or does not add up."""
    if not tensors or sum(t.size for t in tensors) != flat.size:
        return [flat]
    views, offset = [], 0
    for t in tensors:
        views.append(flat[offset:offset + t.size].reshape(t.shape))
        offset += t.size
    return views


def parameter_views(address: int | None, count: int, tensors: Sequence[TensorSpec] | None,
                    writable: bool) -> list[np.ndarray]:
    """Arrays over `count` floats at `address`, memory the SDK owns, one per tensor
    (split_tensors). No copy: they are valid only during the SDK's call into the trainer
    that they are passed to, so a trainer copies what it keeps (TorchTrainer copies them into
    its module)."""
    if count == 0 or not address:
        return [np.zeros(0, dtype=np.float32)]
    flat = np.ctypeslib.as_array(ctypes.cast(address, _capi.c_float_p), shape=(count,))
    if not writable:
        flat.flags.writeable = False
    return split_tensors(flat, tensors)


def copy_parameters(result: Sequence[np.ndarray], out: list[np.ndarray]) -> None:
    """Copies a trainer's result into the SDK's buffer (`out`'s views): once per tensor."""
    if len(result) != len(out):
        raise ValueError(f"the trainer returned {len(result)} tensors for {len(out)}")
    for i, (value, view) in enumerate(zip(result, out)):
        value = np.asarray(value)
        if value.size != view.size:
            raise ValueError(f"tensor {i} has {value.size} values, not {view.size}")
        np.copyto(view, value.reshape(view.shape), casting="same_kind")


def model_info(handle: int) -> ModelInfo:
    model = ctypes.c_void_p(handle)
    size = ctypes.c_size_t()
    module_address = lib.fedcase_model_module(model, ctypes.byref(size))
    tensors = []
    for i in range(lib.fedcase_model_tensor_count(model)):
        dims = ctypes.c_size_t()
        shape = lib.fedcase_model_tensor_shape(model, i, ctypes.byref(dims))
        tensors.append(TensorSpec(lib.fedcase_model_tensor_name(model, i).decode(),
                                  tuple(shape[d] for d in range(dims.value)),
                                  TensorKind(lib.fedcase_model_tensor_kind(model, i)),
                                  bool(lib.fedcase_model_tensor_trainable(model, i))))
    return ModelInfo(kind=lib.fedcase_model_kind(model).decode(),
                     loss=lib.fedcase_model_loss(model).decode(), tensors=tuple(tensors),
                     module=ctypes.string_at(module_address, size.value)
                     if module_address else None)


class _Adapter:
    """A Trainer as the C callbacks see it, with the layout of the model it prepared for."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.tensors: tuple[TensorSpec, ...] | None = None


def _guard(callback):
    """Runs a callback body: exceptions become an error code and message, never escape."""
    def run(*args):
        try:
            callback(*args)
            return _capi.OK
        except RoundAborted as e:
            return _capi.fail_callback(e, _capi.CANCELLED)
        except _capi.FedcaseError as e:
            return _capi.fail_callback(e, e.code)
        except BaseException as e:  # noqa: B902 - nothing may cross back into C
            return _capi.fail_callback(e)
    return run


@_capi.TRAINER_PREPARE
@_guard
def _prepare(user_data, model):
    adapter = _capi.registry.get(user_data)
    info = model_info(model)
    adapter.tensors = None
    adapter.trainer.prepare(info)
    adapter.tensors = info.tensors


@_capi.TRAINER_TRAIN
@_guard
def _train(user_data, parameters, count, samples, settings, out_parameters):
    adapter = _capi.registry.get(user_data)
    s = settings.contents
    result = adapter.trainer.train(
        parameter_views(parameters, count, adapter.tensors, writable=False), Samples(samples),
        TrainSettings(s.batch_size, s.lr, s.momentum, s.weight_decay, s.prox_mu))
    copy_parameters(result, parameter_views(out_parameters, count, adapter.tensors,
                                            writable=True))


@_capi.TRAINER_EVALUATE
@_guard
def _evaluate(user_data, parameters, count, samples, out):
    adapter = _capi.registry.get(user_data)
    e = adapter.trainer.evaluate(
        parameter_views(parameters, count, adapter.tensors, writable=False), Samples(samples))
    _capi.check(lib.fedcase_evaluation_set(out, int(e.samples), float(e.loss)))
    for name, value in e.metrics.items():
        _capi.check(lib.fedcase_evaluation_set_metric(out, name.encode(), float(value)))


class TrainerHandle:
    """The SDK's handle on a Python Trainer (internal): what sessions and local rounds share."""

    def __init__(self, trainer: Trainer):
        if not isinstance(trainer, Trainer):
            raise TypeError("a trainer needs prepare, train and evaluate methods")
        self.adapter = _Adapter(trainer)
        key = _capi.registry.add(self.adapter)
        callbacks = _capi.TrainerCallbacks(ctypes.sizeof(_capi.TrainerCallbacks), key,
                                           _prepare, _train, _evaluate, _capi.release_callback)
        try:
            self.handle = _capi.new_handle(lib.fedcase_trainer_new, ctypes.byref(callbacks))
        except BaseException:
            _capi.registry.remove(key)
            raise

    def close(self) -> None:
        """Drops this reference; the SDK releases the trainer when nothing else holds it."""
        if self.handle:
            lib.fedcase_trainer_free(self.handle)
            self.handle = None

    def __del__(self) -> None:
        self.close()
