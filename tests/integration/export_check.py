#!/usr/bin/python3
"""Reads a model the coordinator exported, as a PyTorch or numpy user would, and scores it.

Loads the TorchScript export with torch.jit.load and the npz export with numpy.load, checks
that both hold the same tensors under the same names, scores the module on a folder of
sample records (float32 inputs, then the class index, as docs/client_sdk.md describes; files
in name order, as the coordinator reads a server dataset) and prints one JSON object:
{"tensors", "equal", "samples", "accuracy", "loss"}.
"""
import argparse
import json
import os

import numpy
import torch


def records(folder, shape, limit):
    names = sorted(os.listdir(folder))[:limit]
    width = 1
    for d in shape:
        width *= d
    inputs, targets = [], []
    for name in names:
        values = numpy.fromfile(os.path.join(folder, name), dtype="<f4")
        inputs.append(values[:width].reshape(shape))
        targets.append(int(values[width]))
    return numpy.stack(inputs), numpy.array(targets, dtype=numpy.int64)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--torchscript", required=True)
    parser.add_argument("--npz", required=True)
    parser.add_argument("--records", required=True)
    parser.add_argument("--shape", default="1,28,28")
    parser.add_argument("--limit", type=int, default=10000)
    args = parser.parse_args()

    module = torch.jit.load(args.torchscript)
    module.eval()
    parameters = dict(module.named_parameters())
    arrays = numpy.load(args.npz)
    equal = sorted(parameters) == sorted(arrays.files) and all(
        numpy.array_equal(parameters[name].detach().numpy(), arrays[name]) for name in arrays.files)

    shape = [int(d) for d in args.shape.split(",")]
    x, y = records(args.records, shape, args.limit)
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for start in range(0, len(y), 128):
            inputs = torch.from_numpy(x[start:start + 128])
            targets = torch.from_numpy(y[start:start + 128])
            logits = module(inputs)
            loss_sum += torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()
            correct += int((logits.argmax(1) == targets).sum())
    print(json.dumps({"tensors": len(arrays.files), "equal": bool(equal), "samples": len(y),
                      "accuracy": correct / len(y), "loss": loss_sum / len(y)}))


if __name__ == "__main__":
    main()
