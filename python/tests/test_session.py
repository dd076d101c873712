"""The fedcase package against a live coordinator (the build's binary on 127.0.0.1, port 0): a
trainer that raises fails only its round, and Ctrl-C stops a session cleanly."""
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

import torch

import fedcase
from fedcase.torch_trainer import TorchTrainer

SOURCE_DIR = os.environ["FEDCASE_SOURCE_DIR"]


class Sensor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(8, 16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


def sensor_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(3, 8, generator=g) * 2
    labels = torch.randint(0, 3, (n,), generator=g)
    return [(centers[y] + torch.randn(8, generator=g), int(y)) for y in labels]


class Coordinator:
    """A coordinator process with a fresh SQLite file, and its admin CLI."""

    def __init__(self, folder):
        with open(os.path.join(SOURCE_DIR, "configs/coordinator.json")) as f:
            config = json.load(f)
        self.admin_token = secrets.token_hex(16)
        self.enrollment_token = secrets.token_hex(16)
        port_file = os.path.join(folder, "port")
        config.update(port=0, port_file=port_file, database=os.path.join(folder, "fedcase.db"),
                      admin_token=self.admin_token, enrollment_token=self.enrollment_token,
                      eval_samples=100)
        path = os.path.join(folder, "coordinator.json")
        with open(path, "w") as f:
            json.dump(config, f)
        self.log = open(os.path.join(folder, "coordinator.log"), "w")
        self.process = subprocess.Popen([os.environ["FEDCASE_COORDINATOR_BIN"], "--config", path],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            if os.path.exists(port_file) and os.path.getsize(port_file):
                break
            time.sleep(0.05)
        with open(port_file) as f:
            self.port = int(f.read())
        self.env = dict(os.environ, FEDCASE_URL=f"http://127.0.0.1:{self.port}",
                        FEDCASE_TOKEN=self.admin_token)

    def cli(self, *args):
        return json.loads(subprocess.run([os.environ["FEDCASE_CLI_BIN"], *args, "--json"],
                                         env=self.env, check=True, capture_output=True,
                                         text=True).stdout)

    def create_sensor_job(self, folder, rounds):
        model = os.path.join(folder, "model.pt")
        torch.manual_seed(1)
        torch.jit.script(Sensor()).save(model)
        job = os.path.join(folder, "job.json")
        with open(job, "w") as f:
            json.dump({"name": "sensor", "model": "torchscript", "loss": "cross_entropy",
                       "rounds": rounds, "clients_per_round": 1,
                       "selection": {"policy": "random", "overcommit": 1.0},
                       "training": {"local_epochs": 1, "batch_size": 16, "lr": 0.1,
                                    "deadline": {"mode": "fixed", "seconds": 5}}}, f)
        return self.cli("jobs", "create", job, "--model", model)["job_id"]

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


class LiveSession(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory(prefix="fedcase-python-")
        self.coordinator = Coordinator(self.folder.name)

    def tearDown(self):
        self.coordinator.stop()
        self.folder.cleanup()

    def test_a_raising_trainer_fails_its_round_and_the_session_goes_on(self):
        class FailsFirst(TorchTrainer):
            calls = 0

            def train(self, parameters, samples, settings):
                FailsFirst.calls += 1
                if FailsFirst.calls == 1:
                    raise RuntimeError("CUDA out of memory (pretend)")
                return super().train(parameters, samples, settings)

        self.coordinator.create_sensor_job(self.folder.name, rounds=3)
        session = fedcase.Session(port=self.coordinator.port,
                                  enrollment_token=self.coordinator.enrollment_token,
                                  trainer=FailsFirst(Sensor(), input_shape=(8,)),
                                  train_data=fedcase.DatasetSource(sensor_data(200, 1)),
                                  poll_wait_s=0.5)
        runner = threading.Thread(target=session.run, kwargs={"seconds": 90})
        with self.assertLogs("fedcase", "WARNING") as logs:
            runner.start()
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and session.stats.updates_accepted < 1:
                time.sleep(0.1)
            session.stop()
            runner.join()
        stats = session.stats
        self.assertEqual(stats.rounds_failed, 1)
        self.assertGreaterEqual(stats.updates_accepted, 1)
        self.assertIn("CUDA out of memory (pretend)", "\n".join(logs.output))
        self.assertNotEqual(session.client_id, 0)
        session.close()

    def test_sigint_stops_a_session_cleanly(self):
        self.coordinator.create_sensor_job(self.folder.name, rounds=50)
        app = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {os.path.dirname(__file__)!r})
            import fedcase
            from fedcase.torch_trainer import TorchTrainer
            from test_session import Sensor, sensor_data
            session = fedcase.Session(port={self.coordinator.port},
                                      enrollment_token={self.coordinator.enrollment_token!r},
                                      trainer=TorchTrainer(Sensor(), input_shape=(8,)),
                                      train_data=fedcase.DatasetSource(sensor_data(2000, 2)),
                                      poll_wait_s=5)
            stats = session.run(on_progress=lambda s: print("trained", flush=True))
            print("stopped after", stats.rounds_trained, "rounds", flush=True)
            session.close()
        """)
        child = subprocess.Popen([sys.executable, "-c", app], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True,
                                 env=dict(os.environ, FEDCASE_SOURCE_DIR=SOURCE_DIR))
        self.assertEqual(child.stdout.readline().strip(), "trained")
        asked = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=60)
        self.assertEqual(child.returncode, 0, err)
        self.assertIn("stopped after", out)
        self.assertNotIn("Traceback", err)
        self.assertLess(time.monotonic() - asked, 30)


if __name__ == "__main__":
    unittest.main()
