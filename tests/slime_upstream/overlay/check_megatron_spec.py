"""Our TE-free Megatron layer spec (src/evolving_rl/slime_bridge/megatron_spec.py) through the
upstream code that builds, loads, trains and exports the model, on the CPU:

- Megatron-LM's real `parse_args` and `validate_args` on the flags of slime's
  scripts/models/qwen2.5-0.5B.sh at toy size, plus the one-GPU profile's TE-free flags
  (`--transformer-impl local --spec evolving_rl.slime_bridge.megatron_spec layer_spec`);
- slime's model provider (`get_model_provider_func`, model_provider.py:140-143 calls our spec);
- slime's HF -> Megatron loader (`load_hf_weights`, what tools/convert_hf_to_torch_dist.py runs);
- slime's Megatron -> HF converter over slime's global parameter names (what the weight push to
  SGLang runs: update_weight/common.py `named_params_and_buffers`, megatron_to_hf `convert_to_hf`).

The reference is a random Qwen2 of HF transformers (norm scales and QKV biases perturbed so that
neither is the identity): Megatron's logits must match it per sequence and as slime packs a
micro-batch (one THD stream, slime/backends/megatron_utils/data.py:92-98), and every HF tensor must
come back from the converter bit for bit (bf16, as the push sends it).
"""

from __future__ import annotations

import socket
import sys
from argparse import Namespace

import pytest
import torch

VOCAB, LAYERS, HIDDEN = 96, 2, 64
LENGTHS = (7, 11, 5)
LOGIT_TOLERANCE = 1e-4  # float32, one CPU: the two implementations order their sums differently
# slime's scripts/models/qwen2.5-0.5B.sh, at toy size
MODEL_FLAGS = [
    "--swiglu", "--num-layers", str(LAYERS), "--hidden-size", str(HIDDEN),
    "--ffn-hidden-size", "128",
    "--num-attention-heads", "4", "--group-query-attention", "--num-query-groups", "2",
    "--use-rotary-position-embeddings", "--disable-bias-linear", "--add-qkv-bias",
    "--normalization", "RMSNorm", "--norm-epsilon", "1e-6", "--rotary-base", "10000",
    "--vocab-size", str(VOCAB), "--untie-embeddings-and-output-weights",
    "--attention-dropout", "0.0", "--hidden-dropout", "0.0",
    "--seq-length", "128", "--max-position-embeddings", "128", "--micro-batch-size", "1",
]
TE_FREE_FLAGS = [
    "--transformer-impl", "local", "--spec", "evolving_rl.slime_bridge.megatron_spec", "layer_spec",
    "--attention-backend", "auto", "--no-gradient-accumulation-fusion", "--no-rope-fusion",
    "--no-persist-layer-norm", "--use-cpu-initialization",
]


@pytest.fixture(scope="module")
def parallel_state():
    """Megatron's model-parallel state on one CPU process (gloo); rotary embeddings and the
    spec's parameters are placed on `torch.cuda.current_device()`, here the CPU."""
    import torch.distributed as dist
    from megatron.core import parallel_state as mpu

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    mpu.initialize_model_parallel(1, 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.cuda, "current_device", lambda: "cpu")
        yield mpu
    mpu.destroy_model_parallel()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    """(folder, model): a random Qwen2 in float32, saved as safetensors."""
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)
    model = transformers.Qwen2ForCausalLM(config).float().eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
            if name.endswith("bias"):
                parameter.normal_(0.0, 0.05)
    folder = tmp_path_factory.mktemp("qwen2_toy")
    model.save_pretrained(folder)
    return folder, model


def _parsed(*extra: str) -> Namespace:
    """Megatron's args of the toy model with the TE-free flags and `extra`, validated by it."""
    from megatron.training.arguments import parse_args, validate_args

    saved = sys.argv
    sys.argv = ["train.py", *MODEL_FLAGS, *TE_FREE_FLAGS, *extra]
    try:
        args = parse_args()
    finally:
        sys.argv = saved
    validate_args(args)
    args.padded_vocab_size = VOCAB  # Megatron's tokenizer setup sets it; no tokenizer here
    return args


