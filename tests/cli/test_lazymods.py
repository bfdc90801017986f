"""mqctl/lazymods.py: the stand-ins the quick paths put in place of modules they never use."""
from __future__ import annotations

import subprocess
import sys

CHECK = r"""
import sys
from mqctl.lazymods import defer
defer(("inspect", "ipaddress"))
import dataclasses, inspect, ipaddress   # bound to the stand-ins: nothing loaded yet
if sys.version_info >= (3, 12):
    # (dataclasses uses inspect for every class from 3.12: it is not deferred there)
    assert type(sys.modules["inspect"]).__name__ == "module"
    from ipaddress import ip_address   # a name taken with `from` loads it
    assert ip_address("::1").version == 6 and ipaddress.IPv4Address is sys.modules["ipaddress"].IPv4Address
    print("ok")
    sys.exit(0)
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


# Two threads use a stand-in first at once: the first is held (by a trace function) between
# seeing the stand-in in sys.modules and removing it, the second runs meanwhile. Without the
# lock the second loaded the real module and the first then removed *it* and imported a second
# copy (or, had the second only removed the stand-in, failed with KeyError).
RACE = r"""
import sys, threading
from mqctl.lazymods import defer
sys.modules.pop("ipaddress", None)   # (a site hook may have imported it at start-up)
defer(("ipaddress",))
import ipaddress
stand_in = sys.modules["ipaddress"]
assert type(stand_in).__name__ == "_StandIn"
at_removal, second_done = threading.Event(), threading.Event()
got = {}

def tracer(frame, event, arg):
    if frame.f_code.co_name == "_load":
        if event == "line" and "del sys.modules" in open(frame.f_code.co_filename).readlines()[frame.f_lineno - 1]:
            at_removal.set()
            second_done.wait(1.0)   # (with the lock the second waits for this one: go on)
        return tracer
    return None

def first():
    sys.settrace(tracer)
    got["first"] = stand_in.IPv4Address
    sys.settrace(None)

def second():
    assert at_removal.wait(60), "the first thread never reached the stand-in's removal"
    got["second"] = stand_in.IPv4Address
    second_done.set()

threads = [threading.Thread(target=first), threading.Thread(target=second)]
for t in threads:
    t.start()
for t in threads:
    t.join()
real = sys.modules["ipaddress"]
assert got["first"] is got["second"] is real.IPv4Address, (got, real)
print("ok")
"""


def test_a_deferred_module_used_first_by_two_threads_at_once_is_loaded_once() -> None:
    p = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stderr
