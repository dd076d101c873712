"""The C interface (fedcase_client.h) through ctypes: library loading, structs, prototypes.

Internal: the public API is in the package's other modules. The library is found, in order,
at $FEDCASE_CLIENT_LIBRARY, as libfedcase_client.so.1 on the loader's path (the Debian package
libfedcase-client puts it in /usr/lib), or through ctypes.util.find_library.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading

ABI_VERSION = 1

OK = 0
INVALID_ARGUMENT = 1
INTERNAL = 10
CANCELLED = 11

c_float_p = ctypes.POINTER(ctypes.c_float)
c_uint64_p = ctypes.POINTER(ctypes.c_uint64)


class TrainSettingsStruct(ctypes.Structure):
    _fields_ = [("batch_size", ctypes.c_uint64), ("lr", ctypes.c_double),
                ("momentum", ctypes.c_double), ("weight_decay", ctypes.c_double),
                ("prox_mu", ctypes.c_double)]


SOURCE_COUNT = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p)
SOURCE_SAMPLE_BYTES = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t)
SOURCE_READ = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
TRAINER_PREPARE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
# The parameter pointers are passed as integers (c_void_p) so that the callbacks can wrap them
# in numpy arrays without a copy.
TRAINER_TRAIN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                 ctypes.c_void_p, ctypes.POINTER(TrainSettingsStruct),
                                 ctypes.c_void_p)
TRAINER_EVALUATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p)


class SourceCallbacks(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("user_data", ctypes.c_void_p),
                ("count", SOURCE_COUNT), ("sample_bytes", SOURCE_SAMPLE_BYTES),
                ("read", SOURCE_READ), ("release", RELEASE)]


class TrainerCallbacks(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("user_data", ctypes.c_void_p),
                ("prepare", TRAINER_PREPARE), ("train", TRAINER_TRAIN),
                ("evaluate", TRAINER_EVALUATE), ("release", RELEASE)]


class SessionStatsStruct(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32)] + [
        (name, ctypes.c_uint64) for name in
        ("rounds_trained", "rounds_failed", "updates_accepted", "updates_refused",
         "updates_skipped", "model_downloads", "reconnects")]


class DirectivesStruct(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("sampling", ctypes.c_int),
                ("sample_budget", ctypes.c_uint64), ("epochs", ctypes.c_uint64),
                ("cache_policy", ctypes.c_int), ("cache_budget_bytes", ctypes.c_uint64),
                ("repetition_factor", ctypes.c_double), ("repetition", ctypes.c_int)]


class RoundStatsStruct(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("samples", ctypes.c_uint64),
                ("loss_sum", ctypes.c_double), ("loss_sq_sum", ctypes.c_double),
                ("compute_s", ctypes.c_double), ("cache_hits", ctypes.c_uint64),
                ("cache_misses", ctypes.c_uint64), ("bytes_read", ctypes.c_uint64),
                ("io_s", ctypes.c_double)]


def _load() -> ctypes.CDLL:
    candidates = []
    if os.environ.get("FEDCASE_CLIENT_LIBRARY"):
        candidates.append(os.environ["FEDCASE_CLIENT_LIBRARY"])
    candidates.append("libfedcase_client.so.1")
    found = ctypes.util.find_library("fedcase_client")
    if found:
        candidates.append(found)
    errors = []
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("fedcase: the C library libfedcase_client.so.1 was not found (install "
                      "libfedcase-client or set FEDCASE_CLIENT_LIBRARY): " + "; ".join(errors))


lib = _load()

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_I = ctypes.c_int
_S = ctypes.c_size_t
_U64 = ctypes.c_uint64
_STR = ctypes.c_char_p

# name: (restype, argtypes)
_PROTOTYPES = {
    "fedcase_version": (_STR, []),
    "fedcase_abi_version": (_I, []),
    "fedcase_code_name": (_STR, [_I]),
    "fedcase_last_error": (_STR, []),
    "fedcase_set_error": (None, [_STR]),
    "fedcase_record_assign": (_I, [_P, _P, _S]),
    "fedcase_source_new": (_I, [ctypes.POINTER(SourceCallbacks), _PP]),
    "fedcase_source_open_folder": (_I, [_STR, _PP]),
    "fedcase_source_count": (_S, [_P]),
    "fedcase_source_free": (None, [_P]),
    "fedcase_model_kind": (_STR, [_P]),
    "fedcase_model_loss": (_STR, [_P]),
    "fedcase_model_module": (_P, [_P, ctypes.POINTER(_S)]),
    "fedcase_model_tensor_count": (_S, [_P]),
    "fedcase_model_tensor_name": (_STR, [_P, _S]),
    "fedcase_model_tensor_shape": (c_uint64_p, [_P, _S, ctypes.POINTER(_S)]),
    "fedcase_model_tensor_kind": (ctypes.c_int, [_P, _S]),
    "fedcase_model_tensor_trainable": (ctypes.c_int, [_P, _S]),
    "fedcase_samples_size": (_S, [_P]),
    "fedcase_samples_id": (_S, [_P, _S]),
    "fedcase_samples_read": (_I, [_P, _S, ctypes.POINTER(_P), ctypes.POINTER(_S)]),
    "fedcase_samples_report_losses": (_I, [_P, _S, _P, _S]),
    "fedcase_evaluation_set": (_I, [_P, _U64, ctypes.c_double]),
    "fedcase_evaluation_set_metric": (_I, [_P, _STR, ctypes.c_double]),
    "fedcase_trainer_new": (_I, [ctypes.POINTER(TrainerCallbacks), _PP]),
    "fedcase_trainer_free": (None, [_P]),
    "fedcase_config_new": (_I, [_PP]),
    "fedcase_config_free": (None, [_P]),
    "fedcase_config_set_coordinator": (_I, [_P, _STR, ctypes.c_uint16]),
    "fedcase_config_set_tls": (_I, [_P, _STR, _STR, _STR]),
    "fedcase_config_set_enrollment_token": (_I, [_P, _STR]),
    "fedcase_config_set_name": (_I, [_P, _STR]),
    "fedcase_config_set_state_dir": (_I, [_P, _STR]),
    "fedcase_config_set_seed": (_I, [_P, _U64]),
    "fedcase_config_set_cache_capacity": (_I, [_P, _U64]),
    "fedcase_config_set_poll_wait": (_I, [_P, ctypes.c_double]),
    "fedcase_config_set_device_json": (_I, [_P, _STR]),
    "fedcase_config_set_label": (_I, [_P, _STR, _STR]),
    "fedcase_config_set_trainer": (_I, [_P, _P]),
    "fedcase_config_set_train_data": (_I, [_P, _P]),
    "fedcase_config_set_eval_data": (_I, [_P, _P]),
    "fedcase_session_new": (_I, [_P, _PP]),
    "fedcase_session_run": (_I, [_P]),
    "fedcase_session_stop": (None, [_P]),
    "fedcase_session_stats_get": (_I, [_P, ctypes.POINTER(SessionStatsStruct)]),
    "fedcase_session_client_id": (_U64, [_P]),
    "fedcase_session_free": (None, [_P]),
    "fedcase_local_data_open": (_I, [_P, _U64, _STR, _U64, _PP]),
    "fedcase_local_data_train_round": (_I, [_P, _P, _P, _S, ctypes.POINTER(TrainSettingsStruct),
                                            ctypes.POINTER(DirectivesStruct), _P,
                                            ctypes.POINTER(RoundStatsStruct)]),
    "fedcase_local_data_free": (None, [_P]),
}
for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _function = getattr(lib, _name)
    _function.restype = _restype
    _function.argtypes = _argtypes

if lib.fedcase_abi_version() != ABI_VERSION:
    raise ImportError(f"fedcase: libfedcase_client has ABI {lib.fedcase_abi_version()}, "
                      f"this package speaks {ABI_VERSION}")


class FedcaseError(Exception):
    """A call into the SDK failed: `code` is the C interface's code, `code_name` its name."""

    def __init__(self, code: int, message: str):
        self.code = code
        self.code_name = lib.fedcase_code_name(code).decode()
        super().__init__(f"{message} ({self.code_name})")


