"""The machine as benchmarks record it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hlo.environment import cpu_model_name


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo on this platform")
def test_the_cpu_is_named_with_its_family_and_model_numbers():
    """The kernel's model name, then the numbers that tell apart the CPUs a virtual machine
    names alike, all from the first processor's block."""
    first = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
    named = cpu_model_name()
    if "model name" not in fields or "cpu family" not in fields:
        pytest.skip("the kernel names this ISA's CPU by other fields")
    assert named.startswith(fields["model name"])
    assert re.search(rf"\(family {fields['cpu family']}, model {fields['model']}\)$", named)
