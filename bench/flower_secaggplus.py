#!/usr/bin/python3
"""Flower's SecAgg+ workflow, unmodified, timed the way bench/secagg_bench times fedcase's.

What runs: Flower's own `SecAggPlusWorkflow` (server side, inside Flower's `DefaultWorkflow`
with Flower's `FedAvg` strategy) and its `secaggplus_mod` (client side, around a `ClientApp`
whose `fit` returns a fixed synthetic update), for one round of N clients over a model of P
float32 parameters. Only the transport is this script's: `DirectGrid` below, a Flower `Grid`
that writes every message to Flower's own protobuf (`flwr.common.serde.message_to_proto`),
hands the bytes to the destination node's `ClientApp` in this process, and reads its reply
back the same way: what the SuperLink and the SuperNodes would carry, without sockets, which
is also how secagg_bench runs fedcase's library (every message through its wire text, no
sockets). The clients run one at a time in the server's thread, so that every CPU second is
attributed to one side:

  - client CPU s: the process CPU time of one client's handling of its messages (reading the
    message, the ClientApp with secaggplus_mod, writing its reply), the mean over clients;
  - client bytes: what one client receives and sends (serialised messages), the mean;
  - server CPU s and wall s: the fit workflow's (one round: configure, the four stages,
    aggregate_fit) less the clients' share, so only Flower's server-side work;
  - the same round without secure aggregation (Flower's `default_fit_workflow`), timed alike.

The last line of output is one JSON object with every figure.

Setup on Debian 12 (PyPI unreachable; Flower from source):
  apt-get install -y --no-install-recommends python3-numpy python3-cryptography \
      python3-pycryptodome python3-protobuf python3-grpcio python3-rich python3-typer \
      python3-tomli python3-pathspec protobuf-compiler protobuf-compiler-grpc
  # Flower's source (adap/flower, commit fdef7afb, Flower 1.28.0) in FLOWER_SRC:
  git --git-dir=<flower clone>/.git archive fdef7afb framework | tar -x -C "$FLOWER_SRC"
  # Debian's protobuf runtime is 3.21 and grpcio 1.51: regenerate Flower's protobuf modules
  # from its .proto files with Debian's compilers (the generated code only; no Flower source
  # changes):
  cd "$FLOWER_SRC/framework" && protoc --python_out=py -I proto proto/flwr/proto/*.proto && \
    protoc --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin \
      --grpc_python_out=py -I proto proto/flwr/proto/*.proto
Run (Debian's interpreter, which sees Debian's packages):
  FLOWER_SRC=/work/flower-src /usr/bin/python3 bench/flower_secaggplus.py \
      [--clients 50] [--params 100000] [--plain 1]
The default (N = 50, P = 100k) takes about 15 s of CPU; N in {50, 100, 200, 500, 1000}.
Debian names pycryptodome's package `Cryptodome` (upstream `Crypto`): this script aliases it.

Flower's parameters: num_shares = k + 1 (a client's k neighbours and itself) and
reconstruction_threshold = t, with k and t the values fedcase derives for the same N (5%
dropouts, 5% corrupt clients, semi-malicious: docs/secure_aggregation.md), modulus 2^32, and
Flower's default clipping (8) and quantisation range (2^22).
"""

import argparse
import importlib
import json
import os
import resource
import sys
import time
import types
import uuid

import numpy as np

# k and t as fedcase's secagg::derive_graph_params gives them for N invitees (5%, 5%,
# semi-malicious, sigma 40, eta 20); see docs/secure_aggregation.md, "Degree k and threshold t".
DEGREE_THRESHOLD = {
    50: (14, 9),
    100: (22, 14),
    200: (30, 21),
    500: (44, 31),
    1000: (52, 37),
}


def import_flower():
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    sys.path.insert(0, os.path.join(os.environ.get("FLOWER_SRC", "/work/flower-src"),
                                    "framework", "py"))
    if "Crypto" not in sys.modules:
        sys.modules["Crypto"] = importlib.import_module("Cryptodome")
    # flwr's package imports its command line (flwr.cli), written for typer >= 0.12, whose
    # Argument and Option need no default; Debian's typer 0.7 wants one. Nothing here runs it.
    import typer

    for name in ("Argument", "Option"):
        original = getattr(typer, name)
        setattr(typer, name,
                lambda *a, _original=original, **k: _original(*(a or (...,)), **k))
    # The same for the SuperLink's SQL state (SQLAlchemy 2 exports Engine at the top; Debian's
    # 1.4 has it in sqlalchemy.engine). Nothing here opens a database.
    import sqlalchemy
    import sqlalchemy.engine

    if not hasattr(sqlalchemy, "Engine"):
        sqlalchemy.Engine = sqlalchemy.engine.Engine
    # The legacy gRPC servicer imports `iterators` (PyPI only); nothing here runs a server.
    if "iterators" not in sys.modules:
        stub = types.ModuleType("iterators")

        class TimeoutIterator:  # pylint: disable=too-few-public-methods
            def __init__(self, *args, **kwargs):
                raise RuntimeError("iterators.TimeoutIterator is not available here")

        stub.TimeoutIterator = TimeoutIterator
        sys.modules["iterators"] = stub
    import logging

    import flwr  # noqa: F401
    from flwr.common.logger import FLOWER_LOGGER

    FLOWER_LOGGER.setLevel(logging.WARNING)


def parse_list(text):
    values = [int(v) for v in text.split(",")]
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError("a list of positive integers")
    return values


class Meter:
    """CPU, wall time and bytes of the clients' side of a round."""

    def __init__(self):
        self.cpu = 0.0
        self.wall = 0.0
        self.bytes_in = 0
        self.bytes_out = 0

    def reset(self):
        self.__init__()


