# The two commands of the README:
#   make run   installs what is missing, builds, generates text with the built-in tiny model
#   make test  installs what is missing, builds, runs the whole test suite
BUILD ?= build
JOBS ?= $(shell nproc)
# The trained tiny V4.1 model (models/trained-v41, tools/train_tiny.py) continues Python code.
PROMPT ?= class Stack:\n    def __init__(self):\n

.PHONY: run test setup build build-cuda test-cpp test-python clean

setup:
	@scripts/setup

build: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_PYTHON=ON -DPython_EXECUTABLE=$$(command -v python3) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/deepinfer generate --model models/trained-v41 --prompt "$$(printf '$(PROMPT)')" \
	  --max-tokens 96 --temperature 0.6 --top-p 0.95 --seed 2

# Compiles the CUDA backend (it cannot run without a GPU; scripts/gpu-check runs it).
build-cuda: setup
	@if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then \
	  PATH=$$PATH:/usr/local/cuda/bin cmake -S . -B $(BUILD)-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON >/dev/null && \
	  cmake --build $(BUILD)-cuda -j $(JOBS) --target cuda_all; \
	else echo "build-cuda: nvcc not found, skipping"; fi

test-cpp: build
	@cd $(BUILD) && OMP_WAIT_POLICY=passive ctest --output-on-failure -j $(JOBS) -LE cuda

test-python: build
	@PYTHONPATH=$(CURDIR)/python:$$PYTHONPATH DEEPINFER_BUILD=$(CURDIR)/$(BUILD) \
	  python3 -m pytest -q tests/python; rc=$$?; [ $$rc -eq 0 -o $$rc -eq 5 ]

test: test-cpp build-cuda test-python

clean:
	rm -rf $(BUILD) $(BUILD)-cuda
