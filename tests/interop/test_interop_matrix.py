"""``hscale interop``'s counting (``hscale.interop.judge``) and the hex it shows for what a
profile still rejects, on a planted mutant of the reference (no library needed)."""

from __future__ import annotations

from hscale import interop
from hscale.interop.render import still_rejected_block
from hscale.conformance.mutants import negative_zero


def nibble(packed_hex: str, j: int) -> int:
    """Element j's code from 8 packed bytes in hex (element 2i in the low nibble)."""
    byte = int(packed_hex[2 * (j // 2):2 * (j // 2) + 2], 16)
    return byte & 0xF if j % 2 == 0 else byte >> 4


def test_still_rejected_findings_come_with_their_group_in_hex():
    backend = negative_zero()
    cases = interop.level0_cases()
    exact = interop.judge(backend, cases, "exact", ())
    assert set(exact["still_failing"]) == {"NVFP4-E2M1-3"}
    example = exact["still_examples"]["NVFP4-E2M1-3"]
    words = example["w"].split()
    assert len(words) == 16
    reference_byte, reference_packed = example["expected"].split()
    observed_byte, observed_packed = example["observed"].split()
    assert reference_byte == observed_byte  # the mutant picks the reference's byte
    differ = [j for j in range(16)
              if nibble(reference_packed, j) != nibble(observed_packed, j)]
    assert differ, example
    for j in differ:  # a negative weight rounding to zero: its code keeps the sign bit
        assert (nibble(reference_packed, j), nibble(observed_packed, j)) == (0x8, 0x0)
        assert int(words[j], 16) & 0x80000000
    assert f"element j={differ[0]}" in example["finding"]
    block = "\n".join(still_rejected_block(
        {"profile": "exact", "counts": {"level-0 vectors": exact}}))
    assert f"NVFP4-E2M1-3 (level-0 vectors): case {example['case']}" in block
    assert example["w"] in block

    forgiven = interop.judge(backend, cases, "faithful", ("negative-zero",))
    assert forgiven["still_failing"] == {} and forgiven["still_examples"] == {}
    assert forgiven["allowance_uses"]["negative-zero"] > 0
    assert still_rejected_block({"profile": "faithful", "counts": {"x": forgiven}}) == []


def test_adapters_are_chosen_by_label_even_with_a_comma_in_it():
    def labels(text):
        return [a.label for a in interop.chosen_adapters(text)]
    assert labels("torchao, single level,compressed-tensors") == [
        "torchao, single level", "compressed-tensors"]
    assert labels("torchao,torchao, single level") == ["torchao", "torchao, single level"]
    assert labels(" ModelOpt , llm-compressor MSE") == ["llm-compressor MSE", "ModelOpt"]
    assert labels("torchao_nvfp4:create_single_level") == ["torchao, single level"]


def test_an_unknown_adapter_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys
    results, docs = tmp_path / "r.json", tmp_path / "d.md"
    run = subprocess.run([sys.executable, "-m", "hscale.cli", "interop", "--adapters",
                          "torchao,nope", "--results", str(results), "--docs", str(docs)],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "no adapter 'nope'" in run.stderr
    assert not results.exists() and not docs.exists()


def test_real_library_adapters_are_judged_as_third_parties():
    """The adapters of real libraries live in hscale.backends.interop, but a library never
    cites this kit's clause IDs: its rejections are judged as any vendor's (the input contract
    recorded apart, no wording required), unlike the built-in backends and the mutants."""
    from hscale.backends import get
    from hscale.conformance.checker import is_own_backend
    assert is_own_backend(get("numpy")) and is_own_backend(negative_zero())
    for module in ("torchao_nvfp4", "compressed_tensors_nvfp4", "modelopt_nvfp4"):
        adapter = get(f"hscale.backends.interop.{module}:create")
        assert not is_own_backend(adapter), module


def test_the_adapters_ceiling_helper_leaves_a_non_finite_weight_to_the_library():
    import numpy as np
    from hscale.backends.interop.common import ceiling_global_scale
    weight = np.ones((1, 16), np.float32)
    weight[0, 3] = np.inf
    assert ceiling_global_scale(weight, 256.0, None) is None  # the library sees the bad input
    weight[0, 3] = 1.0
    assert ceiling_global_scale(weight, 256.0, None) == np.float32(1.0 / (6 * 256))
