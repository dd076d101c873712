"""The fedcase package without a coordinator: local rounds through the C interface, against the
C++ SDK's own read plan, with trainers that fail in every way a Python trainer can."""
import dataclasses
import json
import math
import os
import subprocess
import unittest

import numpy as np

import fedcase
from fedcase import (CachePolicy, Directives, LocalData, MemorySource, Repetition, Sampling,
                     TrainSettings)


def plan_records():
    """tests/client_sdk/read_plan.cpp's records: 80, record i of 100 + i % 50 bytes."""
    return [bytes([ord("a") + i % 26]) * (100 + i % 50) for i in range(80)]


def plan_loss(sample_id):
    """tests/client_sdk/read_plan.cpp's plan_loss, in float32 arithmetic as in C++."""
    return np.float32(0.1) + np.float32(sample_id * 37 % 11) / np.float32(4.0)


class PlanTrainer:
    """Reads every position in batches, reporting plan_loss; remembers the ids it read."""

    def __init__(self):
        self.ids = []
        self.failure = None  # an exception to raise in train()
        self.loss = None     # a loss to report instead of plan_loss
        self.result = None   # parameters to return instead of parameters + 1
        self.seen = None

    def prepare(self, model):
        pass

    def train(self, parameters, samples, settings):
        self.seen = parameters
        if self.failure is not None:
            raise self.failure
        self.ids = []
        for first in range(0, len(samples), settings.batch_size):
            count = min(settings.batch_size, len(samples) - first)
            losses = []
            for p in range(first, first + count):
                samples.read(p)
                self.ids.append(samples.id(p))
                losses.append(plan_loss(samples.id(p)) if self.loss is None else self.loss)
            samples.report_losses(first, losses)
        if self.result is not None:
            return self.result
        return [p + 1 for p in parameters]

    def evaluate(self, parameters, samples):
        return fedcase.Evaluation(samples=len(samples), loss=0.0)


