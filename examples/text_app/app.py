#!/usr/bin/python3
"""An edge app in Python whose model reads text: one device that trains a small text classifier
(nn.Embedding over int64 token ids, then a GRU) with TorchTrainer and a collate function of its
own, on sentences it generates, and scores the model on held-out sentences when the coordinator
asks.

  # once, by whoever creates the job: the model as TorchScript, for `fedcase jobs create --model`
  /usr/bin/python3 app.py export --model model.pt
  # on each device
  /usr/bin/python3 app.py train --port 8080 --token ENROLLMENT_TOKEN --device 0 --devices 3
  # the trained model, as `fedcase models get JOB latest --out trained.pt` exported it
  /usr/bin/python3 app.py check --model trained.pt

The sentences: 16 token ids of a 64-word vocabulary, about one of 4 topics; each topic has 8
words of its own, a sentence holds 4 of its topic's words among 12 common words (ids 32 to 63),
shuffled. A record is the 16 ids and the topic as little-endian int64 values. Device i
generates --samples training sentences and --held-out held-out ones from its own seed; `check`
scores a model on sentences no device has.
"""
import argparse
import os

import numpy as np
import torch

import fedcase
from fedcase.torch_trainer import TorchTrainer

VOCABULARY, TOPICS, LENGTH = 64, 4, 16


class TopicGRU(torch.nn.Module):
    """Token ids [batch, 16] to topic logits [batch, 4]: embedding, one GRU layer, linear."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCABULARY, 16)
        self.gru = torch.nn.GRU(16, 32, batch_first=True)
        self.out = torch.nn.Linear(32, TOPICS)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        _, last = self.gru(self.embedding(tokens))
        return self.out(last[0])


def sentences(count, seed):
    """`count` records (bytes) of the generator above, from `seed`."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        topic = int(rng.integers(0, TOPICS))
        words = np.concatenate([topic * 8 + rng.integers(0, 8, size=4),
                                rng.integers(32, VOCABULARY, size=LENGTH - 4)])
        rng.shuffle(words)
        out.append(np.append(words, topic).astype("<i8").tobytes())
    return out


def collate(records):
    """A batch of records to the module's input (token ids) and the targets (topics)."""
    rows = np.frombuffer(b"".join(records), dtype="<i8").reshape(len(records), LENGTH + 1)
    rows = torch.from_numpy(rows.copy())
    return rows[:, :LENGTH], rows[:, LENGTH]


def export(args):
    torch.manual_seed(args.seed)
    torch.jit.script(TopicGRU()).save(args.model)
    print(f"wrote {args.model}")


def train(args):
    torch.set_num_threads(1)  # devices share the machine's cores in the tests
    session = fedcase.Session(
        host=args.host, port=args.port, enrollment_token=args.token, name=args.name,
        trainer=TorchTrainer(TopicGRU(), collate=collate),
        train_data=fedcase.MemorySource(sentences(args.samples, 1000 + args.device)),
        eval_data=fedcase.MemorySource(sentences(args.held_out, 2000 + args.device)),
        state_dir=args.state_dir, device={"kind": "text-app"})
    print(f"{args.name}: fedcase {fedcase.sdk_version}, {args.samples} sentences, "
          f"connecting to {args.host}:{args.port}", flush=True)
    stats = session.run(seconds=args.seconds, on_progress=lambda s: print(
        f"{args.name}: trained {s.rounds_trained} round(s), {s.updates_accepted} update(s) "
        "accepted", flush=True))
    print(f"{args.name}: stopped after {stats.rounds_trained} round(s), "
          f"{stats.rounds_failed} failed", flush=True)
    session.close()


def check(args):
    """Loads an exported model with torch.jit.load, as a deployment would, and prints its
    accuracy on --samples sentences no device trained or evaluated on."""
    model = torch.jit.load(args.model)
    model.eval()
    tokens, topics = collate(sentences(args.samples, 9999))
    with torch.no_grad():
        accuracy = float((model(tokens).argmax(1) == topics).float().mean())
    print(f"{args.model}: accuracy {accuracy:.4f} on {args.samples} unseen sentences")
    if args.min_accuracy is not None and accuracy < args.min_accuracy:
        raise SystemExit(f"accuracy {accuracy:.4f} is below {args.min_accuracy}")


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
    t.add_argument("--name", default="text-app")
    t.add_argument("--device", type=int, default=0)
    t.add_argument("--devices", type=int, default=1)
    t.add_argument("--samples", type=int, default=600, help="training sentences per device")
    t.add_argument("--held-out", type=int, default=200, help="held-out sentences per device")
    t.add_argument("--state-dir")
    t.add_argument("--seconds", type=float)
    t.set_defaults(run=train)
    c = commands.add_parser("check", help="score an exported model on unseen sentences")
    c.add_argument("--model", required=True)
    c.add_argument("--samples", type=int, default=1000)
    c.add_argument("--min-accuracy", type=float)
    c.set_defaults(run=check)
    args = parser.parse_args()
    if args.command == "train" and not args.token:
        parser.error("--token (or FEDCASE_ENROLLMENT_TOKEN) is required")
    args.run(args)


if __name__ == "__main__":
    main()
