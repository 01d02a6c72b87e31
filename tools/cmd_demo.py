"""`mxidx demo`: the reference DeepSeek-style model through prefill + decode with the indexer hook.

The device is chosen (tools.runtime.choose_device) before integration/ and hw/ are imported: TRITON_INTERPRET must
be set before the kernels are defined.
"""
from __future__ import annotations

import time

import click

from .runtime import BadInput, choose_device

DEMO_ATTENTION_CONFIG = '{"indexer_kv_dtype": "mxfp4"}'
#: the hook's top_k limit, hw.topk.MAX_K (not imported here: hw is imported after the device is chosen)
MAX_TOP_K = 2048


@click.command()
@click.option("--attention-config", "attention_config", default=DEMO_ATTENTION_CONFIG, show_default=True,
              metavar="JSON",
              help="Indexer settings (keys: indexer_kv_dtype fp8|mxfp4, indexer_layout mxfp4|mxfp4_tiled, "
                   "indexer_scale_rule rceil|floor|even|ceil, also spelt scale_rule). The demo shows MXFP4 unless "
                   "told otherwise; in a serving config an absent indexer_kv_dtype means fp8.")
@click.option("--layers", type=click.IntRange(min=1), default=None,
              help="Indexer layers (default 2 on the CPU, 4 on a GPU).")
@click.option("--prompt-len", type=click.IntRange(min=1), default=None,
              help="Prompt tokens (default 1024 on the CPU, 8192 on a GPU).")
@click.option("--decode-steps", type=click.IntRange(min=0), default=None,
              help="Decode steps after the prefill (default 8 on the CPU, 16 on a GPU).")
@click.option("--heads", type=click.IntRange(min=1), default=None, help="Indexer heads H (default 8 CPU, 32 GPU).")
@click.option("--top-k", type=click.IntRange(min=1), default=None,
              help=f"k of the hook and of recall@k, at most {MAX_TOP_K} (default prompt/16: 64 for 1024 tokens; "
                   f"{MAX_TOP_K} from 8K prompts on).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="auto: the GPU when present, else the CPU through the Triton interpreter.")
def demo(attention_config, layers, prompt_len, decode_steps, heads, top_k, device):
    """Run a small DeepSeek-style multi-layer model through prefill + decode with the indexer hook; print timings,
    the gate decision, cache bytes per token and recall@k against a bf16 reference, with and without the
    Hadamard rotation."""
    try:
        device = choose_device(device)
    except RuntimeError as e:
        raise BadInput(str(e)) from None
    from integration.config import IndexerConfig  # after choose_device: imports hw
    from integration.demo import DemoSettings, check_fits, format_report, run_demo

    try:
        if not attention_config.strip():   # a serving config reads "" as the FP8 default; the demo's is MXFP4
            raise ValueError(f"--attention-config is empty; leave the option out for the demo's default "
                             f"{DEMO_ATTENTION_CONFIG} or give a JSON object such as "
                             '\'{"indexer_kv_dtype": "fp8"}\'')
        config = IndexerConfig.from_json(attention_config)
        settings = DemoSettings.for_device(device, num_layers=layers, num_heads=heads, prompt_len=prompt_len,
                                           decode_steps=decode_steps, top_k=top_k)
        check_fits(settings, device)
    except ValueError as e:        # one line, exit status 2, before any kernel runs
        raise BadInput(str(e)) from None
    start = time.perf_counter()

    def progress(message: str) -> None:
        click.echo(f"[{time.perf_counter() - start:7.1f} s] {message}", err=True)

    result = run_demo(config, settings, device, progress=progress)
    click.echo(format_report(result))
    click.echo(f"total             {time.perf_counter() - start:.1f} s")