class LocalRounds(unittest.TestCase):
    def setUp(self):
        self.plan = json.loads(subprocess.run(
            [os.environ["FEDCASE_READ_PLAN_DUMP"]], check=True, capture_output=True,
            text=True).stdout)
        self.directives = Directives(
            sampling=Sampling.IMPORTANCE, sample_budget=self.plan["budget"],
            cache_policy=CachePolicy.IMPORTANCE, cache_budget_bytes=self.plan["cache_bytes"],
            repetition_factor=self.plan["repetition_factor"])
        self.settings = TrainSettings(batch_size=self.plan["batch_size"], lr=0.1)
        self.local = LocalData(MemorySource(plan_records()), seed=self.plan["seed"])
        self.trainer = PlanTrainer()
        self.parameters = [np.full((2, 3), 0.5, dtype=np.float32), np.zeros(4, np.float32)]

    def tearDown(self):
        self.local.close()

    def round(self):
        return self.local.train_round(self.trainer, self.parameters, self.settings,
                                      self.directives)

    def test_same_read_plan_and_cache_figures_as_the_cpp_sdk(self):
        for expected in self.plan["rounds"]:
            parameters, stats = self.round()
            self.assertEqual(self.trainer.ids, expected["ids"])
            self.assertEqual(stats.cache_hits, expected["cache_hits"])
            self.assertEqual(stats.cache_misses, expected["cache_misses"])
            self.assertEqual(stats.samples, self.plan["budget"])
            self.assertEqual([p.shape for p in parameters], [(2, 3), (4,)])
            np.testing.assert_array_equal(parameters[0], np.full((2, 3), 1.5, np.float32))
        # Importance sampling with a cache: the plan repeats samples and hits the cache.
        self.assertLess(len(set(self.trainer.ids)), len(self.trainer.ids))
        self.assertGreater(sum(r["cache_hits"] for r in self.plan["rounds"]), 0)

    def test_adaptive_repetition_repeats_hits_a_factor_of_one_does_not(self):
        fixed = dataclasses.replace(self.directives, repetition_factor=1.0)
        adaptive = dataclasses.replace(fixed, repetition=Repetition.ADAPTIVE)
        hits = {}
        for directives in (fixed, adaptive):
            with LocalData(MemorySource(plan_records()), seed=self.plan["seed"]) as local:
                hits[directives.repetition] = sum(
                    local.train_round(PlanTrainer(), self.parameters, self.settings,
                                      directives)[1].cache_hits for _ in range(4))
        # The same draws (same seed, same losses); only the adaptive plan repeats its hits.
        self.assertGreater(hits[Repetition.ADAPTIVE], hits[Repetition.FIXED])

    def test_parameters_arrive_as_read_only_views_in_the_model_shapes(self):
        self.round()
        seen = self.trainer.seen
        self.assertEqual([p.shape for p in seen], [(2, 3), (4,)])
        self.assertFalse(seen[0].flags.writeable)
        self.assertIs(seen[0].base, seen[1].base)  # both views of the SDK's one buffer

    def test_results_own_their_memory_after_other_allocations(self):
        # A 1M-parameter model: its result is read after the round's buffers were freed and
        # the allocator handed their memory out again.
        big = [np.full((1000, 1000), 0.25, dtype=np.float32), np.zeros(7, np.float32)]
        result, _ = self.local.train_round(self.trainer, big, self.settings, self.directives)
        del big
        self.trainer.seen = None
        churn = [np.full(1_000_007, -9.0, dtype=np.float32) for _ in range(8)]
        del churn
        churn = [np.full(1_000_007, 7.0, dtype=np.float32) for _ in range(8)]
        self.assertEqual([r.shape for r in result], [(1000, 1000), (7,)])
        self.assertTrue(np.all(result[0] == np.float32(1.25)))
        self.assertTrue(np.all(result[1] == np.float32(1.0)))
        for r in result:
            self.assertIsNotNone(r.base)  # a view of an array the result keeps alive
        del churn

    def test_a_raising_trainer_fails_the_round_and_the_next_one_trains(self):
        self.trainer.failure = ValueError("the model diverged")
        with self.assertLogs("fedcase", "WARNING"):
            with self.assertRaises(fedcase.FedcaseError) as caught:
                self.round()
        self.assertEqual(caught.exception.code_name, "internal")
        self.assertIn("ValueError: the model diverged", str(caught.exception))
        self.trainer.failure = fedcase.RoundAborted("battery low")
        with self.assertLogs("fedcase", "WARNING"):
            with self.assertRaises(fedcase.FedcaseError) as caught:
                self.round()
        self.assertEqual(caught.exception.code_name, "cancelled")
        self.trainer.failure = None
        parameters, stats = self.round()
        self.assertEqual(stats.samples, self.plan["budget"])

    def test_non_finite_and_negative_losses_are_refused(self):
        for bad in (math.nan, math.inf, -1.0):
            self.trainer.loss = bad
            with self.assertLogs("fedcase", "WARNING"):
                with self.assertRaises(fedcase.FedcaseError) as caught:
                    self.round()
            self.assertEqual(caught.exception.code_name, "invalid_argument")
            self.assertIn("not finite and >= 0", str(caught.exception))

    def test_a_loss_error_the_trainer_swallows_still_fails_the_round(self):
        class Swallowing(PlanTrainer):
            def train(self, parameters, samples, settings):
                try:
                    samples.report_losses(0, [math.nan])
                except fedcase.FedcaseError:
                    pass
                return [p for p in parameters]
        with self.assertRaises(fedcase.FedcaseError):
            self.local.train_round(Swallowing(), self.parameters, self.settings, self.directives)

    def test_wrong_or_non_finite_parameters_fail_the_round(self):
        self.trainer.result = [np.zeros((2, 3), np.float32)]  # a tensor missing
        with self.assertLogs("fedcase", "WARNING"):
            with self.assertRaises(fedcase.FedcaseError):
                self.round()
        self.trainer.result = [np.zeros((2, 3)), np.array([0, 0, math.nan, 0])]
        with self.assertRaises(fedcase.FedcaseError) as caught:
            self.round()
        self.assertIn("non-finite", str(caught.exception))

    def test_bad_directives_and_settings_are_refused(self):
        with self.assertRaises(fedcase.FedcaseError):
            self.local.train_round(self.trainer, self.parameters, self.settings,
                                   Directives(repetition_factor=0.5))
        with self.assertRaises(fedcase.FedcaseError):
            self.local.train_round(self.trainer, self.parameters, self.settings,
                                   Directives(repetition=7))
        with self.assertRaises(fedcase.FedcaseError):
            self.local.train_round(self.trainer, self.parameters, TrainSettings(lr=-1),
                                   self.directives)

    def test_a_source_that_raises_fails_the_round(self):
        class Broken(MemorySource):
            def read(self, index):
                raise OSError("the SD card is gone")
        with LocalData(Broken(plan_records()), seed=1) as local:
            with self.assertLogs("fedcase", "WARNING"):
                with self.assertRaises(fedcase.FedcaseError) as caught:
                    local.train_round(self.trainer, self.parameters, self.settings)
        self.assertIn("the SD card is gone", str(caught.exception))

    def test_an_empty_source_is_refused(self):
        with self.assertRaises(fedcase.FedcaseError):
            LocalData(MemorySource([]))