@pytest.fixture(scope="module")
def megatron_args(parallel_state):
    """Megatron's args of the toy model with the TE-free flags, validated by Megatron."""
    return _parsed()


def _build(args, folder):
    """The GPT model slime's provider builds with our spec, HF weights loaded by slime's loader."""
    from slime.backends.megatron_utils.hf_to_megatron import load_hf_weights
    from slime.backends.megatron_utils.model_provider import get_model_provider_func

    model = get_model_provider_func(args)(pre_process=True, post_process=True)
    load_hf_weights(args, [model], folder)
    return model


@pytest.fixture(scope="module")
def loaded(megatron_args, hf_model):
    return _build(megatron_args, hf_model[0]).eval()


def _packed_params():
    """The THD packing of LENGTHS as slime makes it for a micro-batch."""
    from megatron.core.packed_seq_params import PackedSeqParams

    bounds = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], dtype=torch.int32)
    return PackedSeqParams(cu_seqlens_q=bounds, cu_seqlens_kv=bounds, max_seqlen_q=max(LENGTHS),
                           max_seqlen_kv=max(LENGTHS), qkv_format="thd")


def _sequences() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (length,), generator=generator) for length in LENGTHS]


def _hf_logits(hf, sequences) -> list[torch.Tensor]:
    with torch.no_grad():
        return [hf(tokens[None]).logits[0] for tokens in sequences]


def test_the_spec_has_transformer_engines_parameter_names(loaded):
    names = {name for name, _ in loaded.named_parameters()}
    per_layer = {"self_attention.linear_qkv.layer_norm_weight", "self_attention.linear_qkv.weight",
                 "self_attention.linear_qkv.bias", "self_attention.linear_proj.weight",
                 "mlp.linear_fc1.layer_norm_weight", "mlp.linear_fc1.weight",
                 "mlp.linear_fc2.weight"}
    assert names == {"embedding.word_embeddings.weight", "decoder.final_layernorm.weight",
                     "output_layer.weight",
                     *(f"decoder.layers.{i}.{rest}" for i in range(LAYERS) for rest in per_layer)}


def test_logits_match_hf_per_sequence(loaded, hf_model):
    sequences = _sequences()
    with torch.no_grad():
        for tokens, expected in zip(sequences, _hf_logits(hf_model[1], sequences), strict=True):
            logits = loaded(tokens[None], torch.arange(len(tokens))[None], None)[0]
            torch.testing.assert_close(logits, expected, atol=LOGIT_TOLERANCE, rtol=0)


def test_a_packed_thd_stream_matches_hf_sequence_by_sequence(loaded, hf_model):
    sequences = _sequences()
    with torch.no_grad():
        logits = loaded(torch.cat(sequences)[None], None, None,
                        packed_seq_params=_packed_params())[0]
    torch.testing.assert_close(logits, torch.cat(_hf_logits(hf_model[1], sequences)),
                               atol=LOGIT_TOLERANCE, rtol=0)


def test_a_packed_backward_pass_reaches_every_parameter(megatron_args, hf_model):
    model = _build(megatron_args, hf_model[0]).train()
    tokens = torch.cat(_sequences())
    logits = model(tokens[None], None, None, packed_seq_params=_packed_params())[0]
    torch.nn.functional.cross_entropy(logits[:-1], tokens[1:]).backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and torch.isfinite(parameter.grad).all(), name
        assert parameter.grad.abs().sum() > 0, name


