"""Many cases: the plan of a grid, running it, results, comparisons and reports.

* :mod:`~parabench.sweep.plan` - a grid expanded into cases with skip reasons and markers.
* :mod:`~parabench.sweep.run` - every case of a plan run isolated, results appended.
* :mod:`~parabench.sweep.parity` - does a result match its baseline?
* :mod:`~parabench.sweep.report`, :mod:`~parabench.sweep.site`, :mod:`~parabench.sweep.diff` -
  the table, the HTML report, and two result files compared.
"""
