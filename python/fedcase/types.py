"""The plain values that cross the SDK: what a task says about the model and its training,
what a trainer reports, and the session's and a round's figures."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field


class TensorKind(enum.IntEnum):
    """What a tensor of the model is (the C API's FEDCASE_PARAMETER, ...)."""
    PARAMETER = 0       # trained by gradients
    FLOAT_BUFFER = 1    # state the model updates itself: BatchNorm's running statistics
    INTEGER_BUFFER = 2  # a counter (num_batches_tracked), carried as whole float32 values


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of the job's model: its name, shape, kind, and whether the job trains it (a job
    that fine-tunes part of its model freezes the others: leave them as they are)."""
    name: str
    shape: tuple[int, ...]
    kind: TensorKind = TensorKind.PARAMETER
    trainable: bool = True

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class ModelInfo:
    """The job's model as a task describes it (the C++ SDK's ModelInfo)."""
    kind: str                  # "cnn" | "mlp" (built-in), "torchscript" or "blob"
    loss: str                  # "cross_entropy" | "mse"
    tensors: tuple[TensorSpec, ...]  # parameters, then buffers, in the order they cross the
                                     # trainer
    module: bytes | None = None      # the TorchScript module's file, for "torchscript"

    @property
    def parameter_count(self) -> int:
        return sum(t.size for t in self.tensors)


@dataclass(frozen=True)
class TrainSettings:
    """How the task asks the model to be trained (local SGD)."""
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0  # FedProx: adds mu/2 * ||w - w_start||^2 to the loss when > 0


@dataclass
class Evaluation:
    """A model's score on held-out samples: their number, the mean loss and named metrics
    (1 to 64 letters, digits or '_'; finite values >= 0; "accuracy" in [0, 1])."""
    samples: int
    loss: float
    metrics: dict[str, float] = field(default_factory=dict)


class Sampling(enum.IntEnum):
    UNIFORM = 0     # shuffled passes over the samples
    IMPORTANCE = 1  # SHADE's draws, weighted by loss rank


class CachePolicy(enum.IntEnum):
    NONE = 0
    LRU = 1
    IMPORTANCE = 2  # SHADE's cache: the most important records


class Repetition(enum.IntEnum):
    FIXED = 0     # each cached draw serves up to repetition_factor uses
    ADAPTIVE = 1  # the FedCaSe artifact's rule, from the round's hits and batch size


@dataclass(frozen=True)
class Directives:
    """What a task asks of the local data (a local round's plan)."""
    sampling: Sampling = Sampling.UNIFORM
    sample_budget: int = 0  # samples per round, repeats included; 0 = epochs x samples
    epochs: int = 1
    cache_policy: CachePolicy = CachePolicy.NONE
    cache_budget_bytes: int = 0
    repetition_factor: float = 1.0  # uses each cached sample may serve within the round (>= 1)
    repetition: Repetition = Repetition.FIXED  # ADAPTIVE: the artifact's rule instead


@dataclass(frozen=True)
class RoundStats:
    """One local round's figures."""
    samples: int
    loss_sum: float
    loss_sq_sum: float
    compute_s: float  # inside the trainer, reads excluded
    cache_hits: int
    cache_misses: int
    bytes_read: int
    io_s: float


@dataclass(frozen=True)
class SessionStats:
    """A session's counters."""
    rounds_trained: int
    rounds_failed: int  # the trainer or the data failed the round: nothing was sent
    updates_accepted: int
    updates_refused: int
    updates_skipped: int
    model_downloads: int
    reconnects: int
