"""``python -m velobins_eval.cli``: the ``velobins`` command."""

import sys

from .dispatch import main

sys.exit(main())
