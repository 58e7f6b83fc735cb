"""PyTorch cases: one builder, one training loop, parallelizers applied from outside the model.

Usage::

    from parabench.torch.build import build_case, torch_device

    case = build_case(workloads.get("mlp"), config, torch_device(config))  # data, model, batch

* :mod:`~parabench.torch.build` - a torch case's data, model, batch size and FLOPs.
* :mod:`~parabench.torch.loop` - the one training loop every torch method shares.
* :mod:`~parabench.torch.parallelize` - parallelizers applied from outside the model
  (``apply_ddp``, ``apply_fsdp``, ``cut_stages``, ``place_stages``).
* :mod:`~parabench.torch.local` - in-process sessions (``serial``, ``model_parallel``);
  :mod:`~parabench.torch.staged` - the ``pipeline`` / ``hybrid`` family.
* :mod:`~parabench.torch.data_parallel`, :mod:`~parabench.torch.fedavg`,
  :mod:`~parabench.torch.pipeline` - rank programs of the multi-process methods.
* :mod:`~parabench.torch.session` - the session that drives rank programs in a pool.
* :mod:`~parabench.torch.launch` - the same case under ``torchrun`` (its entry point:
  :mod:`parabench.cli.torchrun`).

Inside this package ``import torch`` is PyTorch itself (absolute imports).
"""
