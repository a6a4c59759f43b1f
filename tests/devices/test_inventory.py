"""devices.inventory: Ansible inventories (YAML and INI) read as ansible-core reads them, checked
against ``ansible-inventory --list`` and ``ansible --list-hosts`` answers made by ansible-core
(tests/devices/inventories/regenerate.py), then edge's own checks and --limit errors."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from devices.inventory import Inventory, load_inventory
from edge.core.errors import UsageError

HERE = Path(__file__).resolve().parent / "inventories"
FILES = ("nested.yml", "groups.ini", "shapes.yml", "shapes.ini", "hosts", "inventory")
LIMITS = json.loads((HERE / "limits.json").read_text())


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _ansible(name: str) -> tuple[dict[str, set[str]], dict[str, Any]]:
    """(each group's hosts, children included; each host's merged vars) as ansible-core saw."""
    doc = json.loads((HERE / f"{name}.json").read_text())
    assert doc["_generated_by"].startswith("ansible [core 2.19")
    groups = {k: v for k, v in doc.items() if not k.startswith("_")}

    def members(group: str) -> set[str]:
        body = groups.get(group, {})
        found = set(body.get("hosts", []))
        for child in body.get("children", []):
            found |= members(child)
        return found

    return {g: members(g) for g in groups}, doc["_meta"]["hostvars"]


# ============================================================================ as ansible-core


@pytest.mark.parametrize("name", FILES)
def test_reads_what_ansible_inventory_lists(name: str) -> None:
    inv = load_inventory(HERE / name)
    groups, hostvars = _ansible(name)
    assert {h.name for h in inv.hosts} == groups["all"] and len(inv.hosts) == len(groups["all"])
    for group, members in groups.items():
        assert set(inv.groups[group]) == members, group
    for group in inv.groups.keys() - groups.keys():
        assert inv.groups[group] == (), group  # a group Ansible does not list is empty
    for host in inv.hosts:
        assert host.vars == hostvars.get(host.name, {}), host.name
        assert set(host.groups) == {g for g, hs in groups.items() if host.name in hs}, host.name


@pytest.mark.parametrize("limit", [p for p, hosts in LIMITS["nested.yml"].items() if hosts])
def test_limit_selects_what_ansible_selects(limit: str) -> None:
    inv = load_inventory(HERE / "nested.yml")
    assert [h.name for h in inv.select(limit)] == LIMITS["nested.yml"][limit]


@pytest.mark.parametrize("limit", [p for p, hosts in LIMITS["nested.yml"].items() if not hosts])
def test_limit_matching_nothing_in_ansible_is_an_error(limit: str) -> None:
    with pytest.raises(UsageError, match="matches no group or host"):
        load_inventory(HERE / "nested.yml").select(limit)


def test_limit_none_or_blank_is_every_host() -> None:
    inv = load_inventory(HERE / "nested.yml")
    assert inv.select(None) == inv.select("  ") == inv.hosts


# ============================================================================ the vars edge reads


def test_yaml_groups_children_and_ranges() -> None:
    inv = load_inventory(HERE / "nested.yml")
    assert [h.name for h in inv.hosts] == ["lonely", "cam01", "cam02", "cam03", "cam09",
                                            "sensor-a"]
    assert inv.groups["cameras"] == ("cam01", "cam02", "cam03", "cam09")  # children included
    assert inv.groups["sensors"] == ("cam09", "sensor-a")  # in file order
    assert inv.groups["ungrouped"] == ("lonely",)
    assert inv.host("cam03").groups == ("all", "cameras", "outdoor")  # the order vars merge in
    assert inv.host("cam09").groups == ("all", "cameras", "sensors")  # same depth: by name


def test_yaml_vars_inherit_and_host_vars_win() -> None:
    inv = load_inventory(HERE / "nested.yml")
    lonely, cam01, cam03 = inv.host("lonely"), inv.host("cam01"), inv.host("cam03")
    assert (lonely.address, lonely.user, lonely.port, lonely.profile) == ("10.0.0.99", "pi",
                                                                         None, "rpi4")
    assert lonely.work_dir == "~/.edge"
    assert (cam01.address, cam01.user, cam01.port) == ("cam01", "cam", 2200)  # group beats all
    assert cam03.user == "outdoor"  # the child group beats its parent
    assert cam03.identity == Path("~/.ssh/outdoor").expanduser()
    cam09 = inv.host("cam09")
    assert (cam09.address, cam09.port) == ("10.0.0.9", 2209)  # host vars beat every group
    assert cam09.python == "/opt/venv/bin/python"  # ... even a later group's (sensors: auto)
    assert cam09.profile == "rpi5"  # `profile` (sensors) is edge_profile, and beats all's
    sensor = inv.host("sensor-a")
    assert sensor.python is None  # ansible_python_interpreter: auto -> edge's default
    assert sensor.user == "pi" and sensor.profile == "rpi5"


def test_ini_groups_vars_children() -> None:
    inv = load_inventory(HERE / "groups.ini")
    assert [h.name for h in inv.hosts] == ["lonely", "cam1", "cam2", "cam3", "cam9", "cam7"]
    assert inv.groups["cameras"] == ("cam1", "cam2", "cam3", "cam9", "cam7")
    assert inv.groups["ungrouped"] == ("lonely",)
    lonely, cam1, cam3 = inv.host("lonely"), inv.host("cam1"), inv.host("cam3")
    assert (lonely.address, lonely.user) == ("10.0.0.99", "pi")
    assert lonely.work_dir.startswith("/srv/edge ; not a comment")  # as Ansible reads it
    assert (cam1.user, cam1.profile, cam1.port) == ("cam", "rpi4", None)
    assert cam3.user == "root2" and cam3.identity == Path("/keys/outdoor")
    cam9, cam7 = inv.host("cam9"), inv.host("cam7")
    assert (cam9.address, cam9.port) == ("10.0.0.9", 2209)
    assert cam7.port == 2207 and cam7.python == "/opt/my venv/bin/python"


def test_ports_in_host_names_ipv6_and_aliases() -> None:
    yml, ini = load_inventory(HERE / "shapes.yml"), load_inventory(HERE / "shapes.ini")
    assert (yml.host("web1").port, yml.host("web2").port) == (2222, 2300)
    assert (yml.host("2001:db8::10").address, yml.host("2001:db8::10").port) == (
        "2001:db8::10", 2201)
    assert yml.host("fe80::1").port is None  # a bare IPv6 address has no port
    assert (ini.host("::1").port, ini.host("2001:db8::2").port) == (2222, 22)
    assert ini.host("db02").port == 2203  # the ansible_port var beats db02:2202
    shared = yml.host("shared")  # alpha, then zeta (same depth: by name)
    assert (shared.user, shared.work_dir) == ("zeta", "/zeta")
    assert [h.name for h in yml.hosts if h.name.startswith("node")] == ["node0", "node5",
                                                                        "node10"]


def test_a_file_without_suffix_is_yaml_if_it_reads_as_a_mapping() -> None:
    ini, yml = load_inventory(HERE / "hosts"), load_inventory(HERE / "inventory")
    assert [(h.name, h.user) for h in ini.hosts] == [(h.name, h.user) for h in yml.hosts] == [
        ("pi1", "pi"), ("pi2", "pi")]


def test_an_alias_in_a_nearer_scope_beats_the_name_in_a_farther_one(tmp_path: Path) -> None:
    inv = load_inventory(_write(tmp_path, "hosts.yml", """
        all:
          vars: {ansible_user: far, ansible_ssh_host: 10.0.0.1}
          children:
            near:
              vars: {ansible_ssh_user: near}
              hosts: {box: {ansible_host: 10.0.0.2}}
        """))
    box = inv.host("box")
    assert (box.user, box.address) == ("near", "10.0.0.2")
    assert box.vars["ansible_user"] == "far"  # vars: as Ansible merged them, names untouched


# ============================================================================ --limit errors


@pytest.mark.parametrize(("limit", "message"), [
    ("webservers", "'webservers' matches no group or host"),
    ("cameras,nope*", "'nope*' matches no group or host"),
    ("cameras,!cameras", "selects no host"),
    ("~[", "bad regex"),
    (",", "give a group or host name"),
])
def test_limit_errors_are_one_line(limit: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        load_inventory(HERE / "nested.yml").select(limit)
    text = str(caught.value)
    assert "\n" not in text and message in text and text.startswith(f"--limit {limit!r}")


# ============================================================================ bad inventories


@pytest.mark.parametrize(("name", "text", "needles"), [
    ("bad.yml", "all:\n  hosts:\n    a: [1\n", ["is not valid YAML", "line"]),
    ("list.yml", "- a\n- b\n", ["top level must map group names", "got list"]),
    ("empty.yml", "", ["got an empty file"]),
    ("nohosts.yml", "all:\n  vars: {x: 1}\n", ["has no hosts"]),
    ("key.yml", "all:\n  host:\n    a:\n", ["group all", "unknown key 'host'"]),
    ("hostlist.yml", "all:\n  hosts: [a, b]\n", ["group all", "hosts must be a mapping"]),
    ("vars.yml", "all:\n  hosts:\n    a: 7\n", ["host a", "vars must be a mapping"]),
    ("number.yml", "all:\n  hosts:\n    12:\n", ["host 12", "must be a non-empty string"]),
    ("port.yml", "all:\n  hosts:\n    cam1: {ansible_port: http}\n",
     ["host cam1", "ansible_port 'http' is not a port number"]),
    ("port0.yml", "all:\n  hosts:\n    cam1: {ansible_port: 70000}\n",
     ["host cam1", "ansible_port 70000"]),
    ("user.yml", "all:\n  hosts:\n    cam1: {ansible_user: 'a b'}\n",
     ["host cam1", "not a plain user name"]),
    ("addr.yml", "all:\n  hosts:\n    cam1: {ansible_host: 'x;rm -rf'}\n",
     ["host cam1", "not a valid host name or address"]),
    ("conn.yml", "all:\n  hosts:\n    cam1: {ansible_connection: local}\n",
     ["host cam1", "ansible_connection 'local' is not supported"]),
    ("range.yml", "all:\n  hosts:\n    cam[3:1]:\n", ["range [3:1] is empty"]),
    ("width.yml", "all:\n  hosts:\n    cam[01:100]:\n", ["range [01:100] is empty or malformed"]),
    ("bracket.yml", "all:\n  hosts:\n    cam[1]:\n", ["a range is [START:END]"]),
    ("cycle.yml", "all:\n  children:\n    a: {children: {b: }}\n    b: {children: {a: }}\n",
     ["is its own child"]),
    ("anchor.yml", "all:\n  children:\n    a: &a {children: {b: *a}}\n", ["is its own child"]),
    ("section.ini", "[web\nhost1\n", ["line 1", "section header"]),
    ("kind.ini", "[web:hosts2]\n", ["line 1", "unknown section kind ':hosts2'"]),
    ("token.ini", "[web]\nhost1 port2222\n", ["line 2", "host host1", "expected key=value"]),
    ("quote.ini", "[web]\nhost1 a='b\n", ["line 2", "No closing quotation"]),
    ("vars.ini", "[web:vars]\njustaname\n", ["line 2", "expected key=value"]),
    ("group.ini", "[we b]\n", ["line 1", "not a valid group name"]),
    ("child.ini", "[web]\nh1\n[all:children]\nweb\nwbe\n", ["line 5", "group wbe is never "
                                                            "declared"]),
    ("undeclared.ini", "[web]\nh1\n[db:vars]\nx=1\n", ["line 3", "group db is never declared"]),
])
def test_bad_inventories_fail_in_one_line(tmp_path: Path, name: str, text: str,
                                          needles: list[str]) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        load_inventory(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message, message
    for needle in needles:
        assert needle in message, message


def test_missing_inventory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        load_inventory(tmp_path / "nope.yml")
    (tmp_path / "bin.yml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="cannot read it"):
        load_inventory(tmp_path / "bin.yml")


def test_inventory_is_a_frozen_value() -> None:
    inv = load_inventory(HERE / "hosts")
    assert isinstance(inv, Inventory)
    with pytest.raises(AttributeError):
        inv.hosts = ()  # type: ignore[misc]


@pytest.mark.parametrize("name", ["hosts.yml", "hosts.ini"])
def test_the_examples_in_docs_fleet_md_read(tmp_path: Path, name: str) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "fleet.md").read_text()
    block = next(b for b in doc.split("```")[1::2] if b.split("\n", 2)[1].startswith(f"# {name}"))
    inv = load_inventory(_write(tmp_path, name, block.split("\n", 1)[1]))
    assert inv.groups["cameras"][:4] == ("cam01", "cam02", "cam03", "cam04")
    assert inv.host("cam09").port == 2222 and inv.host("cam04").profile == "my-pi.yaml"
    assert inv.host("cam01").identity == Path("~/.ssh/cameras").expanduser()


def test_host_patterns() -> None:
    from devices.host_patterns import expand, split_port

    assert split_port("web1:2222") == ("web1", 2222)
    assert split_port("[2001:db8::1]:2200") == ("2001:db8::1", 2200)
    assert split_port("[2001:db8::1]") == ("2001:db8::1", None)
    assert split_port("fe80::1") == ("fe80::1", None)  # bare IPv6: the last group is no port
    assert split_port("web[1:3]:22") == ("web[1:3]", 22)  # a range's colon is no port
    assert split_port("web[1:3]") == ("web[1:3]", None)
    assert expand("db[01:03]-[a:b]", "x") == ["db01-a", "db01-b", "db02-a", "db02-b",
                                              "db03-a", "db03-b"]
    assert expand("n[:2]", "x") == ["n0", "n1", "n2"]  # START defaults to 0, as in Ansible
    assert expand("n[0:10:5]", "x") == ["n0", "n5", "n10"]
    assert expand("z[y:B]", "x") == ["zy", "zz", "zA", "zB"]  # a-z then A-Z, as in Ansible
    with pytest.raises(UsageError, match="STEP >= 1"):
        expand("n[0:4:0]", "x")
