"""Many cases: the plan of a grid, running it, and what is drawn from results.

Usage::

    from parabench.sweep.plan import Grid, plan

    cases = plan(Grid(workloads=["mlp"], methods=["serial", "ddp"], profile="tiny"))

* :mod:`~parabench.sweep.plan` - a grid expanded into cases with skip reasons and markers.
* :mod:`~parabench.sweep.run` - every case of a plan run isolated, results appended.
* :mod:`~parabench.sweep.table`, :mod:`~parabench.sweep.site`,
  :mod:`~parabench.sweep.tensorboard` - the table, the HTML report and TensorBoard, all
  reading results through :mod:`parabench.analysis`.
"""
