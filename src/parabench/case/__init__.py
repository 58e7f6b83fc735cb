"""One case, from start to result: the lifecycle that owns the clock, and what runs it.

Usage::

    from parabench.case.execute import execute

    result = execute(config)            # one case in this process: a Result, never raises

* :mod:`~parabench.case.lifecycle` - start, warm-up, timed windows, evaluate, close.
* :mod:`~parabench.case.execute` - the isolated worker entry (``python -m parabench.case.execute``).
* :mod:`~parabench.case.result` - what a case produces: the result schema (JSON Lines), its
  typed parts in :mod:`parabench.core.records` (window, parity, machine, grading, facts, ...).
* :mod:`~parabench.case.isolate` - runs that worker in its own process group, with a timeout.
* :mod:`~parabench.core.measure`, :mod:`~parabench.case.peak`, :mod:`~parabench.case.energy`,
  :mod:`~parabench.case.stopping` - what is measured around the work.
* :mod:`~parabench.case.bootstrap` - the bootstrap CI the windows are judged by.

The process and clock machinery the lifecycle stands on (the one clock, the rank pool, the
launchers, the result's typed records) is the bottom layer's :mod:`parabench.core`.

Nothing here imports torch at module level, so ``parabench list`` stays light.
"""
