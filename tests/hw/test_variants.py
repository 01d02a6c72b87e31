"""hw.variants.DEFAULTS: every (op, target, format) has a default under this triton, every row names a variant
of its op and format, the conditional rows apply by their conditions, and `mxidx variants` prints the table."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from click.testing import CliRunner

import hw.variants as hv
from hw._logits_details import paged_keys_m_wgmma
from hw._topk_details import fast as topk_fast
from hw._topk_details.radix_fast import FAST_MAX_WIDTH
from hw.targets import NotCovered, Op, Target
from tools.cli import main

FORMATS = {Op.DECODE: ("fp8", "mxfp4"), Op.PREFILL: ("fp8", "mxfp4"), Op.TOPK: (None,)}


def test_every_row_names_a_variant_of_its_op_and_format():
    for row in hv.DEFAULTS:
        named = [v for v in hv.REGISTRY[row.op] if v.name == row.variant]
        assert named, f"{row}: no {row.op.value} variant named {row.variant!r}"
        assert named[0].kv_dtype == row.kv_dtype, f"{row}: {row.variant} takes {named[0].kv_dtype} inputs"
        assert row.why, f"{row}: say why it is the default"
        assert bool(row.condition) == (row.applies is not None), f"{row}: a condition in words and as a predicate"


@pytest.mark.parametrize("target", list(Target), ids=lambda t: t.value)
@pytest.mark.parametrize("op", list(Op), ids=lambda o: o.value)
def test_a_default_for_every_format_on_every_target(op, target):
    for kv_dtype in FORMATS[op]:
        rows = hv.defaults(op, target, kv_dtype)
        assert rows and not rows[-1].condition, f"{op.value}/{target.value}/{kv_dtype}: the last row is unconditional"
        chosen = hv.select(op, target, kv_dtype)
        assert chosen.runs_on(target) and chosen.name in [r.variant for r in rows if not r.condition]


def test_wide_rows_take_per_row_on_nvidia():
    def call(width):
        return SimpleNamespace(logits=SimpleNamespace(shape=(4, width)))
    assert hv.select(Op.TOPK, Target.NVIDIA, call=call(FAST_MAX_WIDTH)).name == "radix_fast"
    assert hv.select(Op.TOPK, Target.NVIDIA, call=call(FAST_MAX_WIDTH + 1)).name == "per_row"
    assert hv.select(Op.TOPK, Target.NVIDIA).name == "radix_fast"     # no call: the unconditional row


def test_mxfp4_decode_on_nvidia_takes_the_tl_fold_where_gluon_does_not_run_the_call(monkeypatch):
    call = SimpleNamespace(out=object())
    for takes, name in ((True, "mxfp4_keys_m_wgmma"), (False, "mxfp4_keys_m")):
        monkeypatch.setattr(paged_keys_m_wgmma, "takes", lambda c, takes=takes: takes)
        assert hv.select(Op.DECODE, Target.NVIDIA, "mxfp4", call=call).name == name
    # a CPU tensor's call is not an sm_90 launch: the Gluon kernel does not take it
    monkeypatch.undo()
    cpu_call = SimpleNamespace(out=torch.empty(1), head_dim=128, next_n=1, num_heads=32, tiled=False,
                               q_v=torch.empty(64, 1), cap=8192)
    assert not paged_keys_m_wgmma.takes(cpu_call)
    assert hv.select(Op.DECODE, Target.NVIDIA, "mxfp4", call=cpu_call).name == "mxfp4_keys_m"


def _decode_call(head_dim=128, next_n=1, heads=32, batch=64, cap=8192):
    """A DecodeCall's shapes on CPU tensors (out's device is what covers() asks about)."""
    return SimpleNamespace(out=torch.empty(1), head_dim=head_dim, next_n=next_n, num_heads=heads, tiled=False,
                           q_v=torch.empty(batch, 1), cap=cap)


def test_named_gluon_scorer_runs_every_call_it_covers_and_refuses_the_others(monkeypatch):
    """variant="mxfp4_keys_m_wgmma" (its settings, which run before any launch) on an sm_90 stand-in: the Gluon
    kernel's settings on every call it covers, also at 128 query columns on a grid too short for the default row;
    NotCovered, naming what it covers, what the call has and the default's mxfp4_keys_m, on any other call."""
    settings = paged_keys_m_wgmma.VARIANT.settings
    monkeypatch.setattr(paged_keys_m_wgmma, "sm_count", lambda device: 132)
    monkeypatch.setattr(paged_keys_m_wgmma, "nvidia_capability", lambda device: (9, 0))
    assert settings(Target.NVIDIA, _decode_call()).maxnreg == paged_keys_m_wgmma.MAXNREG
    short = _decode_call(heads=128, batch=1, cap=64)       # 128 query columns, one tile
    assert not paged_keys_m_wgmma.takes(short)
    assert hv.select(Op.DECODE, Target.NVIDIA, "mxfp4", call=short).name == "mxfp4_keys_m"
    assert settings(Target.NVIDIA, short).maxnreg == paged_keys_m_wgmma.WIDE_MAXNREG
    for call, has in ((_decode_call(head_dim=32), "head dim 32"), (_decode_call(head_dim=256), "head dim 256"),
                      (_decode_call(next_n=4, heads=64), "= 256 query columns")):
        with pytest.raises(NotCovered, match=has) as refused:
            settings(Target.NVIDIA, call)
        assert "variant=None" in str(refused.value) and "runs mxfp4_keys_m" in str(refused.value)
        assert hv.select(Op.DECODE, Target.NVIDIA, "mxfp4", call=call).name == "mxfp4_keys_m"
    monkeypatch.setattr(paged_keys_m_wgmma, "nvidia_capability", lambda device: (10, 0))
    with pytest.raises(NotCovered, match=r"covers sm_90 devices.*\(sm_100\)"):
        settings(Target.NVIDIA, _decode_call())
    monkeypatch.undo()          # a CPU device: not an NVIDIA GPU
    with pytest.raises(ValueError, match="not an NVIDIA GPU"):
        settings(Target.NVIDIA, _decode_call())
    assert settings(Target.NVIDIA, SimpleNamespace(next_n=1, num_heads=32)).tiles   # shapes only: the bench shape


