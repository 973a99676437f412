"""count --gpu / trace --gpu: the catalogue against the vendors' published figures, and the roofline's
arithmetic against hand derivations from the hyperparameters (the reference block: d 512, h 8, d_h 64,
d_ff 2048, GELU, one layer, no vocabulary)."""

import json
import math

import pytest
from typer.testing import CliRunner

from blockcli.cli import app
from blockcli.hardware import PEAK_DTYPES, catalogue, load_gpu

runner = CliRunner()
d, h, d_h, d_ff = 512, 8, 64, 2048
PARAMS = 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 4 * d  # Q, K, V, O with biases; MLP with biases; 2 LayerNorms
H100_BF16, H100_BW = 989.4e12, 3.35e12  # NVIDIA H100 SXM: dense BF16 989.4 TFLOPS, 3.35 TB/s


def count_json(*args):
    out = runner.invoke(app, ["count", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_catalogue_has_the_issues_devices_each_value_with_a_source():
    names = set(catalogue())
    assert {"H100 SXM", "H100 PCIe", "H200", "B200", "A100 40GB", "A100 80GB", "L40S", "L4", "RTX 4090",
            "MI300X"} <= names
    for gpu in catalogue().values():
        assert gpu.sources and all(s["url"].startswith("https://") and s["document"] for s in gpu.sources)
        assert set(gpu.peak_flops) <= set(PEAK_DTYPES) and "bf16" in gpu.peak_flops
        assert gpu.memory_bytes > 0 and gpu.bandwidth > 0


@pytest.mark.parametrize("name, bf16, bandwidth, memory", [
    ("H100 SXM", 989.4e12, 3.35e12, 80e9),  # NVIDIA H100 whitepaper / datasheet
    ("H100 PCIe", 756.5e12, 2.0e12, 80e9),
    ("A100 80GB", 312e12, 2.039e12, 80e9),  # NVIDIA A100 datasheet: BF16 312 (624 with sparsity), 2,039 GB/s SXM
    ("A100 40GB", 312e12, 1.555e12, 40e9),
    ("MI300X", 1307.4e12, 5.3e12, 192e9),  # AMD MI300X data sheet
    ("L40S", 362.05e12, 864e9, 48e9),  # NVIDIA L40S datasheet: 362.05 | 733*
])
def test_dense_figures_are_the_datasheets(name, bf16, bandwidth, memory):
    gpu = catalogue()[name]
    assert math.isclose(gpu.peak_flops["bf16"], bf16) and math.isclose(gpu.bandwidth, bandwidth)
    assert gpu.memory_bytes == memory


def test_names_are_matched_in_any_case_and_spelling():
    assert load_gpu("h100-sxm").name == load_gpu("H100 SXM").name == load_gpu("h100_sxm").name == "H100 SXM"


def test_prefill_by_hand_on_h100():
    T, B = 2048, 1
    data = count_json("--gpu", "h100", "--seq", str(T), "--batch", str(B), "--dtype", "bfloat16")
    p = data["roofline"]["prefill"]
    flops = 2 * B * T * (4 * d * d + 2 * d * d_ff) + 2 * B * h * 2 * d_h * T * (T + 1) // 2  # causal scores
    weights = 2 * PARAMS
    kv = 2 * h * d_h * T * B * 2  # K and V written, bf16
    activations = 2 * B * T * (2 * d + 2 * d_ff) * 2  # residual + normed input + the MLP half, written and read
    assert p["flops"] == flops == 17_181_966_336
    assert p["bytes"] == {"weights": weights, "kv_cache_written": kv, "activations": activations, "logits": 0}
    moved = weights + kv + activations
    assert p["bytes_moved"] == moved == 52_442_112
    assert math.isclose(p["seconds"], max(flops / H100_BF16, moved / H100_BW))
    assert p["bound"] == "compute" and math.isclose(p["seconds"], 1.73661e-5, rel_tol=1e-5)
    assert math.isclose(p["arithmetic_intensity"], flops / moved)
    assert math.isclose(p["tokens_per_second"], B * T / p["seconds"])


def test_decode_by_hand_on_h100():
    T, B = 2048, 1
    data = count_json("--gpu", "H100 SXM", "--seq", str(T), "--batch", str(B), "--dtype", "bfloat16")
    p = data["roofline"]["decode_step"]
    flops = 2 * (4 * d * d + 2 * d * d_ff) + 2 * h * 2 * d_h * T  # one token through the matrices, T keys
    moved = 2 * PARAMS + 2 * h * d_h * T * 2 + 2 * h * d_h * 2 + 2 * (2 * d + 2 * d_ff) * 2
    assert p["flops"] == flops == 10_485_760
    assert p["bytes_moved"] == moved == 10_521_600
    assert p["bound"] == "memory"
    assert math.isclose(p["seconds"], moved / H100_BW)  # 3.1408 µs
    assert math.isclose(p["tokens_per_second"], 1 / (moved / H100_BW))


def test_training_time_at_mfu_and_gpus_needed_by_hand():
    T, B = 1024, 4
    data = count_json("--gpu", "a100-80gb", "--seq", str(T), "--batch", str(B), "--train", "--dp", "8",
                      "--mfu", "0.5")
    t = data["roofline"]["training"]
    sequences = B * 8
    forward = 2 * sequences * T * (4 * d * d + 2 * d * d_ff) + 2 * sequences * h * 2 * d_h * T * T  # full table
    assert t["model_flops"] == 3 * forward  # forward + backward (2×)
    assert math.isclose(t["seconds_per_step"], 3 * forward / (8 * 312e12 * 0.5))
    assert t["tokens"] == sequences * T
    # ZeRO-3 over N: 16·Ψ/N + 4·(largest module: the MLP's first matrix and bias) + activations <= 80 GB
    needed = data["roofline"]["gpus_needed"]
    acts = data["training"]["activations"]["total"]
    assert needed["budget_bytes"] == 80 * 10**9
    assert needed["training"] == -(-16 * PARAMS // (80 * 10**9 - acts - 4 * (d * d_ff + d_ff))) == 1


def test_gpus_needed_to_serve_divides_the_memory():
    data = count_json("llama-3-8b", "--gpu", "l4", "--seq", "8192", "--dtype", "bfloat16")
    memory = data["inference"]["memory_bytes"]
    assert data["roofline"]["gpus_needed"]["inference"] == -(-memory // (24 * 10**9))


def test_a_mixture_of_experts_decode_reads_only_the_experts_a_batch_can_reach():
    one = count_json("mixtral-8x7b", "--gpu", "h100", "--seq", "1024", "--batch", "1", "--dtype", "bfloat16")
    many = count_json("mixtral-8x7b", "--gpu", "h100", "--seq", "1024", "--batch", "8", "--dtype", "bfloat16")
    # 2 of 8 experts per token: a batch of 1 reads the active parameters, a batch of 4 or more all of them
    assert one["roofline"]["decode_step"]["bytes"]["weights"] == 2 * one["active_per_token"]
    assert many["roofline"]["decode_step"]["bytes"]["weights"] == 2 * many["total"]


def test_a_device_yaml(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("peak_tflops: {bf16: 100}\nmemory_gb: 16\nbandwidth_gb_s: 1000\n")
    data = count_json("--gpu", str(f), "--dtype", "bfloat16")
    assert data["roofline"]["gpu"]["name"] == "mine" and data["roofline"]["peak_flops"] == 100e12


@pytest.mark.parametrize("text, field", [
    ("peak_tflops: {bf16: 100}\nbandwidth_gb_s: 1000\n", "memory_gb"),
    ("peak_tflops: {bf16: -1}\nmemory_gb: 16\nbandwidth_gb_s: 1000\n", "peak_tflops.bf16"),
    ("peak_tflops: {bf17: 1}\nmemory_gb: 16\nbandwidth_gb_s: 1000\n", "peak_tflops.bf17"),
    ("peak_tflops: {bf16: 1}\nmemory_gb: 16\nbandwidth_gb_s: 1000\ncolour: red\n", "colour"),
    ("memory_gb: 16\nbandwidth_gb_s: 1000\n", "peak_tflops"),
])
def test_a_bad_device_yaml_exits_2_naming_the_field(tmp_path, text, field):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    out = runner.invoke(app, ["count", "--gpu", str(f)])
    assert out.exit_code == 2 and field in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_unknown_gpu_exits_2_listing_the_catalogue():
    out = runner.invoke(app, ["count", "--gpu", "H900"])
    assert out.exit_code == 2
    line = out.stderr.strip()
    assert len(line.splitlines()) == 1 and "H900" in line and all(n in line for n in catalogue())


@pytest.mark.parametrize("args, expected", [
    (["--mfu", "0.5"], "--mfu"),
    (["--gpu", "h100", "--train", "--mfu", "1.5"], "--mfu"),
    (["--gpu", "h100", "--dtype", "int4"], "int4"),  # the H100's datasheet gives no int4 peak
])
def test_bad_roofline_options_exit_2(args, expected):
    out = runner.invoke(app, ["count", *args])
    assert out.exit_code == 2 and expected in out.stderr, out.output


def test_one_operations_bytes_by_hand():
    from blockcli.roofline import op_bytes

    # q_proj of the reference block at B=2, T=5, float32: x (2, 5, 512) and W (512, 512) read, the bias (512) too,
    # (2, 5, 512) written; a reshape is a view; a gather reads the int64 ids and the rows it picks
    read, written = op_bytes("linear", [(2, 5, 512), (512, 512)], [1, None], (2, 5, 512), 512 * 512 + 512, 4)
    assert (read, written) == (4 * (2 * 5 * 512 + 512 * 512 + 512), 4 * 2 * 5 * 512)
    assert op_bytes("reshape", [(2, 5, 512)], [3], (2, 8, 5, 64), 0, 4) == (0, 0)
    assert op_bytes("gather", [(1, 8), (50257, 768)], [0, None], (1, 8, 768), 50257 * 768, 4) == \
        (8 * 8 + 4 * 8 * 768, 4 * 8 * 768)


def test_trace_gpu_times_each_operation_by_hand():
    out = runner.invoke(app, ["trace", "--shapes-only", "--gpu", "h100", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    ops = {o["key"]: o for o in data["roofline"]["ops"]}
    q = ops["q_proj"]  # B=2, T=5, float32 on H100 SXM's fp32 66.9 TFLOP/s, 3.35 TB/s
    read, written = 4 * (2 * 5 * d + d * d + d), 4 * 2 * 5 * d
    flops = 2 * 2 * 5 * d * d + 2 * 5 * d  # the product and the bias add
    assert (q["read_bytes"], q["written_bytes"]) == (read, written)
    assert q["bound"] == "memory" and math.isclose(q["seconds"], max(flops / 66.9e12, (read + written) / H100_BW))
    assert ops["q"]["seconds"] == 0 and ops["q"]["bound"] == "none"  # split heads: a view


def test_trace_gpu_refuses_a_format_it_has_no_form_for():
    out = runner.invoke(app, ["trace", "--shapes-only", "--gpu", "h100", "--format", "mermaid"])
    assert out.exit_code == 2 and "--gpu" in out.stderr
