#!/usr/bin/python3
"""An edge app in Python whose model has BatchNorm: one device that trains a MobileNet-style CNN
(depthwise-separable convolutions, each followed by BatchNorm) on its slice of Fashion-MNIST
with TorchTrainer, and scores the model on held-out images when the coordinator asks. The
BatchNorm layers' running statistics are buffers: they travel with the parameters, are averaged
by the coordinator and are part of every committed and exported model.

  # once, by whoever creates the job: the model as TorchScript, and held-out images for the
  # coordinator's own evaluation (a folder under its datasets_dir)
  /usr/bin/python3 app.py export --model model.pt --server-data DATASETS/fmnist-held-out
  # on each device
  /usr/bin/python3 app.py train --port 8080 --token ENROLLMENT_TOKEN --device 0 --devices 3
  # a trained model, as `fedcase models get JOB latest` exported it (TorchScript and npz),
  # scored in eval mode on the coordinator's held-out images
  /usr/bin/python3 app.py check --model trained.pt --npz trained.npz \
      --server-data DATASETS/fmnist-held-out --expect 0.81

Device i of n trains on every n-th of the first --samples x n training images starting at i and
holds out a slice of the first 5000 test images; the coordinator's held-out images are test
images from 5000 on, which no device has.
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
SERVER_FIRST = 5000  # the coordinator's held-out images start here in the test set


def separable(channels_in, channels_out, stride):
    """A depthwise 3x3 convolution and a pointwise 1x1 one, each with BatchNorm and ReLU."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(channels_in, channels_in, 3, stride, 1, groups=channels_in, bias=False),
        torch.nn.BatchNorm2d(channels_in), torch.nn.ReLU(),
        torch.nn.Conv2d(channels_in, channels_out, 1, bias=False),
        torch.nn.BatchNorm2d(channels_out), torch.nn.ReLU())


