"""asv benchmarks of parabench (see ``bench_methods.py`` and ``scripts/asv_history.sh``)."""
