"""``python -m parabench.cli`` is the ``parabench`` command too (as before the CLI became a
package).

Usage::

    python -m parabench.cli list         # the same as `parabench list`
"""

import sys

from parabench.cli import main

sys.exit(main())
