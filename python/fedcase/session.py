"""A session with a coordinator, and one local round without one."""
from __future__ import annotations

import ctypes
import json
import os
import signal
import threading
import time
from typing import Callable, Mapping, Sequence

import numpy as np

from . import _capi
from ._capi import lib
from .sources import FolderSource, SampleSource, SourceHandle
from .trainer import Trainer, TrainerHandle, split_tensors
from .types import Directives, RoundStats, SessionStats, TensorSpec, TrainSettings


class Session:
    """Takes part in a coordinator's jobs with the app's trainer and data: registers, polls
    for tasks, downloads the model, evaluates it on the held-out samples when asked, trains
    through the SDK's importance sampler and cache, uploads the update. The C++ SDK does all
    of it; the trainer and Python sources are called back on the session's thread.

    Raises FedcaseError when the configuration is refused (a missing token or empty data, a
    bad device, TLS options that do not go together)."""

    def __init__(self, *, port: int, enrollment_token: str, trainer: Trainer,
                 train_data: SampleSource | FolderSource,
                 eval_data: SampleSource | FolderSource | None = None,
                 host: str = "127.0.0.1", name: str = "python-app",
                 state_dir: str | os.PathLike | None = None, seed: int = 1,
                 cache_capacity_bytes: int = 0, poll_wait_s: float = 1.0,
                 device: Mapping[str, object] | None = None,
                 labels: Mapping[str, str] | None = None, tls_ca: str | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None):
        handles = [TrainerHandle(trainer), SourceHandle(train_data)]
        if eval_data is not None:
            handles.append(SourceHandle(eval_data))
        config = _capi.new_handle(lib.fedcase_config_new)
        try:
            setters = [
                (lib.fedcase_config_set_coordinator, host.encode(), port),
                (lib.fedcase_config_set_enrollment_token, enrollment_token.encode()),
                (lib.fedcase_config_set_name, name.encode()),
                (lib.fedcase_config_set_state_dir, _capi.text(state_dir)),
                (lib.fedcase_config_set_seed, seed),
                (lib.fedcase_config_set_cache_capacity, cache_capacity_bytes),
                (lib.fedcase_config_set_poll_wait, poll_wait_s),
                (lib.fedcase_config_set_device_json, json.dumps(dict(device or {})).encode()),
                (lib.fedcase_config_set_trainer, handles[0].handle),
                (lib.fedcase_config_set_train_data, handles[1].handle),
            ]
            if eval_data is not None:
                setters.append((lib.fedcase_config_set_eval_data, handles[2].handle))
            if tls_ca is not None:
                setters.append((lib.fedcase_config_set_tls, _capi.text(tls_ca),
                                _capi.text(tls_cert), _capi.text(tls_key)))
            for key, value in (labels or {}).items():
                setters.append((lib.fedcase_config_set_label, key.encode(), value.encode()))
            for setter, *args in setters:
                _capi.check(setter(config, *args))
            self._handle = _capi.new_handle(lib.fedcase_session_new, config)
        finally:
            lib.fedcase_config_free(config)
            for h in handles:  # the session holds its own references
                h.close()
        self._thread: threading.Thread | None = None
        self._result = _capi.OK
        self._error = ""

    def run(self, *, seconds: float | None = None,
            on_progress: Callable[[SessionStats], None] | None = None) -> SessionStats:
        """Works until stop(), `seconds` or SIGINT/SIGTERM (Ctrl-C): the SDK runs on a thread
        of its own while this thread waits, so a signal stops the session after the task
        under way and run() returns its counters. `on_progress` is called on this thread
        whenever a round was trained. Raises FedcaseError if the session could not run."""
        if self._thread is not None:
            raise RuntimeError("the session runs already")
        self._thread = threading.Thread(target=self._run, name="fedcase-session", daemon=True)
        restore = self._stop_on_signals()
        self._thread.start()
        deadline = None if seconds is None else time.monotonic() + seconds
        reported = 0
        try:
            while self._thread.is_alive():
                try:
                    self._thread.join(0.1)
                except KeyboardInterrupt:
                    self.stop()
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    self.stop()
                if on_progress is not None:
                    stats = self.stats
                    if stats.rounds_trained > reported:
                        reported = stats.rounds_trained
                        on_progress(stats)
        finally:
            restore()
            self._thread.join()
            self._thread = None
        if self._result != _capi.OK:
            raise _capi.FedcaseError(self._result, self._error)
        return self.stats

    def _run(self) -> None:
        self._result = lib.fedcase_session_run(self._handle)
        if self._result != _capi.OK:
            self._error = lib.fedcase_last_error().decode(errors="replace")

    def _stop_on_signals(self) -> Callable[[], None]:
        """SIGINT and SIGTERM stop the session (main thread only); returns the undo."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            signal.signal(s, lambda *_: self.stop())
        return lambda: [signal.signal(s, h) for s, h in previous.items()]

    def stop(self) -> None:
        """Asks the session to stop; thread-safe."""
        lib.fedcase_session_stop(self._handle)

    @property
    def stats(self) -> SessionStats:
        """The session's counters; thread-safe."""
        s = _capi.SessionStatsStruct(ctypes.sizeof(_capi.SessionStatsStruct))
        _capi.check(lib.fedcase_session_stats_get(self._handle, ctypes.byref(s)))
        return SessionStats(*(getattr(s, f) for f, _ in s._fields_[1:]))

    @property
    def client_id(self) -> int:
        """The id the coordinator gave this client; 0 before registration."""
        return lib.fedcase_session_client_id(self._handle)

    def close(self) -> None:
        """Frees the session (stopping it first if it runs)."""
        if getattr(self, "_handle", None):
            if self._thread is not None:
                self.stop()
                self._thread.join()
            lib.fedcase_session_free(self._handle)
            self._handle = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class LocalData:
    """The SDK's local data pipeline without a coordinator: each train_round plans the round's
    samples (uniform or importance sampling, the sample budget), serves them to the trainer
    through the cache, and learns from the reported losses, exactly as in a session (the same
    seed gives the C++ SDK's read plan). For tests, benchmarks and offline training."""

    def __init__(self, source: SampleSource | FolderSource, *, seed: int = 1,
                 state_dir: str | os.PathLike | None = None, cache_capacity_bytes: int = 0):
        self._trainers: dict[int, TrainerHandle] = {}
        source_handle = SourceHandle(source)
        try:
            self._handle = _capi.new_handle(lib.fedcase_local_data_open, source_handle.handle,
                                            seed, _capi.text(state_dir), cache_capacity_bytes)
        finally:
            source_handle.close()

    def train_round(self, trainer: Trainer, parameters: Sequence[np.ndarray],
                    settings: TrainSettings = TrainSettings(),
                    directives: Directives = Directives()
                    ) -> tuple[list[np.ndarray], RoundStats]:
        """Trains one round from `parameters` (arrays, one per tensor); returns the new
        parameters (new arrays of the same shapes) and the round's figures. The trainer is not
        prepared here: do it first. Raises FedcaseError when the round fails (the trainer's
        exception's message, "cancelled" for RoundAborted)."""
        handle = self._trainers.get(id(trainer))
        if handle is None or handle.adapter.trainer is not trainer:
            handle = self._trainers[id(trainer)] = TrainerHandle(trainer)
        arrays = [np.ascontiguousarray(p, dtype=np.float32) for p in parameters]
        handle.adapter.tensors = tuple(TensorSpec(str(i), a.shape) for i, a in enumerate(arrays))
        flat = np.concatenate([a.reshape(-1) for a in arrays])
        out = np.empty_like(flat)
        d = _capi.DirectivesStruct(ctypes.sizeof(_capi.DirectivesStruct), int(directives.sampling),
                                   directives.sample_budget, directives.epochs,
                                   int(directives.cache_policy), directives.cache_budget_bytes,
                                   directives.repetition_factor, int(directives.repetition))
        s = _capi.TrainSettingsStruct(settings.batch_size, settings.lr, settings.momentum,
                                      settings.weight_decay, settings.prox_mu)
        stats = _capi.RoundStatsStruct(ctypes.sizeof(_capi.RoundStatsStruct))
        _capi.check(lib.fedcase_local_data_train_round(
            self._handle, handle.handle, flat.ctypes.data, flat.size, ctypes.byref(s),
            ctypes.byref(d), out.ctypes.data, ctypes.byref(stats)))
        # Views of `out`, which they keep alive.
        result = split_tensors(out, handle.adapter.tensors)
        if len(result) != len(arrays):  # one flat array: a model of one tensor or none
            result = [out.reshape(arrays[0].shape)] if arrays else []
        return result, RoundStats(*(getattr(stats, f) for f, _ in stats._fields_[1:]))

    def close(self) -> None:
        for h in self._trainers.values():
            h.close()
        self._trainers.clear()
        if getattr(self, "_handle", None):
            lib.fedcase_local_data_free(self._handle)
            self._handle = None

    def __enter__(self) -> "LocalData":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
