"""The data network's interface through the binding: the same table (tests/common/
data_interface_cases.json) the C++ rule is tested on, so C++ and Python cannot disagree; and what
trainrt.torch advertises follows it."""
import json
import os
import types

import pytest

import trainrt
from trainrt import _trainrt

CASES = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common",
                                    "data_interface_cases.json")))["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["why"] for c in CASES])
def test_shared_table(case):
    call = dict(env=case["env"], interfaces=case.get("interfaces", []), fallback=case.get("fallback", ""),
                fallback_source="plugstack.conf ifname")
    if "error" in case:
        with pytest.raises(trainrt.Error) as info:
            _trainrt.data_interface(**call)
        assert case["error"] in str(info.value)
    else:
        assert _trainrt.data_interface(**call) == tuple(case["want"])


def test_process_environment(monkeypatch):
    for var in ("TRAINRT_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(var, raising=False)
    assert _trainrt.data_interface() == ("", "")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "l")  # a prefix of lo, in every network namespace
    assert _trainrt.data_interface() == ("lo", "NCCL_SOCKET_IFNAME")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "=lo")
    assert _trainrt.data_interface() == ("lo", "GLOO_SOCKET_IFNAME")


def test_torch_store_advertises_the_rules_interface(monkeypatch):
    tt = pytest.importorskip("trainrt.torch", reason="torch is not importable")
    two_nodes = types.SimpleNamespace(local_world_size=1, world_size=2)
    for var in ("TRAINRT_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")  # NCCL's prefix, resolved by the C++ rule
    assert tt._advertised_host(two_nodes) == "127.0.0.1"
    monkeypatch.setenv("TRAINRT_IFNAME", "a/b")
    with pytest.raises(trainrt.Error, match="TRAINRT_IFNAME"):
        tt._advertised_host(two_nodes)