def test_slimes_weight_push_converter_gives_back_every_hf_tensor(megatron_args, hf_model):
    """The names slime's push sees (DDP and Float16Module wrap the model as `module.module.`;
    one wrapper here, slime adds the other) converted by slime's Qwen2 converter."""
    from megatron.core.transformer.module import Float16Module
    from megatron.training.arguments import core_transformer_config_from_args
    from slime.backends.megatron_utils.megatron_to_hf import convert_to_hf
    from slime.backends.megatron_utils.update_weight.common import named_params_and_buffers

    args = Namespace(**{**vars(megatron_args), "bf16": True})
    wrapped = Float16Module(core_transformer_config_from_args(args), _build(args, hf_model[0]))
    expected = hf_model[1].state_dict()
    converted = {}
    for name, parameter in named_params_and_buffers(args, [wrapped]):
        converted.update(convert_to_hf(args, "qwen2", name, parameter.detach()))
    assert set(converted) == set(expected)
    for name, tensor in converted.items():
        assert torch.equal(tensor, expected[name].bfloat16()), name


def test_the_spec_refuses_what_it_does_not_implement(megatron_args):
    from megatron.training.arguments import core_transformer_config_from_args

    from evolving_rl.slime_bridge.megatron_spec import layer_spec

    with pytest.raises(ValueError, match="dense models only"):
        layer_spec(Namespace(**{**vars(megatron_args), "num_experts": 8}),
                   core_transformer_config_from_args(megatron_args))


@pytest.mark.parametrize(("flags", "words"), [
    (["--window-size", "16,0"], "not windowed"),
    (["--softmax-type", "off-by-one"], "not off-by-one"),
    (["--reset-attention-mask"], "--reset-attention-mask"),
])
def test_flags_the_spec_would_ignore_are_refused_when_it_is_built(parallel_state, flags, words):
    """Each flag passes Megatron's own parser and validator and reaches its config, and the spec
    refuses it instead of building a model that silently ignores it."""
    from megatron.training.arguments import core_transformer_config_from_args

    from evolving_rl.slime_bridge.megatron_spec import layer_spec

    args = _parsed(*flags)
    with pytest.raises(ValueError, match=f"cannot build this model: .*{words}"):
        layer_spec(args, core_transformer_config_from_args(args))


def test_zero_centred_norm_scales_are_refused(megatron_args):
    """Megatron's parser has no flag for `layernorm_zero_centered_gamma` at this pin (checkpoint
    args can carry it); its config builder takes it from the args."""
    from megatron.training.arguments import core_transformer_config_from_args

    from evolving_rl.slime_bridge.megatron_spec import layer_spec

    args = Namespace(**{**vars(megatron_args), "layernorm_zero_centered_gamma": True})
    config = core_transformer_config_from_args(args)
    assert config.layernorm_zero_centered_gamma
    with pytest.raises(ValueError, match="not zero-centred"):
        layer_spec(args, config)


def test_attention_dropout_under_tensor_parallelism_is_refused(megatron_args):
    """Megatron draws attention dropout from its tensor-parallel RNG tracker (one stream per
    partition of heads); the spec's SDPA dropout would not. One process cannot run TP 2, so the
    config is built from the validated args with the two values changed."""
    from megatron.training.arguments import core_transformer_config_from_args

    from evolving_rl.slime_bridge.megatron_spec import layer_spec

    def build(**changes):
        args = Namespace(**{**vars(megatron_args), **changes})
        return layer_spec(args, core_transformer_config_from_args(args))

    build(attention_dropout=0.1)  # one partition: nothing to keep apart
    build(tensor_model_parallel_size=2, sequence_parallel=True)  # no dropout
    with pytest.raises(ValueError, match="tensor-parallel RNG"):
        build(attention_dropout=0.1, tensor_model_parallel_size=2, sequence_parallel=True)


def test_an_explicit_attention_mask_is_refused(loaded):
    """slime passes no mask (its packed stream carries the boundaries); a mask the core attention
    would silently replace by its own causal one is refused."""
    tokens = _sequences()[0]
    mask = torch.ones(1, 1, len(tokens), len(tokens), dtype=torch.bool).triu(1)
    with torch.no_grad(), pytest.raises(ValueError, match="takes no attention mask"):
        loaded(tokens[None], torch.arange(len(tokens))[None], mask)
