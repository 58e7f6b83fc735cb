from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from parabench import registry
from parabench.registry import Registry, UnknownNameError, methods, workloads

pytestmark = pytest.mark.cpu


def test_builtins_are_registered() -> None:
    assert {"mlp", "random_forest"} <= set(workloads.names())
    assert "serial" in methods.names()
    assert methods.get("serial").name == "serial"


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError) as info:
        workloads.get("resnet9000")
    message = str(info.value)
    assert message.startswith("unknown workload 'resnet9000'; valid: ")
    assert "mlp" in message and "random_forest" in message
    with pytest.raises(UnknownNameError, match="unknown method 'ddpp'; valid: .*serial"):
        methods.get("ddpp")


class _Plugin:
    name = "third_party"


def test_entry_point_plugins_are_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = EntryPoint(name="third_party", value="tests.bottom.test_registry:_Plugin", group="g")
    monkeypatch.setattr(ep.__class__, "load", lambda self: _Plugin)
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep] if group == "g" else [])
    reg: Registry[_Plugin] = Registry("widget", "parabench.workloads", "g")
    assert "third_party" in reg.names()
    assert isinstance(reg.get("third_party"), _Plugin)


def test_a_broken_plugin_warns_instead_of_crashing(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = EntryPoint(name="broken", value="nowhere:Nothing", group="g")
    monkeypatch.setattr(registry, "entry_points", lambda group: [ep])
    reg: Registry[object] = Registry("widget", "parabench.workloads", "g")
    with pytest.warns(UserWarning, match="could not load widget plugin 'broken'"):
        assert reg.names() == []


def test_registering_two_things_under_one_name_fails() -> None:
    reg: Registry[object] = Registry("widget", "parabench.workloads", "g")
    reg.register(_Plugin)

    class Other:
        name = "third_party"

    with pytest.raises(ValueError, match="registered twice"):
        reg.register(Other)
