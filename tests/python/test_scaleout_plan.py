"""bench/scaleout/plan.py's arithmetic on hand-checked cases (V4-Flash sizes)."""
import importlib.util
import math
import pathlib
import sys

_path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "scaleout" / "plan.py"
_spec = importlib.util.spec_from_file_location("scaleout_plan", _path)
plan = importlib.util.module_from_spec(_spec)
sys.modules["scaleout_plan"] = plan  # dataclasses look their module up
_spec.loader.exec_module(plan)


def test_record_bytes_match_ep_layout():
    assert plan.record_bytes(4096, 128) == 4240  # 4096 + 128 + 8 = 4232 -> 4240
    assert plan.record_bytes(5120, 32) == 5776   # 5120 + 640 + 8 = 5768 -> 5776
    assert plan.record_bytes(64, 32) == 80


def test_v4_flash_expert_bytes_and_kv():
    m = plan.V4_FLASH
    assert m.expert_params() == 43 * 256 * 3 * 2048 * 4096 == 277_025_390_592
    assert math.isclose(m.expert_bytes("fp4"), 277_025_390_592 * 0.53125)
    # 43 windows of 128 x 584 B + 21 C4 layers of 2048 x (584 + 132) + 20 C128 layers of 64 x 584
    assert plan.kv_v4_flash(8192) == 3_214_336 + 30_793_728 + 747_520
    mem = plan.memory_per_gpu(m, 8, 64, "fp4")
    assert math.isclose(mem["experts"], 277_025_390_592 * 0.53125 / 8)
    assert math.isclose(mem["kv"], 64 * 34_755_584)


def test_a2a_bytes_ep8_64_sequences():
    b = plan.a2a_bytes_per_step(plan.V4_FLASH, 8, 64)
    remote_slots = 64 * 6 * 7 / 8  # 336 rows leave the GPU per layer
    assert math.isclose(b["dispatch"], remote_slots * 4240 * 43)   # 61,259,520
    assert math.isclose(b["combine"], remote_slots * 4096 * 2 * 43)  # 118,358,016
    d = plan.a2a_bytes_per_step(plan.V4_FLASH, 8, 64, dedup=True)
    assert math.isclose(d["dispatch"], 64 * 7 * (1 - (7 / 8) ** 6) * 4240 * 43)


def test_step_time_adds_up():
    r = plan.step_ms(plan.V4_FLASH, 8, 64)
    assert math.isclose(r["total"], r["attention"] + r["moe"] + r["a2a"] + r["other"])
    assert math.isclose(r["attention"], 43 * 4.39 / 4)
    assert math.isclose(r["tok_s_gpu"], 64 / r["total"] * 1e3)
    # One NVLink all-to-all per layer half: bytes / (450 GB/s x 0.7) + 15 us, twice per layer.
    b = plan.a2a_bytes_per_step(plan.V4_FLASH, 8, 64)
    want = b["total"] / (450e9 * 0.7) * 1e3 + 43 * 2 * 0.015
    assert math.isclose(r["a2a"], want)
