"""hw.fp8_fp4_mqa_logits (ragged prefill) against sim.scorer's float64 reference and its fp32 error bound."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import hw
from hw._logits_details import launch_config
from hw.logits import accumulation_unit_roundoff
from sim import scorer
from sim.formats import E8M0_NAN
from tests.hw._logits_fixtures import case_paths, mx_path, n_roundings, poison_key, quantize_queries
from tools.difftest import case_rng, pair_as_torch, sim_quantize

pytestmark = pytest.mark.interp


# ============================================================================================ accuracy matrix
@dataclass(frozen=True)
class PrefillCase:
    kv_format: str           # "fp8" | "mxfp4"
    head_dim: int
    heads: int
    ranges: tuple            # (ks, ke) per query row
    num_keys: int
    clean: bool = True
    int32_scales: bool = False
    nan_key: int | None = None      # this key is NaN as a writer leaves a non-finite row (DESIGN §1)
    nan_weight_row: int | None = None

    def __str__(self):
        return (f"{self.kv_format}-D{self.head_dim}-H{self.heads}-S{len(self.ranges)}-SK{self.num_keys}"
                f"{'-clean' if self.clean else ''}{'-i32' if self.int32_scales else ''}"
                f"{'-nank' if self.nan_key is not None else ''}{'-nanw' if self.nan_weight_row is not None else ''}")


CAUSAL_5 = ((0, 1), (0, 2), (0, 3), (0, 4), (0, 5))
RAGGED = ((0, 70), (3, 40), (10, 10), (0, 1), (69, 70), (64, 70), (5, 64))
MIDDLE = ((40, 50), (45, 60), (0, 0), (90, 100), (41, 42))     # no row sees keys 0..39 or 60..89
CASES = [
    PrefillCase("mxfp4", 128, 3, RAGGED, 70),
    PrefillCase("mxfp4", 64, 5, CAUSAL_5, 5, clean=False),
    PrefillCase("mxfp4", 32, 2, RAGGED, 70, nan_key=7, nan_weight_row=1),
    PrefillCase("mxfp4", 128, 4, CAUSAL_5, 5, int32_scales=True),
    PrefillCase("fp8", 128, 3, RAGGED, 70, nan_key=20),
    PrefillCase("fp8", 64, 17, CAUSAL_5, 5, clean=False, nan_weight_row=2),
    PrefillCase("fp8", 32, 1, RAGGED, 70),
    PrefillCase("mxfp4", 64, 2, MIDDLE, 100),
    PrefillCase("fp8", 64, 17, MIDDLE, 100),
]


@pytest.mark.parametrize("case,path", [(c, p) for c in CASES for p in case_paths(c.kv_format)],
                         ids=lambda x: str(x) if isinstance(x, PrefillCase) else x)
def test_prefill_matches_reference(case: PrefillCase, path, device, monkeypatch):
    check_prefill_case(case, path, device, monkeypatch)


@pytest.mark.parametrize("case,path", [(CASES[0], "unpack"), (CASES[1], "dot_scaled"), (CASES[7], "unpack"),
                                       (CASES[8], None)],
                         ids=lambda x: str(x) if isinstance(x, PrefillCase) else x)
def test_prefill_small_tiles(case: PrefillCase, path, device, monkeypatch):
    """Programs of 32 keys in 16-key steps: several key spans per row block, ranges starting and ending mid-span."""
    monkeypatch.setattr(launch_config, "PREFILL_KEYS_PER_PROGRAM", 32)
    monkeypatch.setattr(launch_config, "PREFILL_BLOCK_N", 16)
    check_prefill_case(case, path, device, monkeypatch)


def check_prefill_case(case: PrefillCase, path, device, monkeypatch):
    mx_path(monkeypatch, path)
    rng = case_rng(str(case))
    num_q = len(case.ranges)
    q = rng.standard_normal((num_q, case.heads, case.head_dim)).astype(np.float32)
    k = rng.standard_normal((case.num_keys, case.head_dim)).astype(np.float32)
    w = rng.standard_normal((num_q, case.heads)).astype(np.float32)
    if case.nan_weight_row is not None:
        w[case.nan_weight_row, 0] = np.nan
    q_pair, w_t, q_ref, w_ref = quantize_queries(case.kv_format, q, w, device, int32_scales=case.int32_scales)
    values, scales = sim_quantize(case.kv_format, k)
    if case.nan_key is not None:
        poison_key(case.kv_format, values, scales, case.nan_key, block=-1)
    k_ref = scorer.dequantize_kv(values, scales)
    ks = np.array([r[0] for r in case.ranges], dtype=np.int32)
    ke = np.array([r[1] for r in case.ranges], dtype=np.int32)

    out = hw.fp8_fp4_mqa_logits(q_pair, pair_as_torch(case.kv_format, values, scales, device,
                                                       int32_scales=case.int32_scales),
                                w_t, torch.from_numpy(ks).to(device), torch.from_numpy(ke).to(device),
                                clean_logits=case.clean)
    assert out.shape == (num_q, case.num_keys) and out.dtype == torch.float32
    ref = scorer.prefill_logits(q_ref, k_ref, w_ref, ks, ke, clean_logits=True)
    bound = scorer.prefill_error_bound(q_ref, k_ref, w_ref, ks, ke,
                                       n_roundings=n_roundings(case.kv_format, case.head_dim, path),
                                       u=accumulation_unit_roundoff(case.kv_format, device))
    visible = None if case.clean else scorer.visible_mask(ke, case.num_keys, starts=ks)
    result = scorer.assert_logits_within_bound(out.cpu().numpy(), ref, bound, visible=visible)
    assert result.compared > 0
    if case.nan_key is not None:      # the poisoned key makes exactly the rows that see it NaN
        sees = (ks <= case.nan_key) & (case.nan_key < ke)
        assert sees.any() and np.isnan(out[torch.from_numpy(sees), case.nan_key].cpu().numpy()).all()


def test_relu_keeps_nan_but_zeroes_negatives(device):
    """A head whose dot product is NaN poisons the logit; negative dot products contribute 0, not their value."""
    head_dim = 32
    codes = np.zeros((1, 2, head_dim // 2), dtype=np.uint8)
    codes[0, 0, 0] = 0x02                                   # q head 0: element 0 = 1.0
    codes[0, 1, 0] = 0x0A                                   # q head 1: element 0 = -1.0
    q_scales = np.full((1, 2, 1), 127, dtype=np.uint8)
    k_codes = np.zeros((2, head_dim // 2), dtype=np.uint8)
    k_codes[:, 0] = 0x04                                     # keys: element 0 = 2.0
    k_scales = np.array([[127], [E8M0_NAN]], dtype=np.uint8)  # key 1 is NaN
    w = torch.tensor([[1.0, 1.0]], device=device)
    ends = torch.tensor([2], dtype=torch.int32, device=device)
    out = hw.fp8_fp4_mqa_logits((torch.from_numpy(codes).to(device), torch.from_numpy(q_scales).to(device)),
                                (torch.from_numpy(k_codes).to(device), torch.from_numpy(k_scales).to(device)),
                                w, torch.zeros_like(ends), ends).cpu()
    assert out[0, 0].item() == 2.0, f"relu(2) + relu(-2) must be 2, got {out[0, 0].item()}"
    assert torch.isnan(out[0, 1]), f"a NaN key must give a NaN logit, got {out[0, 1].item()}"


# ============================================================================================ rejections
def _good_args(device):
    q = (torch.zeros(2, 3, 32, dtype=torch.uint8, device=device), torch.full((2, 3, 2), 127, dtype=torch.uint8,
                                                                           device=device))
    kv = (torch.zeros(5, 32, dtype=torch.uint8, device=device), torch.full((5, 2), 127, dtype=torch.uint8,
                                                                          device=device))
    w = torch.ones(2, 3, device=device)
    ks = torch.zeros(2, dtype=torch.int32, device=device)
    return dict(q=q, kv=kv, weights=w, cu_seq_len_k_start=ks, cu_seq_len_k_end=ks + 5)


def _fp8(t):
    return t.to(torch.float8_e4m3fn)


BAD_PREFILL = {
    "max_seqlen_k": (lambda a: {**a, "max_seqlen_k": 4}, "max_seqlen_k"),
    "logits_dtype": (lambda a: {**a, "logits_dtype": torch.bfloat16}, "logits_dtype"),
    "clean_logits": (lambda a: {**a, "clean_logits": 1}, "clean_logits"),
    "q not a pair": (lambda a: {**a, "q": a["q"][0]}, "q must be a (values, scales) pair"),
    "q dtype": (lambda a: {**a, "q": (a["q"][0].float(), a["q"][1])}, "q[0] must have dtype"),
    "q head dim": (lambda a: {**a, "q": (torch.zeros(2, 3, 8, dtype=torch.uint8), torch.zeros(2, 3, 1))},
                   "head dim"),
    "q scales shape": (lambda a: {**a, "q": (a["q"][0], torch.zeros(2, 3, 1, dtype=torch.uint8))},
                       "q[1] must have shape"),
    "int32 scales at D=64": (lambda a: {**a, "q": (a["q"][0], torch.zeros(2, 3, 1, dtype=torch.int32))},
                             "int32-packed"),
    "q head dim 96": (lambda a: {**a, "q": (torch.zeros(2, 3, 48, dtype=torch.uint8),
                                            torch.zeros(2, 3, 3, dtype=torch.uint8))}, "power-of-two head dim"),
    "fp8 q with scales": (lambda a: {**a, "q": (_fp8(torch.zeros(2, 3, 64)), torch.ones(2, 3))}, "(values, None)"),
    "format mismatch": (lambda a: {**a, "q": (_fp8(torch.zeros(2, 3, 64)), None)}, "must share a format"),
    "kv scales dtype": (lambda a: {**a, "kv": (a["kv"][0], a["kv"][1].float())}, "kv[1] must have dtype"),
    "kv not contiguous": (lambda a: {**a, "kv": (torch.zeros(32, 5, dtype=torch.uint8).t(), a["kv"][1])},
                          "kv[0] must be contiguous"),
    "weights shape": (lambda a: {**a, "weights": torch.ones(2, 4)}, "weights must have shape"),
    "weights dtype": (lambda a: {**a, "weights": torch.ones(2, 3, dtype=torch.float64)}, "weights must have dtype"),
    "ks dtype": (lambda a: {**a, "cu_seq_len_k_start": torch.zeros(2, dtype=torch.int64)}, "cu_seq_len_k_start"),
    "ke shape": (lambda a: {**a, "cu_seq_len_k_end": torch.zeros(3, dtype=torch.int32)}, "cu_seq_len_k_end"),
}


@pytest.mark.parametrize("name", sorted(BAD_PREFILL))
def test_prefill_rejects_bad_input(name):
    make, message = BAD_PREFILL[name]
    with pytest.raises(ValueError, match=re.escape(message)):
        hw.fp8_fp4_mqa_logits(**make(_good_args(torch.device("cpu"))))


def test_prefill_good_args_are_accepted(device):
    """The rejection table's base arguments are valid (so each rejection is caused by its one change)."""
    out = hw.fp8_fp4_mqa_logits(**_good_args(device))
    assert torch.equal(out.cpu(), torch.zeros(2, 5))


@pytest.mark.parametrize("value,message", [("fast", "MXIDX_MXFP4_PATH must be one of"),
                                           ("unpack_ptx", "needs an NVIDIA GPU")])
def test_bad_mxfp4_path_setting(value, message, monkeypatch):
    """An unknown path name, and the PTX path for tensors that are not on an NVIDIA GPU (here: CPU tensors)."""
    monkeypatch.setenv("MXIDX_MXFP4_PATH", value)
    with pytest.raises(ValueError, match=re.escape(message)):
        hw.fp8_fp4_mqa_logits(**_good_args(torch.device("cpu")))
