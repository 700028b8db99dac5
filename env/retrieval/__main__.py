"""`python -m env.retrieval --config configs/local_cpu.yaml [--port N]`: run the server.

When `main` returns (stopped: the encoder closed, so no thread runs the model; the PID file
removed), the logs are flushed and the process ends at once (`os._exit`) instead of through the
interpreter's teardown of torch and transformers, which took 1.5 s idle on the 2-core machine
and 4.7-10 s under load: the launcher's stop waited for it, then SIGKILLed the process.
"""

import logging
import os
import sys

from env.retrieval.server import main

code = main()
logging.shutdown()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
