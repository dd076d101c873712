#!/usr/bin/python3
"""An edge app in Python that fine-tunes a pretrained model's head: the model's convolutional
backbone was trained centrally (here, on the first 5,000 Fashion-MNIST training images, as a
stand-in for a pretrained network), its classifier head is new, and the job trains the head
alone (its `"trainable": ["head"]`). The backbone's weights are frozen: each device downloads
them once, and every round moves the head only.

  # once, by whoever creates the job: pretrain the backbone, add a fresh head, save TorchScript
  /usr/bin/python3 app.py export --model model.pt
  # on each device
  /usr/bin/python3 app.py train --port 8080 --token ENROLLMENT_TOKEN --device 0 --devices 3
  # the fine-tuned model as `fedcase models get JOB latest` exported it
  /usr/bin/python3 app.py check --model trained.pt --pretrained model.pt

Device i of n trains on every n-th of --samples x n training images from image 10,000 on
(images the backbone never saw) and holds out a slice of the test images; `check` scores the
model on test images no device has and checks that its backbone is the pretrained one.
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


class Finetuned(torch.nn.Module):
    """A small CNN backbone (two convolutions) and a linear head over its 64 features."""

    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 64), torch.nn.ReLU())
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.backbone(x))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = struct.unpack(f">{magic & 0xFF}I", f.read(4 * (magic & 0xFF)))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def fashion(split, indices):
    images = read_idx(os.path.join(FASHION_MNIST, f"{split}-images-idx3-ubyte.gz"))[indices]
    labels = read_idx(os.path.join(FASHION_MNIST, f"{split}-labels-idx1-ubyte.gz"))[indices]
    return (torch.from_numpy(images.astype(np.float32) / 255).unsqueeze(1),
            torch.from_numpy(labels.astype(np.int64)))


class FashionSlice(torch.utils.data.Dataset):
    def __init__(self, split, indices):
        self.images, self.labels = fashion(split, indices)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i], int(self.labels[i])


def export(args):
    """Pretrains the whole model for one pass over 5,000 images, then replaces its head with a
    fresh one: the job fine-tunes that head."""
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    model = Finetuned()
    images, labels = fashion("train", np.arange(0, 5000))
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for first in range(0, len(labels), 32):
        loss = torch.nn.functional.cross_entropy(model(images[first:first + 32]),
                                                 labels[first:first + 32])
        sgd.zero_grad()
        loss.backward()
        sgd.step()
    model.head = torch.nn.Linear(64, 10)
    torch.jit.script(model).save(args.model)
    print(f"wrote {args.model}: a pretrained backbone and a fresh head")


def train(args):
    torch.set_num_threads(1)  # devices share the machine's cores in the tests
    train_data = FashionSlice("train", np.arange(10000 + args.device,
                                                 10000 + args.samples * args.devices, args.devices))
    held_out = FashionSlice("t10k", np.arange(args.device * args.held_out,
                                              (args.device + 1) * args.held_out))
    session = fedcase.Session(
        host=args.host, port=args.port, enrollment_token=args.token, name=args.name,
        trainer=TorchTrainer(Finetuned(), input_shape=(1, 28, 28)),
        train_data=fedcase.DatasetSource(train_data), eval_data=fedcase.DatasetSource(held_out),
        state_dir=args.state_dir, device={"kind": "finetune-app"})
    print(f"{args.name}: fedcase {fedcase.sdk_version}, {len(train_data)} training images, "
          f"connecting to {args.host}:{args.port}", flush=True)
    stats = session.run(seconds=args.seconds, on_progress=lambda s: print(
        f"{args.name}: trained {s.rounds_trained} round(s), {s.model_downloads} model "
        "download(s)", flush=True))
    print(f"{args.name}: stopped after {stats.rounds_trained} round(s), "
          f"{stats.rounds_failed} failed", flush=True)
    session.close()


def check(args):
    """The fine-tuned model scores --min-accuracy on unseen test images, and its backbone is
    the pretrained one, bit for bit."""
    model = torch.jit.load(args.model)
    pretrained = torch.jit.load(args.pretrained)
    model.eval()
    mine = dict(model.named_parameters())
    for name, p in pretrained.named_parameters():
        if name.startswith("backbone.") and not torch.equal(mine[name], p):
            raise SystemExit(f"the frozen {name} changed")
    images, labels = fashion("t10k", np.arange(5000, 5000 + args.samples))
    with torch.no_grad():
        accuracy = float((model(images).argmax(1) == labels).float().mean())
    print(f"{args.model}: accuracy {accuracy:.4f} on {args.samples} unseen images; "
          "backbone unchanged")
    if args.min_accuracy is not None and accuracy < args.min_accuracy:
        raise SystemExit(f"accuracy {accuracy:.4f} is below {args.min_accuracy}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    e = commands.add_parser("export", help="pretrain, add a fresh head, save TorchScript")
    e.add_argument("--model", default="model.pt")
    e.add_argument("--seed", type=int, default=7)
    e.set_defaults(run=export)
    t = commands.add_parser("train", help="take part in the job as one device")
    t.add_argument("--host", default="127.0.0.1")
    t.add_argument("--port", type=int, required=True)
    t.add_argument("--token", default=os.environ.get("FEDCASE_ENROLLMENT_TOKEN"))
    t.add_argument("--name", default="finetune-app")
    t.add_argument("--device", type=int, default=0)
    t.add_argument("--devices", type=int, default=1)
    t.add_argument("--samples", type=int, default=1000, help="training images per device")
    t.add_argument("--held-out", type=int, default=300, help="held-out images per device")
    t.add_argument("--state-dir")
    t.add_argument("--seconds", type=float)
    t.set_defaults(run=train)
    c = commands.add_parser("check", help="score the fine-tuned model; check its backbone")
    c.add_argument("--model", required=True)
    c.add_argument("--pretrained", required=True)
    c.add_argument("--samples", type=int, default=1000)
    c.add_argument("--min-accuracy", type=float)
    c.set_defaults(run=check)
    args = parser.parse_args()
    if args.command == "train" and not args.token:
        parser.error("--token (or FEDCASE_ENROLLMENT_TOKEN) is required")
    args.run(args)


if __name__ == "__main__":
    main()
