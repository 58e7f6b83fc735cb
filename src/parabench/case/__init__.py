"""One case, from start to result: the lifecycle that owns the clock, and what runs it.

Usage::

    from parabench.case.execute import execute

    result = execute(config)            # one case in this process: a Result, never raises

* :mod:`~parabench.case.lifecycle` - start, warm-up, timed windows, evaluate, close.
* :mod:`~parabench.case.clock` - the one clock (``Clock``, ``Spans``, ``Stopwatch``).
* :mod:`~parabench.case.execute` - the isolated worker entry (``python -m parabench.case.execute``).
* :mod:`~parabench.case.result` - what a case produces: the result schema (JSON Lines), its
  typed parts in :mod:`~parabench.case.records` (window, parity, machine, grading, facts, ...).
* :mod:`~parabench.case.isolate` - runs that worker in its own process group, with a timeout.
* :mod:`~parabench.case.launcher` - where a case's ranks come from (a pool here, or torchrun).
* :mod:`~parabench.case.pool` / :mod:`~parabench.case.rank` - rank processes of one case.
* :mod:`~parabench.case.measure`, :mod:`~parabench.case.peak`, :mod:`~parabench.case.energy`,
  :mod:`~parabench.case.target` - what is measured around the work.
* :mod:`~parabench.case.bootstrap` - the bootstrap CI the windows are judged by.

Nothing here imports torch at module level, so ``parabench list`` stays light.
"""
