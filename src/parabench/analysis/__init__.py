"""Analysis: the only reader of results. Every front end (the CLI table and answer, the
report and site, TensorBoard, the torchrun launcher, pytest-benchmark and asv) calls it.

Usage::

    from parabench.analysis.recommend import describe, recommend
    from parabench.analysis.summary import summarize

    rows = summarize(results, baselines=earlier_serial_results)   # the summary table's rows
    for rec in recommend(results, baselines=earlier_serial_results):
        for line in describe(rec):                                 # the answer
            print(line)

* :mod:`~parabench.analysis.figures` - what a result or a group of repeats measured
  (seconds per sample, peak memory, busy).
* :mod:`~parabench.analysis.ratios` - speedup, scaling efficiency and their baselines.
* :mod:`~parabench.analysis.parity` and :mod:`~parabench.analysis.trajectory` - does a
  result match its baseline? (:mod:`~parabench.analysis.target_parity`: a statistical
  method's verdict in time-to-target mode; :mod:`~parabench.analysis.parity_text`: in words)
* :mod:`~parabench.analysis.time_to_target` - every configuration's seconds to the target.
* :mod:`~parabench.analysis.stats` - medians, bootstrap CIs, Mann-Whitney tests.
* :mod:`~parabench.analysis.recommend` - which configuration to use.
* :mod:`~parabench.analysis.summary` - the rows of the summary table.
* :mod:`~parabench.analysis.compare` - two result files compared (``parabench compare``).
"""
