"""Model parallelism's cut: a network as a sequence of layers, what each layer costs in memory,
and the cut points that balance that cost over k devices.

The cut is the harness's choice, not a hand-written one for two GPUs: ``split_balanced`` takes
one size per layer and returns the cut points that minimise the largest stage, so the same code
cuts ResNet50 over 2 GPUs or the transformer over 8.
"""
from __future__ import annotations


def split_balanced(sizes, k: int) -> list[int]:
    """Cut points ``c_1 < ... < c_{k-1}``: stage j holds layers ``[c_j, c_{j+1})`` (with
    ``c_0 = 0`` and ``c_k = len(sizes)``), each stage non-empty, the largest stage sum as small
    as it can be. Among equally good cuts, each stage takes as many layers as fit, front first,
    so that the answer is unique."""
    n = len(sizes)
    if not 1 <= k <= n:
        raise ValueError(f"cannot cut {n} layer(s) into {k} non-empty stage(s): use at most {n} devices")
    bound = _smallest_largest_stage(list(sizes), k)
    return _greedy_cuts(list(sizes), k, bound)


def _smallest_largest_stage(sizes: list, k: int):
    """Dynamic programme over prefixes: best[j][i] is the smallest possible largest stage when
    the first i layers form j stages. n is tens of layers, so O(k n^2) costs nothing."""
    n = len(sizes)
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0
    for j in range(1, k + 1):
        for i in range(j, n + 1):
            best[j][i] = min(max(best[j - 1][c], prefix[i] - prefix[c]) for c in range(j - 1, i))
    return best[k][n]


def _greedy_cuts(sizes: list, k: int, bound) -> list[int]:
    cuts, start = [], 0
    for stage in range(k - 1):
        end, total = start, 0
        left_for_others = k - stage - 1  # every later stage needs one layer at least
        while end < len(sizes) - left_for_others and total + sizes[end] <= bound:
            total += sizes[end]
            end += 1
        end = max(end, start + 1)
        cuts.append(end)
        start = end
    return cuts


def cut_after(layers, last) -> list[int]:
    """The cut that ends stage 0 with module ``last`` (a hand-made cut of two stages, such as the
    model-parallel tutorial's after ResNet50's ``layer2``): ``last`` is one of ``layers``, or a
    container whose modules end stage 0."""
    ends = [i for i, layer in enumerate(layers) if layer is last or any(layer is m for m in last.modules())]
    if not ends or ends[-1] == len(layers) - 1:
        raise ValueError(f"{type(last).__name__} ends no stage of these {len(layers)} layers: cut after a module "
                         "among them that is not the last")
    return [ends[-1] + 1]


def stage_ranges(cuts: list[int], n: int) -> list[tuple[int, int]]:
    edges = [0, *cuts, n]
    return list(zip(edges[:-1], edges[1:]))


# ---- layers and what they cost --------------------------------------------------------------

def layer_bytes(layers, example) -> list[int]:
    """Per layer: parameter bytes twice (weights and their gradients; SGD without momentum keeps
    no other state) plus an estimate of the activations it keeps for backward: the outputs of
    all its leaf modules at this batch. Shapes come from a run on the meta device, so estimating
    ResNet50 at 1024 x 1024 costs no memory and no arithmetic."""
    import copy

    x = example.to("meta")
    sizes = []
    for layer in layers:
        meta = copy.deepcopy(layer).to("meta")
        kept, x = _leaf_output_bytes(meta, x)
        params = sum(p.numel() * p.element_size() for p in layer.parameters())
        sizes.append(2 * params + kept)
    return sizes


def _leaf_output_bytes(module, x):
    """The bytes of the outputs of ``module``'s leaves on ``x``, and its own output."""
    import torch
    total = [0]

    def count(_m, _inp, out):
        if torch.is_tensor(out):
            total[0] += out.numel() * out.element_size()

    leaves = [m for m in module.modules() if not list(m.children())] or [module]
    handles = [m.register_forward_hook(count) for m in leaves]
    try:
        with torch.no_grad():
            out = module(x)
    finally:
        for h in handles:
            h.remove()
    return total[0], out
