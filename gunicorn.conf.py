"""`gunicorn wsgi:app` reads this file; the settings live in the package (decide/server/gunicorn_config.py,
which `decide serve` uses too). They are read as a file, not imported: importing the decide package would
load MLX into gunicorn's master process, which forks the workers."""

import importlib.util
from pathlib import Path

_settings = Path(importlib.util.find_spec("decide").origin).parent / "server" / "gunicorn_config.py"
exec(compile(_settings.read_text(), str(_settings), "exec"))
