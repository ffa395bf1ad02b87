"""Writes tests/io/data/hf_config_cases.json: config.json variants of deepseek_v4 and what
transformers' DeepseekV4Config (>= 5.17) makes of them. test_model_config_vs_hf.cc checks
that parse_model_config agrees on every case.

Each input config is recorded twice: as written (legacy / flat / nested spellings, keys
left out so HF's defaults apply) and as transformers saves it (`to_dict()` of the parsed
config, the HF form). Run where transformers is installed (torch is not needed):
    python3 tests/io/interop/make_hf_config_cases.py
"""
import json
import sys
from pathlib import Path

import transformers
from transformers import DeepseekV4Config

OUT = Path(__file__).resolve().parents[1] / "data" / "hf_config_cases.json"

BASE = {
    "model_type": "deepseek_v4", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 6,
    "num_attention_heads": 4, "head_dim": 32, "q_lora_rank": 48, "o_groups": 2, "o_lora_rank": 16,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
    "index_n_heads": 2, "index_head_dim": 16, "index_topk": 3, "sliding_window": 8,
    "max_position_embeddings": 256,
}


def case(name, **overrides):
    cfg = dict(BASE)
    for k, v in overrides.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return name, cfg


def v4_flash():
    ratios = [0, 0] + [4, 128] * 20 + [4, 0]
    return {
        "model_type": "deepseek_v4", "attention_bias": False, "head_dim": 512, "qk_rope_head_dim": 64,
        "num_attention_heads": 64, "num_key_value_heads": 1, "q_lora_rank": 1024, "o_lora_rank": 1024,
        "o_groups": 8, "sliding_window": 128, "index_n_heads": 64, "index_head_dim": 128,
        "index_topk": 512, "compress_rope_theta": 160000, "compress_ratios": ratios, "hc_mult": 4,
        "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "hidden_size": 4096, "num_hidden_layers": 43,
        "vocab_size": 129280, "max_position_embeddings": 1048576, "hidden_act": "silu",
        "swiglu_limit": 10.0, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 6,
        "moe_intermediate_size": 2048, "num_hash_layers": 3, "scoring_func": "sqrtsoftplus",
        "topk_method": "noaux_tc", "norm_topk_prob": True, "routed_scaling_factor": 1.5,
        "num_nextn_predict_layers": 1,
        "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
        "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                         "beta_fast": 32, "beta_slow": 1},
        "rope_theta": 10000, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
        "bos_token_id": 0, "eos_token_id": 1,
    }


YARN = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1}

INPUTS = [
    ("v4_flash_legacy", v4_flash()),
    case("legacy_ratios_and_hash", compress_ratios=[0, 4, 128, 4, 128, 0, 0], num_hash_layers=2,
         qk_rope_head_dim=8, rope_scaling=YARN, num_nextn_predict_layers=1, eos_token_id=[1, 2]),
    case("pro_like_no_hash", compress_ratios=[128, 128, 4, 128, 4, 128, 0], num_hash_layers=0,
         qk_rope_head_dim=16, rope_scaling=dict(YARN, beta_fast=None, beta_slow=None)),
    case("hf_defaults_everywhere", head_dim=128, index_head_dim=32),
    case("hash_layers_beyond_depth", num_hash_layers=9, qk_rope_head_dim=8),
    case("explicit_types", qk_rope_head_dim=8,
         layer_types=["sliding_attention", "heavily_compressed_attention",
                      "compressed_sparse_attention", "heavily_compressed_attention",
                      "compressed_sparse_attention", "sliding_attention"],
         mlp_layer_types=["hash_moe", "moe", "hash_moe", "moe", "moe", "moe"]),
    case("flat_rope_parameters_yarn", partial_rotary_factor=0.5,
         rope_parameters={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 128},
         rope_theta=5000.0, compress_rope_theta=40000.0),
    case("yarn_without_original_max", qk_rope_head_dim=8,
         rope_scaling={"rope_type": "yarn", "factor": 8.0}),
    case("plain_rope", qk_rope_head_dim=4, rope_theta=20000.0, swiglu_limit=7.0,
         routed_scaling_factor=2.5, hc_sinkhorn_iters=5, rms_norm_eps=1e-5, eos_token_id=3,
         num_nextn_predict_layers=0),
    case("nested_rope_parameters", layer_types=["sliding_attention"] * 2 + ["compressed_sparse_attention"] * 4,
         rope_parameters={"main": {"rope_type": "default", "rope_theta": 12345.0, "partial_rotary_factor": 0.25},
                          "compress": {"rope_type": "yarn", "rope_theta": 54321.0, "partial_rotary_factor": 0.25,
                                       "factor": 3.0, "original_max_position_embeddings": 32,
                                       "beta_fast": 16, "beta_slow": 2, "attention_factor": 1.0}}),
]


