"""`gunicorn fake_wsgi:app` (with tests/ on the path): the real server around the fake decider."""

import os

from fake_decider import FakeDecider

from decide.server import ServerConfig, create_app

app = create_app(ServerConfig.from_env(), decider=FakeDecider(supports_images=os.environ.get("FAKE_IMAGES") == "1"))
