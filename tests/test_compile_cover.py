"""The covering set that CI compiles with the oldest NVRTC fp4q accepts (scripts/dev/compile_cover.py)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from fp4q.kernels.archs import ARCHS
from fp4q.kernels.variants import all_variants
from scripts.dev import compile_cover


def values(spec) -> set:
    return set(spec.flags) | set(spec.constants)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_every_templates_flag_and_constant_values_are_covered(arch):
    by_template = defaultdict(list)
    for name, cfg in all_variants(arch).items():
        by_template[cfg.spec.template].append((name, cfg.spec))
    for template, specs in by_template.items():
        chosen = compile_cover.covering(specs)
        named = dict(specs)
        assert len(set(chosen)) == len(chosen) <= len(specs)
        assert set().union(*(values(named[n]) for n in chosen)) == set().union(*(values(s) for _, s in specs)), template
    assert sum(len(compile_cover.covering(specs)) for specs in by_template.values()) < len(all_variants(arch)) / 10


def test_a_folder_without_nvrtc_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        compile_cover.main(["--nvrtc", str(tmp_path)])
    assert f"--nvrtc must be a folder with libnvrtc.so.13 and libnvrtc-builtins.so.13.*, got {tmp_path}" in capsys.readouterr().err


def test_the_shards_split_the_covering_set_between_them():
    archs = sorted(ARCHS)
    work = compile_cover.covering_work(archs)
    names = [(arch, name) for arch, _, name, _ in work]
    assert len(set(names)) == len(names)
    for arch in archs:  # each target's covering set, in full
        by_template = defaultdict(list)
        for name, cfg in all_variants(arch).items():
            by_template[cfg.spec.template].append((name, cfg.spec))
        want = {name for specs in by_template.values() for name in compile_cover.covering(specs)}
        assert {name for a, name in names if a == arch} == want
    shards = [work[k::3] for k in range(3)]
    assert sorted(map(repr, sum(shards, []))) == sorted(map(repr, work))


@pytest.mark.parametrize("text, want", [("0/1", (0, 1)), ("1/2", (1, 2)), ("3/4", (3, 4))])
def test_shard_values(text, want):
    assert compile_cover.shard(text) == want


@pytest.mark.parametrize("text", ["2/2", "1", "1/-2", "a/b", "1/0"])
def test_bad_shards_are_refused(text, capsys):
    with pytest.raises(SystemExit):
        compile_cover.main(["--nvrtc", "/nonexistent", "--shard", text])
    assert f"argument --shard: must be K/N with 0 <= K < N, got {text!r}" in capsys.readouterr().err
