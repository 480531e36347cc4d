"""A replica decoder's geometry as the keyword arguments of a ``transformers`` decoder config."""


def decoder_geometry(spec, vocab: int) -> dict:
    """Sizes, heads and norm epsilon of a ``DecoderSpec`` under transformers' names; each test adds its RoPE and
    attention settings."""
    return dict(
        vocab_size=vocab,
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        head_dim=spec.head_dim,
        rms_norm_eps=spec.rms_eps,
    )
