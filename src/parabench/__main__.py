"""``python -m parabench`` is the ``parabench`` command.

Usage::

    python -m parabench list             # the same as `parabench list`
"""

import sys

from parabench.cli import main

sys.exit(main())
