"""Model definitions that import torch at module level, kept out of the registry's import sweep.

Usage::

    from parabench.workloads.models.gpt import GPTShape, build_gpt

The registry imports every module directly under ``parabench.workloads`` to register the
workloads; a subpackage is imported only when asked for, so these modules load torch only
when a model is built.
"""
