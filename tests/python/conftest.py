"""Test-wide setting: commands and LLM() started without a model run the built-in random tiny
model (DeepSeek's tokenizer and vocabulary), which most tests are written against; users get the
trained tiny V4.1 model there (model/tiny_model.h default_model()). Tests of the real default
remove the variable (test_trained_model.py)."""
import os

os.environ.setdefault("DEEPINFER_DEFAULT_MODEL", "tiny")
