"""TensorFlow data parallelism: Keras twins of the torch workloads and their training program.

Usage::

    from parabench.tf.models import keras_model, missing_model
    missing_model("vgg11")          # the reason a tf_* method skips a workload (None: it has one)

* :mod:`parabench.tf.models` - Keras models with the torch workloads' layer shapes, by name.
* :mod:`parabench.tf.program` - :class:`~parabench.tf.program.TFProgram`, the custom training
  loop every ``tf_*`` method runs in its worker processes (a rank program of
  :class:`~parabench.core.pool.WorkerPool` with ``backend="none"``).

The session and method base are in :mod:`parabench.tf.session`; the methods are declared in
:mod:`parabench.methods.tf_data_parallel`. Nothing here imports
TensorFlow at module level.
"""
