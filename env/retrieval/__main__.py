"""`python -m env.retrieval --config configs/local_cpu.yaml [--port N]`: run the server."""

import sys

from env.retrieval.server import main

sys.exit(main())