def make_grid_class():
    from flwr.common import Message
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.common.serde import message_from_proto, message_to_proto
    from flwr.proto.message_pb2 import Message as ProtoMessage  # pylint: disable=E0611
    from flwr.server.grid import Grid

    class DirectGrid(Grid):
        """A Flower Grid whose nodes are ClientApps in this process, reached through
        Flower's protobuf messages; they run one at a time, timed on `meter`."""

        def __init__(self, run, apps, contexts, meter):
            self._run = run
            self._apps = apps
            self._contexts = contexts
            self._meter = meter
            self._replies = {}

        def set_run(self, run):
            self._run = run

        @property
        def run(self):
            return self._run

        def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
            return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

        def get_node_ids(self):
            return list(self._apps)

        def _deliver(self, message):
            message.metadata.__dict__["_run_id"] = self._run.run_id
            message.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
            message.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            wire = message_to_proto(message).SerializeToString()
            node = message.metadata.dst_node_id
            cpu0, wall0 = time.process_time(), time.perf_counter()
            received = message_from_proto(ProtoMessage.FromString(wire))
            reply = self._apps[node](received, self._contexts[node])
            reply.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            reply_wire = message_to_proto(reply).SerializeToString()
            self._meter.cpu += time.process_time() - cpu0
            self._meter.wall += time.perf_counter() - wall0
            self._meter.bytes_in += len(wire)
            self._meter.bytes_out += len(reply_wire)
            return message_from_proto(ProtoMessage.FromString(reply_wire))

        def push_messages(self, messages):
            ids = []
            for message in messages:
                reply = self._deliver(message)
                self._replies[message.metadata.message_id] = reply
                ids.append(message.metadata.message_id)
            return ids

        def pull_messages(self, message_ids):
            return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

        def send_and_receive(self, messages, *, timeout=None):
            return self.pull_messages(self.push_messages(messages))

    return DirectGrid


def run_round(n, params, secure, meter):
    """One round of n clients over params parameters; its figures."""
    from flwr.client import ClientApp, NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.common import Context, RecordDict, ndarrays_to_parameters
    from flwr.common.typing import Run
    from flwr.server import ServerConfig
    from flwr.server.compat.legacy_context import LegacyContext
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
    from flwr.server.workflow.default_workflows import default_fit_workflow

    rng = np.random.default_rng(7)
    initial = [np.zeros(params, dtype=np.float32)]

    class SyntheticClient(NumPyClient):
        def __init__(self, node_id):
            self.delta = np.random.default_rng(node_id).normal(0, 0.01, params).astype(np.float32)
            self.examples = 100 + node_id % 7 * 25

        def fit(self, parameters, config):
            return [parameters[0] + self.delta], self.examples, {}

    def client_fn(context):
        return SyntheticClient(context.node_id).to_client()

    app = ClientApp(client_fn=client_fn, mods=[secaggplus_mod] if secure else [])
    node_ids = [int(rng.integers(1, 2**62)) for _ in range(n)]
    run = Run.create_empty(1)
    apps = {node: app for node in node_ids}
    contexts = {node: Context(1, node, {}, RecordDict(), {}) for node in node_ids}
    grid = make_grid_class()(run, apps, contexts, meter)

    strategy = FedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n,
                      min_available_clients=n, initial_parameters=ndarrays_to_parameters(initial))
    context = LegacyContext(Context(1, 0, {}, RecordDict(), {}),
                            config=ServerConfig(num_rounds=1), strategy=strategy)
    degree, threshold = DEGREE_THRESHOLD[n]
    inner = (SecAggPlusWorkflow(num_shares=degree + 1, reconstruction_threshold=threshold,
                                modulus_range=2**32)
             if secure else default_fit_workflow)
    timing = {}

    def timed_fit(grid_, context_):
        meter.reset()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        inner(grid_, context_)
        timing["cpu"] = time.process_time() - cpu0
        timing["wall"] = time.perf_counter() - wall0

    DefaultWorkflow(fit_workflow=timed_fit, evaluate_workflow=lambda g, c: None)(grid, context)
    out = {
        "clients": n,
        "params": params,
        "secure": secure,
        "server_cpu_s": timing["cpu"] - meter.cpu,
        "server_wall_s": timing["wall"] - meter.wall,
        "round_wall_s": timing["wall"],
        "client_cpu_s": meter.cpu / n,
        "client_received_bytes": meter.bytes_in / n,
        "client_sent_bytes": meter.bytes_out / n,
        "process_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if secure:
        out["num_shares"] = degree + 1
        out["threshold"] = threshold
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=parse_list, default=[50])
    parser.add_argument("--params", type=parse_list, default=[100000])
    parser.add_argument("--plain", type=int, default=1,
                        help="1: also the same round without secure aggregation")
    args = parser.parse_args()
    for n in args.clients:
        if n not in DEGREE_THRESHOLD:
            parser.error(f"N must be one of {sorted(DEGREE_THRESHOLD)}")
    import_flower()
    import flwr

    rounds = []
    meter = Meter()
    for params in args.params:
        for n in args.clients:
            secure = run_round(n, params, True, meter)
            if args.plain:
                plain = run_round(n, params, False, meter)
                secure["plain_server_cpu_s"] = plain["server_cpu_s"]
                secure["plain_server_wall_s"] = plain["server_wall_s"]
                secure["plain_client_cpu_s"] = plain["client_cpu_s"]
                secure["server_cpu_over_plain"] = secure["server_cpu_s"] / plain["server_cpu_s"]
            print(json.dumps(secure), flush=True)
            rounds.append(secure)
    print(json.dumps({"bench": "flower_secaggplus",
                      "flower": flwr.__version__, "rounds": rounds}))


if __name__ == "__main__":
    main()
