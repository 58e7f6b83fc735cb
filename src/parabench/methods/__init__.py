"""Built-in methods. Importing this package registers them (see :mod:`parabench.registry`)."""

from parabench.methods import serial  # noqa: F401
