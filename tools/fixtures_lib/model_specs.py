"""The fixture models: tiny configs (2 layers, hidden 64, vocab 512) covering one feature each."""
from dataclasses import dataclass, field

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          MixtralConfig, MixtralForCausalLM, OPTConfig, OPTForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

VOCAB = 512
MAX_POS = 128
INIT_STD = 0.1    # embeddings, positions, lm_head, project_in/out (config initializer_range)
BLOCK_STD = 0.2   # matrices inside decoder blocks: makes greedy output less repetitive


@dataclass
class ModelSpec:
    name: str
    covers: str                      # one line for README / reference.json
    model_cls: type
    config: object
    dtype: torch.dtype               # dtype of the saved checkpoint
    tokenizer_style: str             # "opt" or "llama3"
    seed: int
    max_shard_size: str = None       # save_pretrained shard limit (None: one file)
    strip_model_prefix: bool = False  # rewrite safetensors keys without the leading "model."
    hub_style_config: bool = False   # rewrite config.json with rope_theta/rope_scaling/torch_dtype
    long_last_prompt: bool = False   # last prompt > original_max_position_embeddings
    extra: dict = field(default_factory=dict)


def _opt(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, ffn_dim=128,
                num_attention_heads=4, max_position_embeddings=MAX_POS, word_embed_proj_dim=64,
                do_layer_norm_before=True, init_std=INIT_STD, pad_token_id=1, bos_token_id=2,
                eos_token_id=2, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                tie_word_embeddings=True)
    base.update(kw)
    return OPTConfig(**base)


def _llama_family(cls, **kw):
    # Llama-3 style tokenizer: <|begin_of_text|> = 510, <|end_of_text|> = 511.
    base = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, intermediate_size=128,
                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=MAX_POS,
                initializer_range=INIT_STD, rms_norm_eps=1e-6, bos_token_id=VOCAB - 2,
                eos_token_id=VOCAB - 1, tie_word_embeddings=False)
    base.update(kw)
    return cls(**base)


