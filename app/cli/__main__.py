"""`python -m app.cli`: the `batchscope` command."""

import sys

from app.cli.main import main

sys.exit(main())