class MobileNetLike(torch.nn.Module):
    """Images [batch, 1, 28, 28] in [0, 1] to class logits [batch, 10]: a 3x3 stem, three
    depthwise-separable blocks (two of stride 2), global average pooling, one linear layer."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3, 1, 1, bias=False),
                                        torch.nn.BatchNorm2d(16), torch.nn.ReLU())
        self.blocks = torch.nn.Sequential(separable(16, 32, 2), separable(32, 64, 2),
                                          separable(64, 64, 1))
        self.classifier = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.classifier(self.blocks(self.stem(x)).mean((2, 3)))


def read_idx(path):
    """An IDX file of Fashion-MNIST (gzip) as a numpy array."""
    with gzip.open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = struct.unpack(f">{magic & 0xFF}I", f.read(4 * (magic & 0xFF)))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def fashion(split, indices):
    """Images as a float tensor [n, 1, 28, 28] in [0, 1], and their classes (int64)."""
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
    torch.manual_seed(args.seed)
    torch.jit.script(MobileNetLike()).save(args.model)
    print(f"wrote {args.model}")
    if args.server_data:
        # One sample record a file: 784 float32 pixels, then the class as a float32.
        os.makedirs(args.server_data, exist_ok=True)
        images, labels = fashion("t10k", np.arange(SERVER_FIRST, SERVER_FIRST + args.server_samples))
        for i in range(len(labels)):
            record = np.append(images[i].numpy().ravel(), np.float32(labels[i])).astype("<f4")
            with open(os.path.join(args.server_data, f"{i:05d}.rec"), "wb") as f:
                f.write(record.tobytes())
        print(f"wrote {len(labels)} held-out records to {args.server_data}")


def train(args):
    torch.set_num_threads(1)  # devices share the machine's cores in the tests
    train_data = FashionSlice("train", np.arange(args.device, args.samples * args.devices,
                                                 args.devices))
    held_out = FashionSlice("t10k", np.arange(args.device * args.held_out,
                                              (args.device + 1) * args.held_out))
    session = fedcase.Session(
        host=args.host, port=args.port, enrollment_token=args.token, name=args.name,
        trainer=TorchTrainer(MobileNetLike(), input_shape=(1, 28, 28)),
        train_data=fedcase.DatasetSource(train_data), eval_data=fedcase.DatasetSource(held_out),
        state_dir=args.state_dir, device={"kind": "mobilenet-app"})
    print(f"{args.name}: fedcase {fedcase.sdk_version}, {len(train_data)} training images, "
          f"connecting to {args.host}:{args.port}", flush=True)
    stats = session.run(seconds=args.seconds, on_progress=lambda s: print(
        f"{args.name}: trained {s.rounds_trained} round(s), {s.updates_accepted} update(s) "
        "accepted", flush=True))
    print(f"{args.name}: stopped after {stats.rounds_trained} round(s), "
          f"{stats.rounds_failed} failed", flush=True)
    session.close()


def read_records(folder):
    """The server dataset's records (in path order, as the coordinator reads them) as images
    and classes."""
    rows = [np.fromfile(os.path.join(folder, name), dtype="<f4")
            for name in sorted(os.listdir(folder))]
    values = np.stack(rows)
    return (torch.from_numpy(values[:, :784].copy()).view(-1, 1, 28, 28),
            torch.from_numpy(values[:, 784].astype(np.int64)))


def accuracy(model, images, labels):
    model.eval()  # as a deployment runs it: BatchNorm uses its running statistics
    with torch.no_grad():
        return float((model(images).argmax(1) == labels).float().mean())


def check(args):
    """Scores the exported model (TorchScript, and the npz loaded into a fresh module) in eval
    mode on the coordinator's held-out images, and compares with the accuracy the job reported
    for that version."""
    images, labels = read_records(args.server_data)
    scores = {"torchscript": accuracy(torch.jit.load(args.model), images, labels)}
    if args.npz:
        module = MobileNetLike()
        with np.load(args.npz) as arrays:
            module.load_state_dict({name: torch.from_numpy(arrays[name]) for name in arrays.files})
        scores["npz"] = accuracy(module, images, labels)
    for kind, score in scores.items():
        print(f"{kind}: eval-mode accuracy {score:.4f} on {len(labels)} held-out images"
              + (f", the job reported {args.expect:.4f}" if args.expect is not None else ""))
        if args.expect is not None and abs(score - args.expect) > args.tolerance:
            raise SystemExit(f"the exported {kind} model scores {score:.4f}, the job reported "
                             f"{args.expect:.4f} for it")
        if args.min_accuracy is not None and score < args.min_accuracy:
            raise SystemExit(f"the exported {kind} model scores {score:.4f}, below "
                             f"{args.min_accuracy}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    e = commands.add_parser("export", help="write the model as TorchScript")
    e.add_argument("--model", default="model.pt")
    e.add_argument("--seed", type=int, default=7)
    e.add_argument("--server-data", help="also write held-out records to this folder")
    e.add_argument("--server-samples", type=int, default=1000)
    e.set_defaults(run=export)
    t = commands.add_parser("train", help="take part in the job as one device")
    t.add_argument("--host", default="127.0.0.1")
    t.add_argument("--port", type=int, required=True)
    t.add_argument("--token", default=os.environ.get("FEDCASE_ENROLLMENT_TOKEN"))
    t.add_argument("--name", default="mobilenet-app")
    t.add_argument("--device", type=int, default=0)
    t.add_argument("--devices", type=int, default=1)
    t.add_argument("--samples", type=int, default=1000, help="training images per device")
    t.add_argument("--held-out", type=int, default=300, help="held-out images per device")
    t.add_argument("--state-dir")
    t.add_argument("--seconds", type=float)
    t.set_defaults(run=train)
    c = commands.add_parser("check", help="score an exported model in eval mode")
    c.add_argument("--model", required=True)
    c.add_argument("--npz")
    c.add_argument("--server-data", required=True)
    c.add_argument("--expect", type=float, help="the accuracy the job reported")
    c.add_argument("--tolerance", type=float, default=0.01)
    c.add_argument("--min-accuracy", type=float)
    c.set_defaults(run=check)
    args = parser.parse_args()
    if args.command == "train" and not args.token:
        parser.error("--token (or FEDCASE_ENROLLMENT_TOKEN) is required")
    args.run(args)


if __name__ == "__main__":
    main()
