"""Domain egress rules, filesystem-only pause and allow_setuid through both
clients, against a real `dsec server` (conftest). No traffic leaves the
machine: the rules name domains nothing here resolves."""

from __future__ import annotations

from typing import Any

import pytest

import dsec
from dsec import _core


def test_network_body_domains() -> None:
    assert _core.network_body(allow_domains="pypi.org", deny_domains=["a.example.com", "*.b.example.com"]) == {
        "allow_domains": ["pypi.org"], "deny_domains": ["a.example.com", "*.b.example.com"]}
    b = _core.create_body("container", None, None, None, None, None, None, None, None, "r1",
                          network={"allow_domains": ["pypi.org"]}, allow_setuid=True)
    assert b["network"] == {"allow_domains": ["pypi.org"]} and b["allow_setuid"] is True
    assert "allow_setuid" not in _core.create_body("container", None, None, None, None, None, None, None, None, "r1")
    with pytest.raises(TypeError):
        _core.create_body("container", None, None, None, None, None, None, None, None, "r1",
                          network={"allowDomains": ["pypi.org"]})
    with pytest.raises(TypeError):
        _core.network_body(allow_domains=[1])
    st = dsec.SandboxInfo.from_json({"id": "sb", "allow_setuid": True, "network": {
        "allow_domains": ["pypi.org"], "deny_domains": ["x.org"], "address": "10.203.0.1"}})
    assert st.allow_setuid and st.network is not None
    assert st.network.allow_domains == ["pypi.org"] and st.network.deny_domains == ["x.org"]


def test_domain_rules_on_create_and_update(client: Any) -> None:
    with client.create(network={"allow_domains": ["pypi.org", "*.pythonhosted.org"],
                                "deny_domains": ["bad.example.com"]}) as sb:
        net = sb.info.network
        assert net is not None and net.allow_domains == ["pypi.org", "*.pythonhosted.org"]
        assert net.deny_domains == ["bad.example.com"] and net.allow == []
        sb.set_network(allow="198.18.99.2:443", allow_domains="files.example.org")
        net = sb.refresh().info.network
        assert net is not None and net.allow == ["198.18.99.2:443"] and net.allow_domains == ["files.example.org"]
        assert net.deny_domains == []
        # a bad rule is refused whole and the policy stays
        with pytest.raises(dsec.InvalidArgumentError) as ei:
            sb.set_network(allow_domains=["files.example.org", "10.0.0.0/8"])
        assert ei.value.status == 400 and "allow_domains[1]" in str(ei.value)
        assert sb.refresh().info.network.allow_domains == ["files.example.org"]
        sb.set_network()
        assert sb.info.network is not None and sb.info.network.allow_domains == []
    with pytest.raises(dsec.InvalidArgumentError):
        client.create(network={"allow_domains": ["1.2.3.4"]})


def test_pause_without_memory(client: Any) -> None:
    with client.create() as sb:
        sb.exec("echo kept > /root/k; sleep 600 >/dev/null 2>&1 &")
        boot = sb.exec("cat /proc/sys/kernel/random/boot_id").stdout
        with pytest.raises(ValueError):
            sb.pause(reclaim=True, memory=False)
        assert sb.pause(memory=False).state == "paused"
        assert sb.resume().state == "running"
        # files kept; processes not; a new boot
        assert sb.exec("cat /root/k").stdout == "kept\n"
        assert sb.exec("pgrep -x sleep || echo none").stdout == "none\n"
        assert sb.exec("cat /proc/sys/kernel/random/boot_id").stdout != boot


def test_allow_setuid(client: Any) -> None:
    with client.create(allow_setuid=True) as sb:
        assert sb.info.allow_setuid
        assert sb.exec("sudo -n id -u", user="user").stdout == "0\n"
    with client.create() as sb:
        assert not sb.info.allow_setuid
        r = sb.exec("sudo -n id -u", user="user")
        assert r.exit_code != 0 and "no new privileges" in r.stderr
