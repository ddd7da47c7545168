"""Published model configurations, written out (no download).

The values are those of each model's `config.json` on the Hugging Face hub
(meta-llama/Llama-2-7b-hf, Qwen/Qwen2-7B, gpt2, bert-base-uncased); only the
fields that decide tensor sizes are given, the rest keep transformers'
defaults. `tiny-llama` and `gpt2-tiny` are small configs of the same
architectures for tests.
"""

import torch

CONFIGS = {
    "llama-2-7b": dict(
        arch="llama",
        dtype=torch.float16,
        hidden_size=4096,
        intermediate_size=11008,
        num_attention_heads=32,
        num_key_value_heads=32,
        num_hidden_layers=32,
        vocab_size=32000,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
    ),
    "qwen2-7b": dict(
        arch="qwen2",
        dtype=torch.bfloat16,
        hidden_size=3584,
        intermediate_size=18944,
        num_attention_heads=28,
        num_key_value_heads=4,
        num_hidden_layers=28,
        vocab_size=152064,
        max_position_embeddings=131072,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        tie_word_embeddings=False,
        use_sliding_window=False,
    ),
    "gpt2": dict(
        arch="gpt2",
        dtype=torch.float32,
        n_embd=768,
        n_head=12,
        n_layer=12,
        n_positions=1024,
        vocab_size=50257,
    ),
    "gpt2-tiny": dict(
        arch="gpt2",
        dtype=torch.float32,
        n_embd=128,
        n_head=4,
        n_layer=2,
        n_positions=256,
        vocab_size=1000,
    ),
    "tiny-llama": dict(
        arch="llama",
        dtype=torch.float32,
        hidden_size=256,
        intermediate_size=688,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        vocab_size=1000,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    ),
}


def build(name, layers=None):
    """(model class, config, dtype) for a named config; `layers` overrides the depth."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    spec = dict(CONFIGS[name])
    arch = spec.pop("arch")
    dtype = spec.pop("dtype")
    classes = {
        "llama": (LlamaConfig, LlamaForCausalLM, "num_hidden_layers"),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM, "num_hidden_layers"),
        "gpt2": (GPT2Config, GPT2LMHeadModel, "n_layer"),
    }
    config_cls, model_cls, depth_key = classes[arch]
    if layers is not None:
        spec[depth_key] = layers
    config = config_cls(**spec)
    # SDPA, as a serving or training stack runs these models.
    config._attn_implementation = "sdpa"
    return model_cls, config, dtype


def make_model(name, layers=None, dtype=None):
    """The model with random weights, in its published dtype unless `dtype` is given."""
    model_cls, config, published = build(name, layers)
    dtype = dtype or published
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return model_cls(config)
    finally:
        torch.set_default_dtype(previous)
