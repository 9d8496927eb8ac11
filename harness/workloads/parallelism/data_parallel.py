"""The one-process trainers: ``single`` (the whole model on one device: the baseline every
other strategy is read against) and ``dp`` (``nn.DataParallel``: one process replicates the
model on every GPU each step, scatters the batch and gathers the outputs on GPU 0)."""
from __future__ import annotations

from harness.workloads.parallelism import parallel_job


class Replicated:
    def __init__(self, job: parallel_job.Job, device: str, device_ids: list[int] | None = None):
        import torch
        self.model = parallel_job.build_model(job).to(device)
        self.net = torch.nn.DataParallel(self.model, device_ids=device_ids) if device_ids else self.model
        x, y = parallel_job.batch(job)
        self.inputs, self.targets = x.to(device), y.to(device)
        self.loss_fn = parallel_job.loss_fn(job)
        self.opt = parallel_job.optimizer(self.model.parameters())
        self.last_loss = float("nan")

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.net(self.inputs), self.targets)
        loss.backward()
        self.opt.step()
        self.last_loss = loss.detach()
