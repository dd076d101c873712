"""fedcase: the federated-learning client SDK for Python apps.

Bring a Trainer (or TorchTrainer for any torch.nn.Module) and a SampleSource (DatasetSource
for any dataset of (input, target) pairs, FolderSource, MemorySource), and a Session takes part
in a coordinator's jobs with the C++ SDK's importance sampling, cache and profiling. The
package calls the SDK's C interface (libfedcase_client.so.1) through ctypes; docs/client_sdk.md
has the whole story.

    import fedcase
    from fedcase.torch_trainer import TorchTrainer

    session = fedcase.Session(port=8080, enrollment_token=token,
                              trainer=TorchTrainer(MyNet(), input_shape=(1, 28, 28)),
                              train_data=fedcase.DatasetSource(my_dataset))
    session.run()  # until Ctrl-C
"""
from ._capi import FedcaseError
from ._capi import lib as _lib
from .samples import Samples
from .session import LocalData, Session
from .sources import DatasetSource, FolderSource, MemorySource, SampleSource, float_record
from .trainer import RoundAborted, Trainer
from .types import (CachePolicy, Directives, Evaluation, ModelInfo, Repetition, RoundStats,
                    Sampling, SessionStats, TensorKind, TensorSpec, TrainSettings)

__version__ = "1.0.0"
sdk_version: str = _lib.fedcase_version().decode()

__all__ = [
    "CachePolicy", "DatasetSource", "Directives", "Evaluation", "FedcaseError", "FolderSource",
    "LocalData", "MemorySource", "ModelInfo", "Repetition", "RoundAborted", "RoundStats",
    "SampleSource", "Samples", "Sampling", "Session", "SessionStats", "TensorKind", "TensorSpec",
    "Trainer", "TrainSettings",
    "float_record", "sdk_version",
]
