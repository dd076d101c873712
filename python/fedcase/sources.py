"""An app's local data as the SDK reads it: samples 0..len-1, each an opaque record of bytes
that the app's trainer reads (TorchTrainer: float32 input values, then the target)."""
from __future__ import annotations

import ctypes
import os
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from . import _capi
from ._capi import lib


@runtime_checkable
class SampleSource(Protocol):
    """The app's samples. Used by one session thread at a time; the SDK reads only the
    records its cache does not hold."""

    def __len__(self) -> int:
        """The number of samples, constant for the source's life."""

    def sample_bytes(self, index: int) -> int:
        """The size of sample `index`'s record (what the cache is charged for it)."""

    def read(self, index: int) -> bytes | bytearray | memoryview | np.ndarray:
        """Sample `index`'s whole record."""


class MemorySource:
    """Records held in memory."""

    def __init__(self, records: Sequence[bytes]):
        self.records = list(records)

    def __len__(self) -> int:
        return len(self.records)

    def sample_bytes(self, index: int) -> int:
        return len(self.records[index])

    def read(self, index: int) -> bytes:
        return self.records[index]


def float_record(x: Any, target: Any) -> np.ndarray:
    """A TorchTrainer record: the input's values, then the target's (the class index for
    cross-entropy), as little-endian float32 (the C++ SDK's float_record)."""
    return np.concatenate([np.asarray(x, dtype="<f4").reshape(-1),
                           np.asarray(target, dtype="<f4").reshape(-1)])


class DatasetSource:
    """Any map-style dataset of (input, target) pairs (a torch.utils.data.Dataset, a list of
    numpy pairs) as float32 records. Every sample must have the record size of sample 0."""

    def __init__(self, dataset: Any):
        self.dataset = dataset
        self._record_bytes = float_record(*dataset[0]).nbytes

    def __len__(self) -> int:
        return len(self.dataset)

    def sample_bytes(self, index: int) -> int:
        return self._record_bytes

    def read(self, index: int) -> np.ndarray:
        record = float_record(*self.dataset[index])
        if record.nbytes != self._record_bytes:
            raise ValueError(f"sample {index} has {record.nbytes} bytes, sample 0 "
                             f"{self._record_bytes}")
        return record


class FolderSource:
    """Every regular file under a folder, in path order, one sample a file; read by the C++
    SDK itself (no Python call per sample)."""

    def __init__(self, folder: str | os.PathLike):
        self.handle = _capi.new_handle(lib.fedcase_source_open_folder, _capi.text(folder))

    def __len__(self) -> int:
        return lib.fedcase_source_count(self.handle)

    def close(self) -> None:
        if self.handle:
            lib.fedcase_source_free(self.handle)
            self.handle = None

    def __del__(self) -> None:
        self.close()


def _guarded(default):
    def wrap(callback):
        def run(*args):
            try:
                return callback(*args)
            except BaseException as e:  # noqa: B902 - nothing may cross back into C
                return _capi.fail_callback(e) if default is None else default
        return run
    return wrap


@_capi.SOURCE_COUNT
@_guarded(0)
def _count(user_data):
    return len(_capi.registry.get(user_data))


@_capi.SOURCE_SAMPLE_BYTES
@_guarded(0)
def _sample_bytes(user_data, index):
    return int(_capi.registry.get(user_data).sample_bytes(index))


@_capi.SOURCE_READ
@_guarded(None)
def _read(user_data, index, record):
    data = _capi.registry.get(user_data).read(index)
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data)
        return lib.fedcase_record_assign(record, data.ctypes.data, data.nbytes)
    if not isinstance(data, bytes):
        data = bytes(data)
    return lib.fedcase_record_assign(record, data, len(data))


class SourceHandle:
    """The SDK's handle on a source (internal): a FolderSource's own, or one over a Python
    SampleSource's callbacks."""

    def __init__(self, source: SampleSource | FolderSource):
        self._owned = None
        if isinstance(source, FolderSource):
            self.handle = source.handle
            return
        if not isinstance(source, SampleSource):
            raise TypeError("a sample source needs __len__, sample_bytes and read")
        key = _capi.registry.add(source)
        callbacks = _capi.SourceCallbacks(ctypes.sizeof(_capi.SourceCallbacks), key, _count,
                                          _sample_bytes, _read, _capi.release_callback)
        try:
            self._owned = _capi.new_handle(lib.fedcase_source_new, ctypes.byref(callbacks))
        except BaseException:
            _capi.registry.remove(key)
            raise
        self.handle = self._owned

    def close(self) -> None:
        if self._owned:
            lib.fedcase_source_free(self._owned)
            self._owned = None

    def __del__(self) -> None:
        self.close()
