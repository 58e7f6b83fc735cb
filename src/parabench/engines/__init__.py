"""Engines that methods start and stop around a workload: Dask clusters (dask_cluster), and
whether the external engines (Spark, MPI) are reachable (probe); the MPI rank programs are
in :mod:`parabench.forest.mpi_rank`.

Usage::

    from parabench.engines.dask_cluster import DaskCluster
    with DaskCluster.for_config(config) as cluster:   # a LocalCluster, or the user's scheduler
        cluster.client.submit(sum, [1, 2]).result()

Modules here import their engine (dask, mpi4py) inside functions, like the methods do, so
importing this package costs nothing on a machine without the extras.
"""
