"""The bottom layer's process and clock machinery, which everything above stands on.

Usage::

    from parabench.core.clock import Clock, Stopwatch   # the one clock: only it reads a timer
    from parabench.core.records import Window, Parity    # a Result's typed parts, plain data
    from parabench.core.pool import WorkerPool           # the rank processes of one case

* :mod:`~parabench.core.clock` - the one clock (``Clock``, ``Spans``, ``Stopwatch``).
* :mod:`~parabench.core.pool` / :mod:`~parabench.core.rank` - rank processes of one case.
* :mod:`~parabench.core.launcher` - where a case's ranks come from (a pool here, or torchrun).
* :mod:`~parabench.core.records` - the typed sub-records of a Result (window, parity, machine,
  grading, facts, ...).
* :mod:`~parabench.core.tempdirs` - the sweep's shared folder and per-case scratch folders.

Nothing here imports the case lifecycle, the methods or the engines; they import this.
"""