def check(code: int) -> None:
    """Raises FedcaseError with the calling thread's last error unless `code` is OK."""
    if code != OK:
        raise FedcaseError(code, lib.fedcase_last_error().decode(errors="replace"))


def new_handle(function, *args) -> ctypes.c_void_p:
    """Calls a fedcase_X_new(..., &out) function and returns the handle."""
    handle = ctypes.c_void_p()
    check(function(*args, ctypes.byref(handle)))
    return handle


def text(value) -> bytes | None:
    return None if value is None else os.fsencode(value) if isinstance(value, os.PathLike) \
        else value.encode()


class Registry:
    """The Python objects behind callbacks' user_data: the C side holds a key, never a
    pointer to a Python object, and its release callback drops the entry."""

    def __init__(self) -> None:
        self._objects: dict[int, object] = {}
        self._next = 1
        self._lock = threading.Lock()

    def add(self, obj: object) -> int:
        with self._lock:
            key = self._next
            self._next += 1
            self._objects[key] = obj
            return key

    def get(self, key: int):
        return self._objects[key]

    def remove(self, key: int) -> None:
        with self._lock:
            self._objects.pop(key, None)


registry = Registry()


@RELEASE
def release_callback(user_data):
    registry.remove(user_data)


def fail_callback(error: BaseException, code: int = INTERNAL) -> int:
    """What a callback returns for an exception of the app's code: the code, and the message
    the SDK reports with it. Logs the traceback (logger "fedcase")."""
    logging.getLogger("fedcase").warning("the app's callback raised", exc_info=error)
    lib.fedcase_set_error(f"{type(error).__name__}: {error}".encode(errors="replace"))
    return code
