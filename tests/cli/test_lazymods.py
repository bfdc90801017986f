"""mqctl/lazymods.py: the stand-ins the quick paths put in place of modules they never use."""
from __future__ import annotations

import subprocess
import sys

CHECK = r"""
import sys
from mqctl.lazymods import defer
defer(("inspect", "ipaddress"))
import dataclasses, inspect, ipaddress   # bound to the stand-ins: nothing loaded yet
assert "ast" not in sys.modules and "dis" not in sys.modules, sorted(sys.modules)

@dataclasses.dataclass
class Documented:
    "Has a docstring: dataclasses asks nothing of inspect."
    x: int

assert "ast" not in sys.modules and Documented(1) == Documented(1)

@dataclasses.dataclass
class Undocumented:
    y: int

# a dataclass without a docstring asks inspect.signature for one: the real module is loaded
assert Undocumented.__doc__ == "Undocumented(y: int)", Undocumented.__doc__
assert "ast" in sys.modules and type(sys.modules["inspect"]).__name__ == "module"
assert inspect.signature is sys.modules["inspect"].signature   # the stand-in answers as the real one
from ipaddress import ip_address   # a name taken with `from` loads it too
assert ip_address("::1").version == 6 and ipaddress.IPv4Address is sys.modules["ipaddress"].IPv4Address
defer(("inspect",))   # a module loaded already is left as it is
assert type(sys.modules["inspect"]).__name__ == "module"
print("ok")
"""


def test_a_deferred_module_loads_on_first_use_and_answers_as_the_real_one() -> None:
    p = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stderr
