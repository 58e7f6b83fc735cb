"""The ``gpt2`` workload: GPT-2 small's shape at full (built on the meta device, never
trained here), one FLOPs formula that matches torch's counter and nanoGPT's estimate at
every profile, the padded vocabulary, and a tiny epoch through the real CLI.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from parabench.case.result import read_results
from parabench.config import ConfigError
from parabench.registry import workloads
from parabench.workload import Dataset

PROFILES = ("tiny", "quick", "full")


def stub(profile: str, seq_len: int, top_id: int = 5) -> Dataset:
    """Two sequences of the profile's context: enough for ``shape()`` without making the data
    (full's takes seconds)."""
    x = np.full((2, seq_len), top_id, dtype=np.int64)
    return Dataset(x_train=x, y_train=x, x_test=x, y_test=x, profile=profile)


def gpt2_shape(profile: str):  # noqa: ANN201 (GPTShape: torch stays a lazy import)
    wl = workloads.get("gpt2")
    return wl.shape(stub(profile, wl.sizes[profile].seq_len))


def meta_model(profile: str):  # noqa: ANN201
    torch = pytest.importorskip("torch")
    from parabench.workloads.models.gpt import build_gpt

    with torch.device("meta"):  # shapes only: no memory, no init cost
        return build_gpt(gpt2_shape(profile), seed=0)


def test_gpt2_is_gpt_with_its_own_table_and_gpt_keeps_its_size() -> None:
    gpt, gpt2 = workloads.get("gpt"), workloads.get("gpt2")
    assert isinstance(gpt2, type(gpt)) and gpt2.name == "gpt2"
    assert (gpt.sizes["full"].layers, gpt.sizes["full"].width) == (4, 128)
    assert gpt2.default_batch_size("full") == 32 and gpt2.smoke_rank is None
    assert gpt2.quality == gpt.quality


@pytest.mark.torch
def test_full_is_gpt2_smalls_shape_with_an_untied_head() -> None:
    """12 x 768, 12 heads, context 512, vocabulary 50,304. The head is untied (FSDP units and
    pipeline stages must own disjoint parameters): 162.8 M parameters, 124.1 M with the
    head's weight counted once as GPT-2 ties it; GPT-2 small's 124.4 M is at context 1,024
    (+393 K), vocabulary 50,257 (-36 K) and with a key bias (+9 K) and no head bias (-50 K)."""
    from parabench.workloads.models.gpt import Block

    model = meta_model("full")
    blocks = [m for m in model if isinstance(m, Block)]
    assert len(blocks) == 12
    assert blocks[0].attn.wq.in_features == 768 and blocks[0].attn.head_dim == 64  # 12 heads
    assert blocks[0].mlp.fc.out_features == 4 * 768
    assert model[0].pos.num_embeddings == 512
    assert model[0].tok.num_embeddings == model[-1].out.out_features == 50_304
    assert model[0].tok.weight is not model[-1].out.weight
    total = sum(p.numel() for p in model.parameters())
    assert total == 162_757_248
    tied = total - model[-1].out.weight.numel()
    assert tied == 124_123_776
    assert tied == 124_439_808 - 512 * 768 + 47 * 768 - 12 * 768 + 50_304


@pytest.mark.torch
def test_full_has_a_tensor_parallel_plan_and_a_sequential_view() -> None:
    wl, model = workloads.get("gpt2"), meta_model("full")
    plan = wl.tp_plan(model)
    assert plan is not None and dict(plan.divides) == {"heads": 12, "width": 768,
                                                      "MLP width": 3072}
    assert len(plan.colwise) == 4 * 12 and len(plan.rowwise) == 2 * 12
    assert plan.seq_len == 512
    assert wl.sequential(model) is model  # pipeline / model_parallel cut it between blocks


@pytest.mark.torch
@pytest.mark.parametrize("profile", PROFILES)
def test_flops_per_token_is_nanogpts_6n_plus_the_attention_term(profile: str) -> None:
    """nanoGPT's estimate: 6 N + 12 L T w per token, N the weight matrices (the head's
    counted, as GPT-2's tied embedding is; no biases, norms or position table)."""
    from torch import nn

    wl, shape, model = workloads.get("gpt2"), gpt2_shape(profile), meta_model(profile)
    matrices = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    expected = 6 * matrices + 12 * shape.layers * shape.seq_len * shape.width
    assert shape.flops_per_token() == expected
    data = stub(profile, shape.seq_len)
    assert wl.model_flops_per_sample(data) == expected * shape.seq_len
    if profile == "full":  # the figure the docstring states
        assert shape.flops_per_token() == 798_031_872
        assert wl.model_flops_per_sample(data) == pytest.approx(408.6e9, rel=1e-4)


@pytest.mark.torch
@pytest.mark.parametrize("profile", ["tiny", "quick"])
def test_flops_formula_matches_torchs_flop_counter(profile: str) -> None:
    """One training step counted by ``torch.utils.flop_counter``: equal to the formula, to
    the FLOP. Both count the matmuls (2 per multiply-add, backward twice forward) and neither
    counts embedding lookups, norms, GELU or softmax. Attention runs on SDPA's math backend
    here, two batched matmuls over the whole T x T (the causal mask applied after), as the
    formula counts it; the CPU flash kernel is not counted by the counter at all (the
    formula's 12 L T w would be missing)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from parabench.workloads.gpt import lm_loss
    from parabench.workloads.models.gpt import build_gpt

    wl = workloads.get("gpt2")
    data = wl.make_data(profile, 0)
    model, n = build_gpt(wl.shape(data), seed=0), 3
    x, y = (torch.as_tensor(a[:n]) for a in (data.x_train, data.y_train))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        lm_loss(model(x), y).backward()
    assert counter.get_total_flops() / n == wl.model_flops_per_sample(data)


def test_the_model_vocabulary_is_the_profiles_padded_one() -> None:
    wl = workloads.get("gpt2")
    data = wl.make_data("tiny", 0)
    assert int(data.x_train.max()) < 32 < wl.shape(data).vocab == 256  # a corner is used
    assert all(wl.sizes[p].vocab % 64 == 0 for p in PROFILES)
    with pytest.raises(ConfigError, match="vocabulary of 256; the data uses 301"):
        wl.shape(stub("tiny", 32, top_id=300))


def test_a_text_file_trains_at_the_padded_vocabulary(tmp_path: Path) -> None:
    path = tmp_path / "tale.txt"
    path.write_text("It was the best of times, it was the worst of times.\n" * 40,
                    encoding="utf-8")
    wl = workloads.get("gpt2")
    data = wl.make_data("tiny", 0, data_dir=str(path))
    assert len(data.vocab) < 256 and wl.shape(data).vocab == 256


@pytest.mark.slow
def test_full_data_is_made_in_seconds_and_holds_out_256_sequences() -> None:
    start = time.perf_counter()
    data = workloads.get("gpt2").make_data("full", 0)
    elapsed = time.perf_counter() - start
    assert data.x_train.shape == (8_192, 512) and data.x_test.shape == (256, 512)
    assert int(data.x_train.max()) < 32
    assert elapsed < 10, elapsed  # 0.8 s here (2 busy cores), 0.9 s on the H200 machine


@pytest.mark.torch
@pytest.mark.slow
def test_tiny_trains_an_epoch_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "parabench", "run", "--workload", "gpt2", "--method", "serial",
         "--profile", "tiny", "--epochs", "1", "--steps", "0", "--out", str(out)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = read_results(out)
    assert r.status == "ok" and r.workload == "gpt2", r.reason
    wl = workloads.get("gpt2")
    assert r.flops_per_sample == wl.model_flops_per_sample(wl.make_data("tiny", 0)) > 0
    assert len(r.loss) == 1 and np.isfinite(r.loss).all()
    data = wl.make_data("tiny", 0)
    majority = float((data.y_test == np.bincount(data.y_train.ravel()).argmax()).mean())
    assert r.quality is not None and r.quality.value > majority + 0.05, (r.quality, majority)
