"""`mxidx bench`: the GPU-only command refuses a CPU machine clearly; its input builder runs on any device."""
from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from tools.cli import main
from tools.cmd_bench import decode_inputs


def test_bench_without_gpu_exits_2(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = CliRunner().invoke(main, ["bench"])
    assert result.exit_code == 2
    assert "sees no GPU" in result.output and "mxidx diff --quick" in result.output


@pytest.mark.parametrize("kv_dtype,layout,bpt,q_bytes_per_head", [
    ("fp8", None, 64 + 4, 64),                  # e4m3 values + fp32 scale; q: D e4m3 bytes
    ("mxfp4", None, 32 + 2, 32 + 2),            # D/2 codes + D/32 E8M0; q the same per head
])
def test_decode_inputs_run_and_count_bytes(kv_dtype, layout, bpt, q_bytes_per_head, device):
    batch, next_n, heads, head_dim, context, page = 2, 2, 3, 64, 40, 16
    call, moved = decode_inputs(kv_dtype, device.type, batch=batch, next_n=next_n, heads=heads, head_dim=head_dim,
                                context=context, page_size=page, layout=layout)
    logits = call()
    assert logits.shape == (batch * next_n, context) and logits.dtype == torch.float32
    # 1-D context lens: row n of a sequence sees context - next_n + n + 1 keys (DESIGN §4)
    for n in range(next_n):
        visible = context - next_n + n + 1
        assert torch.isfinite(logits[n::next_n, :visible]).all()
    want = (batch * context * bpt + batch * next_n * heads * q_bytes_per_head + batch * next_n * heads * 4
            + batch * next_n * context * 4)
    assert moved == want
