#!/usr/bin/python3
"""An edge app in Python on the fedcase package: one device that trains its own PyTorch CNN on
its slice of Fashion-MNIST with TorchTrainer, and scores the model on held-out images when the
coordinator asks.

  # once, by whoever creates the job: the model as TorchScript, for `fedcase jobs create --model`
  /usr/bin/python3 app.py export --model model.pt
  # on each device
  /usr/bin/python3 app.py train --port 8080 --token ENROLLMENT_TOKEN --device 0 --devices 3

Device i of n trains on every n-th of the first --samples x n training images starting at i, and
holds out a slice of the test images. Runs until Ctrl-C or SIGTERM (or --seconds), printing a
line whenever it trained a round.
"""
import argparse
import gzip
import os
import struct

import numpy as np
import torch

import fedcase
from fedcase.torch_trainer import TorchTrainer

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


class FashionCNN(torch.nn.Module):
    """The demo's CNN (fedcase's built-in "cnn"): two 5x5 convolutions, two dense layers."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = torch.nn.Linear(32 * 7 * 7, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def read_idx(path):
    """An IDX file of Fashion-MNIST (gzip) as a numpy array."""
    with gzip.open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = struct.unpack(f">{magic & 0xFF}I", f.read(4 * (magic & 0xFF)))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


class FashionSlice(torch.utils.data.Dataset):
    """Images as float tensors [1, 28, 28] in [0, 1] with their class."""

    def __init__(self, split, indices):
        images = read_idx(os.path.join(FASHION_MNIST, f"{split}-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(FASHION_MNIST, f"{split}-labels-idx1-ubyte.gz"))
        self.images = torch.from_numpy(images[indices].astype(np.float32) / 255).unsqueeze(1)
        self.labels = labels[indices].astype(np.int64)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], self.labels[i]


def export(args):
    torch.manual_seed(args.seed)
    torch.jit.script(FashionCNN()).save(args.model)
    print(f"wrote {args.model}")


def train(args):
    torch.set_num_threads(1)  # devices share the machine's cores in the tests
    train_data = FashionSlice("train", np.arange(args.device, args.samples * args.devices,
                                                 args.devices))
    held_out = FashionSlice("t10k", np.arange(args.device * args.held_out,
                                              (args.device + 1) * args.held_out))
    session = fedcase.Session(
        host=args.host, port=args.port, enrollment_token=args.token, name=args.name,
        trainer=TorchTrainer(FashionCNN(), input_shape=(1, 28, 28)),
        train_data=fedcase.DatasetSource(train_data), eval_data=fedcase.DatasetSource(held_out),
        state_dir=args.state_dir, device={"kind": "python-app"})
    print(f"{args.name}: fedcase {fedcase.sdk_version}, {len(train_data)} training images, "
          f"connecting to {args.host}:{args.port}", flush=True)
    stats = session.run(seconds=args.seconds, on_progress=lambda s: print(
        f"{args.name}: trained {s.rounds_trained} round(s), {s.updates_accepted} update(s) "
        "accepted", flush=True))
    print(f"{args.name}: stopped after {stats.rounds_trained} round(s), "
          f"{stats.rounds_failed} failed", flush=True)
    session.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    e = commands.add_parser("export", help="write the model as TorchScript")
    e.add_argument("--model", default="model.pt")
    e.add_argument("--seed", type=int, default=7)
    e.set_defaults(run=export)
    t = commands.add_parser("train", help="take part in the job as one device")
    t.add_argument("--host", default="127.0.0.1")
    t.add_argument("--port", type=int, required=True)
    t.add_argument("--token", default=os.environ.get("FEDCASE_ENROLLMENT_TOKEN"))
    t.add_argument("--name", default="python-app")
    t.add_argument("--device", type=int, default=0)
    t.add_argument("--devices", type=int, default=1)
    t.add_argument("--samples", type=int, default=1000, help="training images per device")
    t.add_argument("--held-out", type=int, default=300, help="held-out images per device")
    t.add_argument("--state-dir")
    t.add_argument("--seconds", type=float)
    t.set_defaults(run=train)
    args = parser.parse_args()
    if args.command == "train" and not args.token:
        parser.error("--token (or FEDCASE_ENROLLMENT_TOKEN) is required")
    args.run(args)


if __name__ == "__main__":
    main()
