"""The public hw names and their signatures are DESIGN §8's (and docs/kernels.md's for the Q quantizers), exactly.

Engines call these positionally and by keyword with DeepGEMM's / vLLM's parameter names, so the parameters DESIGN
lists must keep their names, order, kinds and defaults. A launcher may add parameters of its own only after them,
keyword-only and with a default (a call written against DESIGN then still means the same); those are listed here
too, so that adding one is a deliberate change of this table.
"""
from __future__ import annotations

import inspect

import pytest
import torch

import hw

_NO_DEFAULT = inspect.Parameter.empty


def _params(*specs):
    """("name", default) or "name" (no default) -> [(name, default)]."""
    return [spec if isinstance(spec, tuple) else (spec, _NO_DEFAULT) for spec in specs]


# name -> (DESIGN's positional-or-keyword parameters, our extra keyword-only parameters)
SIGNATURES = {
    "fp8_fp4_mqa_logits": (
        _params("q", "kv", "weights", "cu_seq_len_k_start", "cu_seq_len_k_end", ("clean_logits", True),
                ("max_seqlen_k", 0), ("logits_dtype", torch.float32)),
        _params(("validate", False), ("variant", None), ("launch_settings", None), ("error_flag", None))),
    "get_paged_mqa_logits_metadata": (_params("context_lens", "block_kv", "num_sms"), []),
    "fp8_fp4_paged_mqa_logits": (
        _params("q", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta", "max_context_len",
                ("clean_logits", False), ("logits_dtype", torch.float32), ("layout", None), ("validate", False)),
        _params(("indices", None), ("variant", None), ("launch_settings", None), ("error_flag", None))),
    "indexer_k_quant_and_cache": (
        _params("k", "kv_cache", "slot_mapping", ("kv_dtype", "fp8"), ("layout", None), ("scale_rule", "rceil")),
        _params(("validate", False), ("error_flag", None))),
    "cp_gather_indexer_k_quant_cache": (
        _params("kv_cache", "block_table", "cu_seq_lens", ("layout", None)),
        _params(("num_tokens", None), ("validate", False), ("error_flag", None))),
    "top_k_per_row": (_params("logits", "lengths", "k"),
                      _params(("starts", None), ("out", None), ("sorted", True), ("variant", None),
                              ("launch_settings", None))),
    "quantize_q_mxfp4": (_params("q", ("scale_rule", "rceil")), []),
    "quantize_q_fp8": (_params("q", "weights"), []),
}


def test_public_names_are_the_listed_ones():
    assert sorted(hw.__all__) == sorted(SIGNATURES), "hw.__all__ and this table must list the same names"
    for name in hw.__all__:
        assert callable(getattr(hw, name)), f"hw.{name} is not callable"


def _describe(params):
    return ", ".join(name if default is _NO_DEFAULT else f"{name}={default!r}" for name, default in params)


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_signature(name):
    design, extra = SIGNATURES[name]
    params = list(inspect.signature(getattr(hw, name)).parameters.values())
    positional = [(p.name, p.default) for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keyword_only = [(p.name, p.default) for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    other = [p.name for p in params if p.kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                      inspect.Parameter.KEYWORD_ONLY)]
    assert not other, f"hw.{name}: no *args / **kwargs / positional-only parameters, got {other}"
    assert positional == design, f"hw.{name}({_describe(positional)}) differs from DESIGN's ({_describe(design)})"
    assert keyword_only == extra, f"hw.{name}: keyword-only ({_describe(keyword_only)}), expected ({_describe(extra)})"
    assert all(default is not _NO_DEFAULT for _, default in keyword_only), f"hw.{name}: extras need defaults"


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_docstring_gives_shapes_and_dtypes(name):
    """Every public function documents its tensors: at least one shape in brackets and one dtype name."""
    doc = inspect.getdoc(getattr(hw, name)) or ""
    assert "[" in doc and any(d in doc for d in ("int32", "uint8", "fp32", "float32", "e4m3", "bf16")), \
        f"hw.{name}: the docstring must give shapes and dtypes:\n{doc}"