@pytest.mark.parametrize("sorted_", [True, False], ids=["sorted", "columns"])
def test_named_radix_fast_refuses_rows_wider_than_its_long_path(sorted_):
    """variant="radix_fast"'s settings (before any launch, from the shape): rows of FAST_MAX_WIDTH columns pass,
    wider ones raise NotCovered naming per_row and variant=None, in both forms."""
    def call(width):
        return SimpleNamespace(logits=SimpleNamespace(shape=(4, width), is_cuda=False), k=64, sorted=sorted_)
    assert topk_fast.VARIANT.settings(Target.NVIDIA, call(FAST_MAX_WIDTH)).tile_w
    with pytest.raises(NotCovered, match=f"at most FAST_MAX_WIDTH = {FAST_MAX_WIDTH} columns, got "
                                         f"{FAST_MAX_WIDTH + 1}; variant='per_row'.*variant=None"):
        topk_fast.VARIANT.settings(Target.NVIDIA, call(FAST_MAX_WIDTH + 1))


def test_mxidx_variants_prints_the_table(device, monkeypatch):
    from hw.logits import scorer_target

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)   # --device cpu sets it: restored after the test

    flag = ["--device", "cpu" if device.type == "cpu" else "cuda"]
    here_target = scorer_target(device).value
    everywhere = CliRunner().invoke(main, ["variants", "--all", *flag])
    assert everywhere.exit_code == 0, everywhere.output
    for row in hv.DEFAULTS:
        lines = [ln for ln in everywhere.output.splitlines()
                 if ln.split()[:4] == [row.op.value, row.target.value, row.kv_dtype or "-", row.variant]]
        when = row.condition or ("otherwise" if any(r.condition for r in hv.defaults(row.op, row.target,
                                                                                      row.kv_dtype)) else "always")
        assert any(ln.endswith(when) or when in ln for ln in lines), f"no line for {row}: {lines}"
    here = CliRunner().invoke(main, ["variants", *flag])
    assert here.exit_code == 0 and f"this machine: {here_target}" in here.output
    table = here.output.split("registered variants")[0].splitlines()[2:]
    targets = {ln.split()[1] for ln in table if ln.split()[:1] in (["decode"], ["prefill"], ["topk"])}
    assert targets == {here_target}, table
    for op, registered in hv.REGISTRY.items():
        for v in registered:
            assert f"{op.value:8s} {v.name:26s}" in here.output


def test_every_registered_variant_is_a_default_somewhere():
    """A variant that is the default nowhere is deleted (its numbers stay in docs/perf, its code in git history)."""
    named = {(row.op, row.variant) for row in hv.DEFAULTS}
    nowhere = [f"{op.value}/{v.name}" for op, registered in hv.REGISTRY.items() for v in registered
               if (op, v.name) not in named]
    assert not nowhere, f"variants that are the default nowhere: {nowhere}"


def test_every_variants_settings_share_one_schema():
    """Every registered variant's settings, on every target it runs on, are a LaunchSettings record: its fields
    replace by name, and a name it lacks is a TypeError that lists the fields it has."""
    from hw._topk_details.variants import TopKCall
    from hw.targets import LaunchSettings

    scorer = SimpleNamespace(num_heads=32, next_n=1, page_size=64, head_dim=128)
    topk = TopKCall(torch.zeros(2, 64), torch.full((2,), 64, dtype=torch.int32), None,
                    torch.empty(2, 16, dtype=torch.int32))
    checked = 0
    for op, registered in hv.REGISTRY.items():
        for v in registered:
            for target in sorted(v.targets, key=lambda t: t.value):
                settings = v.settings(target, topk if op is Op.TOPK else scorer)
                assert isinstance(settings, LaunchSettings), (v.name, target, type(settings))
                first = settings.field_names()[0]
                assert settings.replace(**{first: getattr(settings, first)}) == settings
                with pytest.raises(TypeError, match=f"no field 'no_such_field'; its fields: {first}, "):
                    settings.replace(no_such_field=1)
                checked += 1
    assert checked >= sum(len(r) for r in hv.REGISTRY.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a process whose kernels are compiled for a GPU")
def test_mxidx_variants_on_the_cpu_after_compiled_kernels_is_a_clear_error(monkeypatch):
    """In a process that imported hw's compiled kernels, --device cpu cannot be honoured: a clear error, not the
    GPU's table under the CPU's name."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)   # --device cpu sets it: restored after the test
    result = CliRunner().invoke(main, ["variants", "--device", "cpu"])
    assert result.exit_code == 2 and "run `mxidx variants --device cpu` in a fresh process" in result.output


def test_isa_target_names_round_trip():
    """Target.of_isa inverts Target.isa_target for the cross-compiled targets and refuses other names."""
    for target in (Target.NVIDIA, Target.AMD):
        assert Target.of_isa(target.isa_target) is target
    assert Target.INTERPRETER.isa_target is None
    for name in ("sm80", None):
        with pytest.raises(ValueError, match=f"no target cross-compiles as {name!r}"):
            Target.of_isa(name)
