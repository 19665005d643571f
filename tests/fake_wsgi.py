"""`gunicorn fake_wsgi:app` (with tests/ on the path): the real server around the fake decider.

FAKE_IMAGES=1 makes it accept images; FAKE_GATE_FILE=path holds every decide_batch call until
that file exists (so a test can keep the engine busy without timing assumptions).
"""

import os
import time
from pathlib import Path

from fake_decider import FakeDecider

from decide.server import ServerConfig, create_app


class FileGate:
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def wait(self) -> None:
        while not self.path.exists():
            time.sleep(0.01)


decider = FakeDecider(supports_images=os.environ.get("FAKE_IMAGES") == "1")
if gate := os.environ.get("FAKE_GATE_FILE"):
    decider.gate = FileGate(gate)
app = create_app(ServerConfig.from_env(), decider=decider)
