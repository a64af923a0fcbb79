"""``python -m tfp_maf_cli``: the ``tfp-maf`` command."""

import sys

from tfp_maf_cli import main

sys.exit(main())
