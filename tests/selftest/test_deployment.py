"""``sglang-aiter-plugin selftest [sglang server arguments]``: the cases an operator's own
configuration takes, built through sglang's own parser from a config-only model folder, and run
on the CPU (the eager and metadata forms) as ``test_cli.py`` runs the self-test's own cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from sglang_aiter_plugin._sglang import installed_sglang_version
from testkit.sglang_setup import write_model_dir
from testkit.subproc import run_python
from tests.selftest.test_cli import NEEDS_AITER, selftest

_RELEASE = installed_sglang_version()
DP2 = (["--attn-dp-size", "2"] if _RELEASE is None or _RELEASE >= Version("0.5.22")
       else ["--dp-size", "2", "--enable-dp-attention"])
"""Two attention-DP ranks, in the installed release's words (--attn-dp-size is 0.5.22's)."""

PLANS = """
import dataclasses, os
from sglang_aiter_plugin.selftest.deployment import plan
out = {{}}
for label, args, env in {plans!r}:
    os.environ.update(env)
    try:
        p = plan(args, "cpu")
    finally:
        for name in env:
            os.environ.pop(name, None)
    out[label] = dict(notes=list(p.notes), cases=[dict(
        name=c.name, path=c.path, page=c.page, form=c.form, skip=c.skip, why=c.describe(),
        gpu_only=c.gpu_only,
        deployment=dataclasses.asdict(c.deployment)) for c in p.cases])
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    swa = write_model_dir(root / "swa")
    config = json.loads((swa / "config.json").read_text())
    (swa / "config.json").write_text(json.dumps({**config, "sliding_window": 128}))
    return {"llama": write_model_dir(root / "llama"),
            "deepseek": write_model_dir(root / "deepseek", mla=True, aiter_mla_dims=True),
            "swa": swa}


