"""The samples of one training pass or evaluation, as the SDK hands them to a trainer."""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from . import _capi
from ._capi import lib


class Samples:
    """Positions 0..len-1 in the order the SDK wants them trained (a sample may repeat).

    Valid only during the trainer call it was given to; not thread-safe."""

    def __init__(self, handle: int):
        self._handle = ctypes.c_void_p(handle)
        self._size = lib.fedcase_samples_size(self._handle)
        self.bytes_copied = 0  # record bytes copied into Python objects

    def __len__(self) -> int:
        return self._size

    def id(self, position: int) -> int:
        """The sample id at `position` (an index into the app's source)."""
        if not 0 <= position < self._size:
            raise IndexError(f"position {position} of {self._size}")
        return lib.fedcase_samples_id(self._handle, position)

    def ids(self) -> list[int]:
        """The ids of every position, in order: the round's read plan."""
        return [lib.fedcase_samples_id(self._handle, p) for p in range(self._size)]

    def read(self, position: int) -> bytes:
        """The record at `position`, read through the SDK's cache (a copy)."""
        data = ctypes.c_void_p()
        size = ctypes.c_size_t()
        _capi.check(lib.fedcase_samples_read(self._handle, position, ctypes.byref(data),
                                             ctypes.byref(size)))
        self.bytes_copied += size.value
        return ctypes.string_at(data, size.value) if size.value else b""

    def read_batch(self, first: int, count: int) -> np.ndarray:
        """The records of positions [first, first + count) as one uint8 array of `count` rows,
        each record copied once into it. Raises ValueError if the records differ in size."""
        data = ctypes.c_void_p()
        size = ctypes.c_size_t()
        rows = None
        for k in range(count):
            _capi.check(lib.fedcase_samples_read(self._handle, first + k, ctypes.byref(data),
                                                 ctypes.byref(size)))
            if rows is None:
                rows = np.empty((count, size.value), dtype=np.uint8)
            elif size.value != rows.shape[1]:
                raise ValueError(f"the record at {first + k} has {size.value} bytes, the one "
                                 f"at {first} {rows.shape[1]}")
            if size.value:
                ctypes.memmove(rows.ctypes.data + k * size.value, data, size.value)
        if rows is None:
            return np.empty((0, 0), dtype=np.uint8)
        self.bytes_copied += rows.nbytes
        return rows

    def report_losses(self, first: int, losses: Sequence[float] | np.ndarray) -> None:
        """The per-sample training losses of positions [first, first + len(losses)), once per
        batch right after its optimizer step: they set the sampler's weights and the cache's
        keys. Raises FedcaseError (and the round fails) for a loss that is not finite and
        >= 0, or positions outside the round."""
        values = np.ascontiguousarray(losses, dtype=np.float32).reshape(-1)
        _capi.check(lib.fedcase_samples_report_losses(self._handle, first,
                                                      values.ctypes.data, values.size))
