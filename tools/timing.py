"""GPU timers: how `mxidx bench`, `tools.tune`, `tools.bench_cp` and the probes of tools/probes time a call.

graph_time_us   the median time of one call over replays of a CUDA graph that holds the calls back to back (launch
                gaps amortised as in a captured decode step); the figure every benchmark of this package reports.
eager_time_us   the mean time of one call over eager back-to-back calls, for calls that cannot be captured (host
                lengths, host syncs).

Both run on the current CUDA device and synchronize it; torch is imported when a timer is called, so that importing
this module needs no GPU stack.
"""
from __future__ import annotations

import statistics


def graph_time_us(fns, *, inner: int, replays: int) -> float:
    """Median time of one call in microseconds, from `replays` replays of a graph holding `inner` calls that cycle
    through `fns` (several input sets, so that repeated calls do not just re-read the L2: the H200's is 60 MB).

    Each of `fns` is called once outside the capture first (compiling what it launches), then `inner` times inside
    it; the graph is replayed once untimed before the timed replays. `fns` must be capturable: no host syncs, no
    allocations that change between calls."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up (compiles) outside capture
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(inner):
            fns[i % len(fns)]()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / inner)
    return statistics.median(times)


def eager_time_us(fn, *, iters: int) -> float:
    """Mean time of one call in microseconds over `iters` back-to-back eager calls (after one warm-up call), from
    CUDA events around the whole run."""
    import torch

    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / iters
