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