SPECS = [
    ModelSpec("opt-tiny", "OPT pre-LN (do_layer_norm_before), biases, learned positions (+2 offset), "
              "ReLU, tied lm_head; float32 checkpoint",
              OPTForCausalLM, _opt(), torch.float32, "opt", seed=102),
    ModelSpec("opt-postln-proj", "OPT post-LN (no final norm) with word_embed_proj_dim 32 != hidden "
              "64 (project_in/project_out, as OPT-350m); float16 checkpoint",
              OPTForCausalLM, _opt(do_layer_norm_before=False, word_embed_proj_dim=32),
              torch.float16, "opt", seed=112,
              extra={"variant_weights": ["model.decoder.layers.0.self_attn.q_proj.weight",
                                         "model.decoder.layers.0.fc2.weight"]}),
    ModelSpec("opt-noprefix", "opt-tiny layout with safetensors keys saved WITHOUT the leading "
              "'model.' (decoder.layers.0...), as some hub OPT files; float32",
              OPTForCausalLM, _opt(), torch.float32, "opt", seed=122, strip_model_prefix=True),
    ModelSpec("llama-tiny", "Llama MHA (4 heads, 4 kv heads), untied lm_head; float32 checkpoint",
              LlamaForCausalLM, _llama_family(LlamaConfig), torch.float32, "llama3", seed=222,
              extra={"variant_weights": ["model.layers.0.self_attn.q_proj.weight",
                                         "model.layers.0.mlp.down_proj.weight"]}),
    ModelSpec("llama-gqa-bf16", "Llama GQA (4 heads, 2 kv heads), explicit head_dim 24 != 64/4, "
              "tied embeddings (no lm_head in the file); bfloat16 checkpoint",
              LlamaForCausalLM,
              _llama_family(LlamaConfig, num_key_value_heads=2, head_dim=24,
                            tie_word_embeddings=True),
              torch.bfloat16, "llama3", seed=217),
    ModelSpec("llama3-rope", "Llama-3 rope_scaling (llama3, factor 8, low 1, high 4, original 32), "
              "rope_theta 500000, GQA; hub-style config.json (rope_theta + rope_scaling, "
              "torch_dtype); last prompt 36 tokens > 32; float16 checkpoint",
              LlamaForCausalLM,
              _llama_family(LlamaConfig, num_key_value_heads=2, rope_theta=500000.0,
                            rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 32}),
              torch.float16, "llama3", seed=208, hub_style_config=True, long_last_prompt=True),
    ModelSpec("mistral-tiny", "Mistral with sliding_window 4 (GQA 4/2, intermediate 96); prompts "
              "of 8 and 12 tokens exceed the window; float32 checkpoint",
              MistralForCausalLM,
              _llama_family(MistralConfig, num_key_value_heads=2, intermediate_size=96,
                            sliding_window=4),
              torch.float32, "llama3", seed=319),
    ModelSpec("qwen2-tiny", "Qwen2: q/k/v biases (o without), GQA 4/2, intermediate 88 (a partial "
              "int4 group and bitmap word), rope_theta 1e6, tied embeddings, use_sliding_window "
              "false; hub-style config.json; float32 checkpoint",
              Qwen2ForCausalLM,
              _llama_family(Qwen2Config, num_key_value_heads=2, intermediate_size=88,
                            rope_theta=1000000.0, use_sliding_window=False,
                            tie_word_embeddings=True),
              torch.float32, "llama3", seed=423, hub_style_config=True,
              extra={"variant_weights": ["model.layers.0.mlp.down_proj.weight"]}),
    ModelSpec("qwen3-tiny", "Qwen3: per-head RMSNorm of q and k before RoPE (q_norm/k_norm "
              "[head_dim]), head_dim 24 != 64/4 (q 96 wide, o_proj [64, 96]), GQA 4/2, "
              "intermediate 96, rope_theta 1e6, untied lm_head; float32 checkpoint",
              Qwen3ForCausalLM,
              _llama_family(Qwen3Config, num_key_value_heads=2, head_dim=24, intermediate_size=96,
                            rope_theta=1000000.0, use_sliding_window=False),
              torch.float32, "llama3", seed=612),
    ModelSpec("qwen3-moe-tiny", "Qwen3-MoE: 5 experts (odd), top-3 routing, norm_topk_prob false, "
              "moe_intermediate 40 (a partial int4 group in down_proj), router mlp.gate [5, 64] kept "
              "float32 in every variant, q/k norms, head_dim 24, GQA 4/2; float32 checkpoint",
              Qwen3MoeForCausalLM,
              _llama_family(Qwen3MoeConfig, num_key_value_heads=2, head_dim=24, intermediate_size=96,
                            moe_intermediate_size=40, num_experts=5, num_experts_per_tok=3,
                            norm_topk_prob=False, rope_theta=1000000.0, use_sliding_window=False),
              torch.float32, "llama3", seed=701, extra={"moe": True}),
    ModelSpec("mixtral-tiny", "Mixtral: 4 experts, top-2 routing (renormalized), experts "
              "block_sparse_moe.experts.E.w1/w2/w3 of intermediate 48, router block_sparse_moe.gate "
              "kept float32 in every variant, GQA 4/2; float32 checkpoint",
              MixtralForCausalLM,
              _llama_family(MixtralConfig, num_key_value_heads=2, intermediate_size=48,
                            num_local_experts=4, num_experts_per_tok=2, rope_theta=1000000.0),
              torch.float32, "llama3", seed=811, extra={"moe": True}),
    ModelSpec("llama-sharded", "llama-tiny layout saved in several shards "
              "(model-0000k-of-0000n.safetensors + model.safetensors.index.json); float16",
              LlamaForCausalLM, _llama_family(LlamaConfig), torch.float16, "llama3", seed=516,
              max_shard_size="100KB"),
]


def randomize_parameters(model, seed: int) -> None:
    """Every parameter gets a seeded value, independent of transformers' own init: block matrices
    N(0, 0.2²), other matrices N(0, 0.1²); norm weights 1 + 0.1·N(0,1); biases 0.05·N(0,1).
    Seeds in SPECS were picked (once, offline) so prompt 0's greedy path has top-1/top-2 logit
    margins >= 0.01..0.03 and varied tokens: references robust to summation-order differences."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith(".bias"):
                p.copy_(0.05 * noise)
            elif p.dim() == 1:           # LayerNorm / RMSNorm weight
                p.copy_(1.0 + 0.1 * noise)
            elif ".layers." in name:
                p.copy_(BLOCK_STD * noise)
            else:
                p.copy_(INIT_STD * noise)
