"""A dev build's loader natively: the application imported afresh from the mounted sources,
refused with a reason when it does not import or nothing is mounted."""

import sys

import pytest

from krec_guest import kinds
from krec_guest.dev import DevGuest
from krec_guest.guest import ConfigError
from krec_guest.reconciler import Request
from krec_guest.testing import FakeCluster

APP = '''
from krec_guest import Reconciler, export, kinds

class Marker(Reconciler):
    def reconcile(self, req, ctx):
        ctx.patch(kinds.ConfigMap, req.name, {"metadata": {"labels": {"marked": "VALUE"}}}, req.namespace)

WitWorld = export(reconciler=Marker)
'''


@pytest.fixture
def sources(tmp_path):
    yield tmp_path
    # The modules the loader imported from the folder stay out of other tests.
    sys.modules.pop("devapp", None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def marked(guest: DevGuest) -> str:
    cluster = FakeCluster([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}}])
    guest.init("null")
    cluster.reconcile(guest.load().parts["reconciler"], Request("default", "a"))
    return cluster.object(kinds.ConfigMap, "a", "default")["metadata"]["labels"]["marked"]


def test_each_version_should_import_the_sources_as_they_are_now(sources):
    (sources / "devapp.py").write_text(APP.replace("VALUE", "first"))
    assert marked(DevGuest("devapp", "/src/guest", mount=str(sources))) == "first"
    (sources / "devapp.py").write_text(APP.replace("VALUE", "second"))
    assert marked(DevGuest("devapp", "/src/guest", mount=str(sources))) == "second"


def test_an_edit_that_does_not_import_should_be_refused_with_where(sources):
    (sources / "devapp.py").write_text(APP + "\ndef broken(:\n")
    with pytest.raises(ConfigError, match=r"importing devapp from /src/guest: SyntaxError: .*devapp.py, line 10"):
        DevGuest("devapp", "/src/guest", mount=str(sources)).init("null")
    (sources / "devapp.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(ConfigError, match="ModuleNotFoundError: No module named 'not_a_module_anywhere'"):
        DevGuest("devapp", "/src/guest", mount=str(sources)).init("null")
    (sources / "devapp.py").write_text("x = 1\n")
    with pytest.raises(ConfigError, match=r"devapp: no `WitWorld = export\(...\)` in it"):
        DevGuest("devapp", "/src/guest", mount=str(sources)).init("null")


def test_without_krec_devs_mount_it_should_refuse_to_start_and_say_why(tmp_path):
    with pytest.raises(ConfigError, match=r"a dev build of /src/guest \(built with --dev\): it runs under `krec dev` only"):
        DevGuest("devapp", "/src/guest", mount=str(tmp_path / "absent")).init("null")


def test_the_source_section_should_be_a_wasm_custom_section():
    from krec_guest.build import DEV_SECTION, custom_section

    path = "/" + "p" * 199
    section = custom_section(DEV_SECTION, path.encode())
    body = bytes([len(DEV_SECTION)]) + DEV_SECTION.encode() + path.encode()
    # id 0, the body's length in LEB128 (216: two bytes), the name, the data.
    assert section == b"\x00" + bytes([0xD8, 0x01]) + body
