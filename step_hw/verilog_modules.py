"""The modules of a Verilog text as Yosys writes it, and the instances each one holds.

Identical modules are merged before the Verilog is written (``step_hw.rtlil_modules``), so an
instance's module is not always named after the instance (``\\top.q_a`` may serve instances
``q_a`` and ``q_b``): code that looks inside an instance finds its module here, by the
instantiation, never by the name. Pure text, no Amaranth.
"""

from __future__ import annotations

import re

__all__ = ["instance_module", "module_bodies"]

_MODULE = re.compile(r"^module \\?(\S+?) ?\(", re.M)
# an instantiation as `write_verilog` writes it: `  \<module>  <instance> (` on a line of its own
_INSTANCE = re.compile(r"^\s+\\?(\S+)\s+\\?(\S+) \($", re.M)


def module_bodies(text: str) -> dict[str, str]:
    """Each module's text (from ``module`` up to the next module), by its name without the
    escaping backslash."""
    starts = [(m.start(), m.group(1)) for m in _MODULE.finditer(text)]
    ends = [at for at, _ in starts[1:]] + [len(text)]
    return {name: text[at:end] for (at, name), end in zip(starts, ends, strict=True)}


def instance_module(bodies: dict[str, str], path: str) -> str | None:
    """The module of the instance at ``path`` (``top.q_a.fifo``: module ``top``'s instance
    ``q_a``, then that one's ``fifo``), ``None`` when there is no such instance."""
    module, *names = path.split(".")
    for name in names:
        found = {m.group(2): m.group(1) for m in _INSTANCE.finditer(bodies.get(module, ""))}
        if name not in found:
            return None
        module = found[name]
    return module