class TorchTrainerRounds(unittest.TestCase):
    def test_a_torch_module_learns_over_local_rounds(self):
        import torch
        from fedcase.torch_trainer import TorchTrainer
        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        centers = rng.normal(size=(3, 8)).astype(np.float32) * 2
        labels = rng.integers(0, 3, size=300)
        data = [(centers[y] + rng.normal(size=8).astype(np.float32), y) for y in labels]
        module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                     torch.nn.Linear(16, 3))
        trainer = TorchTrainer(module, input_shape=(8,))
        tensors = tuple(fedcase.TensorSpec(n, tuple(p.shape))
                        for n, p in module.named_parameters())
        trainer.prepare(fedcase.ModelInfo("torchscript", "cross_entropy", tensors))
        with self.assertRaises(ValueError):
            trainer.prepare(fedcase.ModelInfo("torchscript", "cross_entropy", tensors[:2]))
        parameters = [p.detach().numpy().copy() for p in module.parameters()]
        losses = []
        with LocalData(fedcase.DatasetSource(data), seed=3) as local:
            for _ in range(4):
                parameters, stats = local.train_round(
                    trainer, parameters, TrainSettings(batch_size=16, lr=0.1, momentum=0.5),
                    Directives(sampling=Sampling.IMPORTANCE))
                losses.append(stats.loss_sum / stats.samples)
                self.assertEqual(stats.samples, 300)
        self.assertLess(losses[-1], losses[0] / 2)

    def test_collate_feeds_integer_token_ids_and_two_inputs(self):
        import torch
        from fedcase.torch_trainer import TorchTrainer
        torch.manual_seed(0)
        rng = np.random.default_rng(1)

        # Records of int64 token ids, then a length and the class: the class is which of two
        # marker tokens the sequence holds.
        def record(label):
            tokens = rng.integers(2, 32, size=12)
            tokens[rng.integers(0, 12)] = label
            return np.concatenate([tokens, [12, label]]).astype("<i8").tobytes()
        records = [record(int(rng.integers(0, 2))) for _ in range(256)]

        class Bag(torch.nn.Module):
            """Embedding bag over token ids, scaled by a second input (the lengths)."""
            def __init__(self):
                super().__init__()
                self.embedding = torch.nn.Embedding(32, 8)
                self.out = torch.nn.Linear(8, 2)

            def forward(self, tokens, lengths):
                return self.out(self.embedding(tokens).sum(1) / lengths.unsqueeze(1))

        def collate(batch):
            rows = torch.from_numpy(np.frombuffer(b"".join(batch), dtype="<i8").reshape(
                len(batch), 14).copy())
            return (rows[:, :12], rows[:, 12].float()), rows[:, 13]

        module = Bag()
        trainer = TorchTrainer(module, collate=collate)
        tensors = tuple(fedcase.TensorSpec(n, tuple(p.shape))
                        for n, p in module.named_parameters())
        trainer.prepare(fedcase.ModelInfo("torchscript", "cross_entropy", tensors))
        parameters = [p.detach().numpy().copy() for p in module.parameters()]
        with LocalData(MemorySource(records), seed=3) as local:
            for _ in range(6):
                parameters, stats = local.train_round(
                    trainer, parameters, TrainSettings(batch_size=16, lr=0.5),
                    Directives(sampling=Sampling.UNIFORM))
        with torch.no_grad():
            for p, value in zip(module.parameters(), parameters):
                p.copy_(torch.from_numpy(np.asarray(value)).view_as(p))
            (tokens, lengths), labels = collate(records)
            accuracy = float((module(tokens, lengths).argmax(1) == labels).float().mean())
        self.assertGreater(accuracy, 0.9)

    def test_batchnorm_buffers_travel_with_the_parameters(self):
        import torch
        from fedcase.torch_trainer import TorchTrainer
        torch.manual_seed(0)
        rng = np.random.default_rng(2)
        data = [(rng.normal(loc=3.0, scale=2.0, size=4).astype(np.float32), int(i % 2))
                for i in range(64)]
        module = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6),
                                     torch.nn.ReLU(), torch.nn.Linear(6, 2))
        trainer = TorchTrainer(module, input_shape=(4,))
        kinds = {torch.float32: fedcase.TensorKind.FLOAT_BUFFER,
                 torch.int64: fedcase.TensorKind.INTEGER_BUFFER}
        tensors = tuple(fedcase.TensorSpec(n, tuple(p.shape))
                        for n, p in module.named_parameters())
        tensors += tuple(fedcase.TensorSpec(n, tuple(b.shape), kinds[b.dtype])
                         for n, b in module.named_buffers())
        with self.assertRaisesRegex(ValueError, "not this module's"):  # buffers left out
            trainer.prepare(fedcase.ModelInfo("torchscript", "cross_entropy", tensors[:4]))
        trainer.prepare(fedcase.ModelInfo("torchscript", "cross_entropy", tensors))
        values = [p.detach().numpy().copy() for p in module.parameters()]
        values += [b.detach().float().numpy().copy() for b in module.buffers()]
        names = [t.name for t in tensors]
        sent_mean = values[names.index("1.running_mean")].copy()
        with LocalData(fedcase.DatasetSource(data), seed=3) as local:
            values, stats = local.train_round(trainer, values, TrainSettings(batch_size=16,
                                                                             lr=0.1))
            self.assertEqual(len(values), len(tensors))
            # Training moved the running statistics and counted its 4 batches; what comes back
            # is what the module holds.
            self.assertFalse(np.allclose(values[names.index("1.running_mean")], sent_mean))
            self.assertEqual(float(values[names.index("1.num_batches_tracked")]), 4.0)
            self.assertTrue(np.array_equal(values[names.index("1.running_var")],
                                           module[1].running_var.numpy()))
            self.assertEqual(int(module[1].num_batches_tracked), 4)
            # The next round starts from the statistics it is sent, not the module's own.
            sent = [v.copy() for v in values]
            sent[names.index("1.num_batches_tracked")] = np.float32(40)
            values, _ = local.train_round(trainer, sent, TrainSettings(batch_size=16, lr=0.1))
            self.assertEqual(float(values[names.index("1.num_batches_tracked")]), 44.0)

    def test_collate_and_input_shape_go_alone_and_bad_batches_fail_the_round(self):
        import torch
        from fedcase.torch_trainer import TorchTrainer
        module = torch.nn.Linear(2, 2)
        with self.assertRaises(ValueError):
            TorchTrainer(module)
        with self.assertRaises(ValueError):
            TorchTrainer(module, input_shape=(2,), collate=lambda records: None)
        trainer = TorchTrainer(module, collate=lambda records: (torch.zeros(1, 2),
                                                                torch.zeros(1, dtype=torch.int64)))
        tensors = tuple(fedcase.TensorSpec(n, tuple(p.shape))
                        for n, p in module.named_parameters())
        trainer.prepare(fedcase.ModelInfo("torchscript", "cross_entropy", tensors))
        parameters = [p.detach().numpy().copy() for p in module.parameters()]
        with LocalData(MemorySource([b"x" * 8] * 8), seed=3) as local:
            with self.assertRaisesRegex(fedcase.FedcaseError, "not a tensor of 4 rows"):
                local.train_round(trainer, parameters, TrainSettings(batch_size=4, lr=0.1))


if __name__ == "__main__":
    unittest.main()
