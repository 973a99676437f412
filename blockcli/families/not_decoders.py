"""The model types transformers can build as a causal LM that are not decoder-only models: refused by name.

Every `model_type` here is in transformers 5.24's causal-LM mapping (tests/fixtures/census/census.json.gz, whose
generator says how each kind is told apart), but its causal-LM class is one half of something else:

- an encoder: a bidirectional masked-LM encoder (BERT, RoBERTa, XLM, Reformer, ...) whose causal-LM head only
  runs with `is_decoder` switched on, as the decoder of an encoder-decoder pair;
- an encoder-decoder: the decoder half of a translation, summarisation, speech or image-to-text model (BART,
  Marian, Whisper, TrOCR, ...), its layers attending to the encoder's output.

blockcli models decoder-only language models; a config.json of one of these is refused in one line saying so.
"""

from __future__ import annotations

ENCODERS = frozenset({
    "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie", "megatron-bert",
    "reformer", "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "xlm", "xlm-roberta",
    "xlm-roberta-xl", "xmod",
})
ENCODER_DECODERS = frozenset({
    "bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart", "moss_transcribe_diarize",
    "musicgen", "musicgen_melody", "mvp", "pegasus", "plbart", "prophetnet", "trocr", "whisper",
})


def not_a_decoder(model_type: object) -> str | None:
    """Why `model_type` is not a decoder-only model (the end of the refusal's sentence), or None."""
    if not isinstance(model_type, str):  # a list or an object: not a name at all
        return None
    if model_type in ENCODERS:
        return "is an encoder model, not a decoder-only one; blockcli reads decoder-only language models"
    if model_type in ENCODER_DECODERS:
        return ("is an encoder-decoder model, not a decoder-only one; blockcli reads decoder-only language "
                "models")
    return None
