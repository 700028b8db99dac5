"""A Megatron layer spec for dense GPT models that needs no TransformerEngine: our switch for
machines without TE's compiled PyTorch extension (the one-GPU profile, configs/alfworld_1gpu.yaml).

slime trains with TransformerEngine by default, and that stays the default of every other profile.
Megatron's own TE-free spec (`--transformer-impl local`) cannot train under slime at our pin, for
two reasons:
- slime always packs a micro-batch into one THD stream
  (slime/backends/megatron_utils/data.py:92-98), and Megatron's local attention refuses them
  (megatron/core/transformer/dot_product_attention.py:159);
- slime's HF -> Megatron loader and its Megatron -> HF weight push know the TE parameter names
  (`self_attention.linear_qkv.layer_norm_weight`, `mlp.linear_fc1.layer_norm_weight`:
  slime/backends/megatron_utils/hf_to_megatron/qwen.py:39 and :64,
  megatron_to_hf/qwen2.py:60-63); the local spec names them `input_layernorm.weight` and
  `pre_mlp_layernorm.weight`, which both refuse.

This spec keeps the TE layout and names with Megatron-core's plain modules: the RMSNorm before
the QKV and first MLP projections lives in the projection (`NormColumnParallelLinear`, as TE's
fused LayerNormLinear), and core attention is PyTorch's scaled_dot_product_attention, per sequence
of a packed stream. Megatron takes it as `--spec evolving_rl.slime_bridge.megatron_spec
layer_spec` together with `--transformer-impl local` (slime calls it with `(args, config,
vp_stage)`: slime/backends/megatron_utils/model_provider.py:140-143). Dense models, no context
parallelism, RMSNorm; anything else is refused when the model is built (`unsupported`): experts,
zero-centred norm scales (`--apply-layernorm-1p`), sliding-window attention (`--window-size`), a
softmax other than the vanilla one, the attention mask Megatron's data path would build
(`--reset-attention-mask`; slime passes none, and an explicit mask reaching the core attention is
refused), and attention dropout under tensor parallelism (Megatron draws it from its model-parallel
RNG tracker per partition, which this spec does not).

The packed path (`packed_attention.attend`) attends one sequence at a time (a Python loop, one
host sync for the boundaries per layer) or, on CUDA from 4 sequences a stream on, in one Flash
Attention variable-length call: measured at 7B shape, 1.4-5.6x faster there, slower below
(packed_attention's docstring has the numbers).
"""

from __future__ import annotations

import math

import torch
from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.mlp import MLP, MLPSubmodules
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules

from evolving_rl.slime_bridge import packed_attention


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as Qwen2 and Llama compute it: normalise in float32, cast back, then scale."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


class NormColumnParallelLinear(ColumnParallelLinear):
    """RMSNorm, then a column-parallel projection; the norm's scale is `layer_norm_weight`, as in
    TransformerEngine's LayerNormLinear, so checkpoints and slime's converters see TE's names."""

    def __init__(self, input_size: int, output_size: int, *, config: TransformerConfig, **kwargs):
        if config.normalization != "RMSNorm":
            raise ValueError(f"megatron_spec supports RMSNorm models, not {config.normalization}")
        super().__init__(input_size, output_size, config=config, **kwargs)
        self.eps = config.layernorm_epsilon
        device = "cpu" if config.use_cpu_initialization else torch.cuda.current_device()
        self.layer_norm_weight = torch.nn.Parameter(
            torch.ones(input_size, device=device, dtype=config.params_dtype))
        # a replicated weight whose gradient is summed over the sequence-parallel group
        self.layer_norm_weight.sequence_parallel = config.sequence_parallel

    def forward(self, input_: torch.Tensor, weight: torch.Tensor | None = None,
                runtime_gather_output: bool | None = None):
        normed = rms_norm(input_, self.layer_norm_weight, self.eps)
        return super().forward(normed, weight=weight, runtime_gather_output=runtime_gather_output)