def expected_of(cfg):
    hf = DeepseekV4Config(**json.loads(json.dumps(cfg)))
    rates = hf.compress_rates
    main, comp = hf.rope_parameters["main"], hf.rope_parameters["compress"]
    yarn = comp.get("rope_type") == "yarn"
    rope_dim = int(hf.head_dim * main.get("partial_rotary_factor", 1.0))
    # The rotary embedding (and so the attention) uses the sub-dicts' fraction, which can
    # differ from hf.qk_rope_head_dim when a nested config disagrees with the top level.
    assert rope_dim == int(hf.head_dim * comp.get("partial_rotary_factor", 1.0))
    eos = hf.eos_token_id
    exp = {
        "vocab_size": hf.vocab_size, "hidden_size": hf.hidden_size, "num_layers": hf.num_hidden_layers,
        "num_heads": hf.num_attention_heads, "head_dim": hf.head_dim, "rope_dim": rope_dim,
        "q_lora_rank": hf.q_lora_rank, "o_groups": hf.o_groups, "o_lora_rank": hf.o_lora_rank,
        "sliding_window": hf.sliding_window, "hc_mult": hf.hc_mult,
        "hc_sinkhorn_iters": hf.hc_sinkhorn_iters, "hc_eps": hf.hc_eps, "rms_norm_eps": hf.rms_norm_eps,
        "index_n_heads": hf.index_n_heads, "index_head_dim": hf.index_head_dim,
        "index_topk": hf.index_topk, "n_routed_experts": hf.n_routed_experts,
        "n_experts_per_tok": hf.num_experts_per_tok, "moe_intermediate_size": hf.moe_intermediate_size,
        "routed_scaling_factor": hf.routed_scaling_factor, "swiglu_limit": hf.swiglu_limit,
        "max_position_embeddings": hf.max_position_embeddings,
        "num_nextn_predict_layers": hf.num_nextn_predict_layers,
        "compress_ratios": [0 if t == "sliding_attention" else rates[t] for t in hf.layer_types],
        "hash_layers": [t == "hash_moe" for t in hf.mlp_layer_types],
        "rope_theta": main["rope_theta"], "compress_rope_theta": comp["rope_theta"],
        "yarn": yarn,
        "eos_token_ids": eos if isinstance(eos, list) else [eos],
    }
    if yarn:
        orig = comp["original_max_position_embeddings"]
        factor = comp["factor"] if comp["factor"] is not None else hf.max_position_embeddings / orig
        exp.update({"yarn_factor": factor, "yarn_original_max_position": orig,
                    "yarn_beta_fast": comp.get("beta_fast") or 32, "yarn_beta_slow": comp.get("beta_slow") or 1,
                    "yarn_attention_factor": comp.get("attention_factor")})
    return hf, exp


def main():
    cases = []
    for name, cfg in INPUTS:
        hf, exp = expected_of(cfg)
        cases.append({"name": name + "/as_written", "config": cfg, "expected": exp})
        saved = json.loads(hf.to_json_string(use_diff=False))
        _, exp_saved = expected_of(saved)
        assert exp_saved == exp, name
        cases.append({"name": name + "/saved_by_transformers", "config": saved, "expected": exp})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"transformers_version": transformers.__version__, "cases": cases}, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
