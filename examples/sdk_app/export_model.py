#!/usr/bin/python3
"""Exports the example's model as TorchScript and writes demo data files for its devices.

  /usr/bin/python3 export_model.py --model model.pt --data data --devices 3

The model maps 8 sensor readings to 3 class logits. Each device gets data/device-<i>/train/
and data/device-<i>/held-out/: one file per sample, 8 float32 readings then the class as a
float32 (the record format of the SDK's TorchScriptTrainer, docs/client_sdk.md). Devices see
the classes in different proportions (non-IID), as real fleets do.
"""
import argparse
import os
import struct

import torch


class SensorClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(8, 32)
        self.out = torch.nn.Linear(32, 3)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


def write_samples(folder, readings, classes):
    os.makedirs(folder, exist_ok=True)
    for i, (x, y) in enumerate(zip(readings, classes)):
        values = x.tolist() + [float(y)]
        with open(os.path.join(folder, f"sample-{i:05d}.f32"), "wb") as f:
            f.write(struct.pack(f"<{len(values)}f", *values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="model.pt")
    parser.add_argument("--data", default="data")
    parser.add_argument("--devices", type=int, default=3)
    parser.add_argument("--samples", type=int, default=400, help="training samples per device")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.jit.script(SensorClassifier()).save(args.model)

    centers = torch.randn(3, 8) * 1.5
    for device in range(args.devices):
        # A Dirichlet draw of class proportions per device: non-IID data.
        mix = torch.distributions.Dirichlet(torch.full((3,), 0.8)).sample()
        for split, count in (("train", args.samples), ("held-out", args.samples // 4)):
            classes = torch.multinomial(mix, count, replacement=True)
            readings = centers[classes] + torch.randn(count, 8)
            write_samples(os.path.join(args.data, f"device-{device}", split), readings, classes)
    print(f"wrote {args.model} and the data of {args.devices} devices under {args.data}/")


if __name__ == "__main__":
    main()