@pytest.fixture(scope="module")
def plans(models: dict[str, Path]) -> dict[str, Any]:
    llama, deepseek = str(models["llama"]), str(models["deepseek"])
    spec = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
            "--speculative-num-draft-tokens", "4"]
    cases = [
        ("llama", ["--model-path", llama, "--page-size", "16", "--tp-size", "2"], {}),
        ("llama-unified", ["--model-path", llama, "--page-size", "16"],
         {"SGLANG_USE_AITER_UNIFIED_ATTN": "1"}),
        ("llama-no-graphs", ["--model-path", llama, "--disable-cuda-graph"], {}),
        ("deepseek", ["--model-path", deepseek, "--tp-size", "4", *DP2,
                      "--max-running-requests", "66", "--kv-cache-dtype", "fp8_e4m3",
                      "--attention-backend", "aiter"], {}),
        ("deepseek-mtp", ["--model-path", deepseek, *spec, "--speculative-eagle-topk", "1"], {}),
        ("deepseek-mtp-topk2", ["--model-path", deepseek, *spec, "--speculative-eagle-topk", "2"],
         {}),
        ("llama-eagle", ["--model-path", llama, "--speculative-algorithm", "EAGLE",
                         "--speculative-draft-model-path", llama, "--speculative-num-steps", "3",
                         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
         {}),
        ("swa", ["--model-path", str(models["swa"])], {}),
    ]
    result = run_python(PLANS.format(plans=cases))
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = result.data
    return data


def names(plan: dict[str, Any]) -> list[str]:
    return [c["name"] for c in plan["cases"]]


def test_a_llama_class_config_takes_its_page_size_and_its_heads_per_tp_rank(
        plans: dict[str, Any]) -> None:
    """4 query and 2 KV heads over TP 2: 2 and 1 a rank; page 16; the decode graphs and the eager
    batch, both on the ragged path; the self-test's own pool where none is given, said so."""
    plan = plans["llama"]
    assert names(plan) == ["ragged-page16-graphs", "ragged-page16-eager"]
    for case in plan["cases"]:
        assert case["path"] == "ragged"
        assert case["page"] == 16
        assert not case["skip"]
        assert case["deployment"]["attn_tp"] == 2
        assert case["deployment"]["attn_dp"] == 1
        assert case["deployment"]["pool"] == 33
        assert "2 query / 1 KV heads a rank, head size 64, page size 16" in case["why"]
    assert "MLP sync" not in plan["cases"][1]["why"]  # plain TP: nothing pads the eager batch
    assert any("--max-running-requests for yours" in n for n in plan["notes"])


def test_the_unified_path_comes_from_sglangs_own_switch(plans: dict[str, Any]) -> None:
    assert names(plans["llama-unified"]) == ["unified-page16-graphs", "unified-page16-eager"]


def test_graphs_off_leaves_only_the_eager_batch(plans: dict[str, Any]) -> None:
    plan = plans["llama-no-graphs"]
    assert names(plan) == ["ragged-page1-eager"]
    assert "decode CUDA graphs are off" in plan["cases"][0]["why"]


def test_a_deepseek_class_mla_config_under_dp_attention(plans: dict[str, Any]) -> None:
    """16 heads over attention TP 2 (TP 4, two attention-DP ranks): 8 a rank over one latent
    head; the pool is --max-running-requests over the DP ranks; MLP sync pads the eager batch
    beside the other rank; the self-test sets the backend itself, and says so."""
    plan = plans["deepseek"]
    assert names(plan) == ["mla-page1-graphs", "mla-page1-eager"]
    for case in plan["cases"]:
        assert case["deployment"]["attn_tp"] == 2
        assert case["deployment"]["attn_dp"] == 2
        assert case["deployment"]["pool"] == 33
        assert "8 query heads a rank over one latent KV head (512 + 64)" in case["why"]
        assert "KV cache fp8_e4m3" in case["why"]
        assert "--attention-backend" not in case["deployment"]["args"]
    assert "padded by MLP sync beside 1 other attention-DP rank(s) of 33" in \
        plan["cases"][1]["why"]
    assert "request pool 33 a rank: --max-running-requests 66 over 2 attention-DP rank(s)" in \
        plan["notes"]
    assert any(n.startswith("--attention-backend aiter set aside") for n in plan["notes"])


def test_an_fp8_mla_deployment_takes_the_persistent_kernel_which_runs_on_a_gpu_only(
        plans: dict[str, Any]) -> None:
    """An fp8 KV cache takes aiter's persistent MLA kernel, whose schedule sglang allocates on
    CUDA: on the CPU form each case says so (and is skipped); a bf16 one does neither."""
    for case in plans["deepseek"]["cases"]:
        assert "aiter's persistent MLA kernel" in case["why"]
        assert case["gpu_only"].startswith("sglang allocates the persistent MLA kernel's work "
                                           "schedule on CUDA"), case
    for case in plans["deepseek-mtp"]["cases"]:
        assert "persistent" not in case["why"]
        assert case["gpu_only"] == ""


def test_speculative_decoding_runs_the_target_verify_batches_of_a_top_1_llama(
        plans: dict[str, Any]) -> None:
    """EAGLE top-1 on the ragged path: the target's target-verify graphs and eager batch run (4
    draft tokens a request), the draft wrapper's metadata runs; draft extend is listed as
    skipped with why."""
    plan = plans["llama-eagle"]
    assert names(plan) == ["ragged-page1-verify-graphs", "draft-page1-metadata",
                           "ragged-page1-draft-extend-graphs", "ragged-page1-verify-eager"]
    cases = {c["name"]: c for c in plan["cases"]}
    for name in ("ragged-page1-verify-graphs", "ragged-page1-verify-eager",
                 "draft-page1-metadata"):
        assert cases[name]["skip"] == "", cases[name]
    for name in ("ragged-page1-verify-graphs", "ragged-page1-verify-eager"):
        assert cases[name]["path"] == "ragged"
        assert "target-verify batches (EAGLE, 3 steps, top-1, 4 draft tokens a request" in \
            cases[name]["why"]
    assert cases["ragged-page1-draft-extend-graphs"]["skip"] == ""
    assert "DRAFT_EXTEND_V2: 4 tokens a request" in cases["ragged-page1-draft-extend-graphs"][
        "why"]


def test_what_the_target_verify_batch_does_not_cover_is_skipped_saying_why(
        plans: dict[str, Any]) -> None:
    """MTP on MLA runs its target-verify batches; top-2 skips the verify batches and the draft
    check alike (a draft tree, not a chain)."""
    plan = plans["deepseek-mtp"]
    assert names(plan) == ["mla-page1-verify-graphs", "draft-page1-metadata",
                           "mla-page1-draft-extend-graphs", "mla-page1-verify-eager"]
    skips = {c["name"]: c["skip"] for c in plan["cases"]}
    assert skips["draft-page1-metadata"] == ""
    for name in ("mla-page1-verify-graphs", "mla-page1-verify-eager"):
        assert skips[name] == "", skips
    assert skips["mla-page1-draft-extend-graphs"] == ""
    assert plan["cases"][1]["deployment"]["draft"] == [1, 3]
    top2 = {c["name"]: c["skip"] for c in plans["deepseek-mtp-topk2"]["cases"]}
    assert top2["draft-page1-metadata"] == "the draft check covers top-1 only"
    assert top2["mla-page1-verify-eager"] == \
        "the target-verify batch covers top-1 (a linear draft chain) only"


def test_a_sliding_window_model_is_recognised_and_its_cases_skipped_saying_why(
        plans: dict[str, Any]) -> None:
    plan = plans["swa"]
    assert names(plan) == ["ragged-page1-graphs", "ragged-page1-eager"]
    for case in plan["cases"]:
        assert "sliding-window attention (window 128)" in case["why"]
        assert case["skip"].startswith("the self-test does not build sliding-window attention "
                                       "yet"), case


def test_list_names_each_case_and_why(models: dict[str, Path], tmp_path: Path) -> None:
    done = selftest(tmp_path, "--list", "--model-path", str(models["llama"]), "--page-size", "16",
                    "--tp-size", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [ln.split()[0] for ln in lines[:2]] == ["ragged-page16-graphs", "ragged-page16-eager"]
    assert "2 query / 1 KV heads a rank" in lines[0]
    assert "decode CUDA graphs at every size sglang captures" in lines[0]
    assert lines[2].startswith("note: request pool 33 a rank")


def test_an_argument_sglang_refuses_is_its_parsers_error_shortened_exit_status_2(
        models: dict[str, Path], tmp_path: Path) -> None:
    done = selftest(tmp_path, "--model-path", str(models["llama"]), "--page-sise", "16")
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert ("sglang-aiter-plugin selftest: sglang's parser: unrecognized arguments: "
            "--page-sise 16") in done.stderr
    assert "usage:" not in done.stderr  # not sglang's hundreds of lines of usage
    assert done.stdout == ""


def test_a_hugging_face_id_is_refused_saying_only_a_local_config_works(tmp_path: Path) -> None:
    done = selftest(tmp_path, "--list", "--model-path", "deepseek-ai/DeepSeek-V3")
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert "--model-path deepseek-ai/DeepSeek-V3: the self-test reads only the model's " \
           "config.json from a local folder" in done.stderr
    assert "only a local folder with config.json works" in done.stderr


def run_json(tmp_path: Path, *args: str) -> dict[str, Any]:
    done = selftest(tmp_path, "--json", *args)
    assert done.stdout.strip(), done.stderr[-3000:]
    data: dict[str, Any] = json.loads(done.stdout)
    data["returncode"] = done.returncode
    return data


@pytest.mark.slow
@NEEDS_AITER
def test_a_llama_class_deployment_runs_its_eager_batch_with_its_per_rank_heads(
        models: dict[str, Path], tmp_path: Path) -> None:
    data = run_json(tmp_path, "--model-path", str(models["llama"]), "--page-size", "16",
                    "--tp-size", "2", "--kv-cache-dtype", "fp8_e4m3")
    assert data["returncode"] == 0, data
    assert data["options"]["sglang_args"][:2] == ["--model-path", str(models["llama"])]
    cases = {c["case"]: c for c in data["cases"]}
    assert list(cases) == ["ragged-page16-graphs", "ragged-page16-eager"]
    assert cases["ragged-page16-graphs"]["aiter-ext"]["outcome"] == "skipped"  # capture: a GPU
    for kind in ("upstream", "aiter-ext"):
        eager = cases["ragged-page16-eager"][kind]
        assert eager["outcome"] == "ok", eager
        assert eager["sizes"] == [33]  # no MLP sync: the pool's 33, unpadded
        assert "2 query / 1 KV heads a rank, KV float8_e4m3fn" in eager["detail"]


@pytest.mark.slow
@NEEDS_AITER
def test_a_deepseek_class_deployment_runs_mla_padded_by_mlp_sync(
        models: dict[str, Path], tmp_path: Path) -> None:
    """TP 4 over two attention-DP ranks: attention TP 2 pads the pool's 33 to 34 rows; upstream
    raises on them, aiter-ext is right, with 8 heads a rank (16 over 2)."""
    data = run_json(tmp_path, "--model-path", str(models["deepseek"]), "--tp-size", "4", *DP2,
                    "--max-running-requests", "66")
    assert data["returncode"] == 0, data
    (eager,) = [c for c in data["cases"] if c["case"] == "mla-page1-eager"]
    assert eager["upstream"]["outcome"] == "raised", eager
    ext = eager["aiter-ext"]
    assert ext["outcome"] == "ok", ext
    assert ext["sizes"] == [34]
    assert "33 requests padded by MLP sync; 8 query heads a rank over one latent KV head" in \
        ext["detail"]


@pytest.mark.slow
@NEEDS_AITER
def test_an_mtp_deployment_runs_the_draft_metadata_and_its_eager_verify_batch(
        models: dict[str, Path], tmp_path: Path) -> None:
    """DeepSeek MTP on the CPU form: the draft metadata and MLA's eager target-verify batch run
    (right for aiter-ext); the verify and draft-extend graphs are skipped (capture: a GPU)."""
    data = run_json(tmp_path, "--model-path", str(models["deepseek"]), "--speculative-algorithm",
                    "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                    "--speculative-num-draft-tokens", "4")
    assert data["returncode"] == 0, data
    cases = {c["case"]: c for c in data["cases"]}
    draft = cases.pop("draft-page1-metadata")
    assert draft["aiter-ext"]["outcome"] == "ok", draft
    assert "3 steps, top-1" in draft["aiter-ext"]["detail"]
    verify = cases.pop("mla-page1-verify-eager")["aiter-ext"]
    assert verify["outcome"] == "ok", verify
    assert "target verify of 4 draft tokens a request" in verify["detail"]
    assert set(cases) == {"mla-page1-verify-graphs", "mla-page1-draft-extend-graphs"}
    for row in cases.values():
        for kind in ("upstream", "aiter-ext"):
            assert row[kind]["outcome"] == "skipped"
            assert row[kind]["detail"].startswith("graph capture needs a GPU")
    assert data["summary"].startswith("PASS: aiter-ext passed 2 of 2 cases that ran (2 skipped)")