class PackedSdpaAttention(MegatronModule):
    """Causal core attention with PyTorch's scaled_dot_product_attention (grouped-query heads),
    for a [s, b, heads, dim] batch or a packed THD stream ([t, heads, dim], one causal block per
    sequence of `packed_seq_params.cu_seqlens_q`)."""

    def __init__(self, config: TransformerConfig, layer_number: int, attn_mask_type: AttnMaskType,
                 attention_type: str, softmax_scale: float | None = None, **_unused):
        super().__init__(config=config)
        if attn_mask_type != AttnMaskType.causal:
            raise ValueError(f"PackedSdpaAttention is causal only, not {attn_mask_type}")
        if config.context_parallel_size != 1:
            raise ValueError("PackedSdpaAttention does not support context parallelism")
        self.layer_number = layer_number
        self.attention_type = attention_type
        self.scale = softmax_scale or 1.0 / math.sqrt(config.kv_channels)
        self.dropout = config.attention_dropout

    def forward(self, query, key, value, attention_mask=None, attn_mask_type=None,
                attention_bias=None, packed_seq_params: PackedSeqParams | None = None):
        if attention_bias is not None:
            raise ValueError("PackedSdpaAttention takes no attention bias")
        if attention_mask is not None:
            raise ValueError("PackedSdpaAttention applies its own causal mask per sequence; it "
                             "takes no attention mask")
        if packed_seq_params is not None and packed_seq_params.qkv_format == "thd":
            return packed_attention.attend(
                query, key, value, packed_seq_params.cu_seqlens_q, scale=self.scale,
                dropout_p=self.dropout if self.training else 0.0,
                max_len=packed_seq_params.max_seqlen_q)
        # [s, b, h, d] -> [b, h, s, d] and back to [s, b, h * d]
        out = self._sdpa(*(t.permute(1, 2, 0, 3) for t in (query, key, value)))
        return out.permute(2, 0, 1, 3).reshape(query.shape[0], query.shape[1], -1)

    def _sdpa(self, q, k, v) -> torch.Tensor:
        return packed_attention.sdpa_causal(
            q, k, v, scale=self.scale, dropout_p=self.dropout if self.training else 0.0)


def unsupported(args, config: TransformerConfig) -> list[str]:
    """What the flags ask for that this spec would otherwise ignore, one line each."""
    problems = []
    if getattr(args, "num_experts", None):
        problems.append("it builds dense models only (no --num-experts)")
    if config.layernorm_zero_centered_gamma:
        problems.append("its RMSNorm scales are not zero-centred (no --apply-layernorm-1p)")
    if config.window_size is not None:
        problems.append("its attention is full causal, not windowed (no --window-size)")
    if config.softmax_type != "vanilla":
        problems.append(f"its softmax is vanilla, not {config.softmax_type}")
    if getattr(args, "reset_attention_mask", False):
        problems.append("it masks one packed sequence from another itself (no "
                        "--reset-attention-mask)")
    if config.attention_dropout > 0 and config.tensor_model_parallel_size > 1:
        problems.append("its attention dropout does not use Megatron's tensor-parallel RNG "
                        "(--attention-dropout 0 with --tensor-model-parallel-size > 1)")
    return problems


def layer_spec(args, config: TransformerConfig, vp_stage: int | None = None) -> ModuleSpec:
    """The transformer layer: TE's layout and parameter names, Megatron-core's plain modules;
    flags it cannot honour are refused here, when the model is built."""
    problems = unsupported(args, config)
    if problems:
        raise ValueError("megatron_spec cannot build this model: " + "; ".join(problems))
    local = get_gpt_layer_local_spec(normalization="RMSNorm", qk_layernorm=args.qk_layernorm)
    attention = local.submodules.self_attention.submodules
    return ModuleSpec(
        module=TransformerLayer,
        submodules=TransformerLayerSubmodules(
            input_layernorm=IdentityOp,
            self_attention=ModuleSpec(
                module=SelfAttention,
                params={"attn_mask_type": AttnMaskType.causal},
                submodules=SelfAttentionSubmodules(
                    linear_qkv=NormColumnParallelLinear,
                    core_attention=PackedSdpaAttention,
                    linear_proj=RowParallelLinear,
                    q_layernorm=attention.q_layernorm,
                    k_layernorm=attention.k_layernorm,
                ),
            ),
            self_attn_bda=get_bias_dropout_add,
            pre_mlp_layernorm=IdentityOp,
            mlp=ModuleSpec(module=MLP, submodules=MLPSubmodules(
                linear_fc1=NormColumnParallelLinear, linear_fc2=RowParallelLinear)),
            mlp_bda=get_bias_dropout_add,
        ),
    )
