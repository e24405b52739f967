import argparse

import pytest

from kvspread.settings import (
    ConfigError,
    PartCommand,
    Setting,
    add_settings,
    from_args,
    layer,
    load_yaml,
)

SETTINGS = [
    Setting("server.port", "port to listen on", type=int),
    Setting("server.host", "address to bind"),
    Setting("standalone", "run with no cluster", is_flag=True),
]


def _parse(argv):
    p = argparse.ArgumentParser()
    add_settings(p, "extender", SETTINGS)
    return p.parse_args(argv)


def test_precedence_flag_over_env_over_file_over_default():
    file_map = {"server": {"port": 1000, "host": "0.0.0.0"}, "other": {"x": 1}}
    env = {"KVSPREAD_EXTENDER_SERVER_PORT": "2000", "KVSPREAD_EXTENDER_SERVER_HOST": "::1"}
    merged = layer("extender", SETTINGS, _parse(["--port", "3000"]), env, file_map)
    assert merged["server"]["port"] == 3000  # flag
    assert merged["server"]["host"] == "::1"  # env
    assert merged["other"] == {"x": 1}  # file, untouched
    assert "standalone" not in merged  # default left to the part's config
    assert file_map["server"]["port"] == 1000  # input not modified


def test_boolean_switch_from_env():
    merged = layer("extender", SETTINGS, _parse([]), {"KVSPREAD_EXTENDER_STANDALONE": "true"}, {})
    assert merged["standalone"] is True


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigError, match="KVSPREAD_EXTENDER_SERVER_PORT"):
        layer("extender", SETTINGS, _parse([]), {"KVSPREAD_EXTENDER_SERVER_PORT": "http"}, {})


@pytest.mark.parametrize("section", [5, "x", [1], True])
def test_a_flag_inside_a_section_the_file_holds_as_a_scalar_is_the_files_error(section) -> None:
    """`server: 5` with `--port`: before, the flag replaced the section in silence (the file's
    mistake hidden while a flag was given, an error once it was not)."""
    with pytest.raises(ConfigError) as err:
        layer("extender", SETTINGS, _parse(["--port", "3000"]), {}, {"server": section}, "c.yaml")
    assert str(err.value) == (
        f"c.yaml: server: expected a mapping, got {section!r} (--port sets server.port inside it)"
    )
    env = {"KVSPREAD_EXTENDER_SERVER_HOST": "::1"}
    with pytest.raises(ConfigError, match="KVSPREAD_EXTENDER_SERVER_HOST sets server.host"):
        layer("extender", SETTINGS, _parse([]), env, {"server": section}, "c.yaml")


def test_an_empty_text_flag_is_refused_and_an_empty_variable_keeps_the_default() -> None:
    """`--host ""` listened on every interface (the empty address), where an empty
    KVSPREAD_EXTENDER_SERVER_HOST keeps 127.0.0.1 (found black-box, e.g. a manifest's
    `--host=$(UNSET)`): an empty flag is a slip, refused; a typed one's converter refuses it."""
    with pytest.raises(ConfigError) as err:
        layer("extender", SETTINGS, _parse(["--host", ""]), {}, {})
    assert str(err.value) == (
        "--host: server.host: empty; give a value, or leave the flag out for the default"
    )
    with pytest.raises(ConfigError, match="--port: server.port: expected an integer, got ''"):
        layer("extender", SETTINGS, _parse(["--port", ""]), {}, {})
    env = {"KVSPREAD_EXTENDER_SERVER_HOST": ""}
    assert "server" not in layer("extender", SETTINGS, _parse([]), env, {})


def test_an_empty_section_takes_the_flag() -> None:
    merged = layer("extender", SETTINGS, _parse(["--port", "3000"]), {}, {"server": None})
    assert merged["server"] == {"port": 3000}


def test_help_names_the_environment_variable():
    p = argparse.ArgumentParser()
    add_settings(p, "extender", SETTINGS)
    assert "KVSPREAD_EXTENDER_SERVER_PORT" in p.format_help()


def test_part_command_builds_the_verb_and_hands_over_environ(capsys):
    seen = {}

    def run(args, environ):
        seen["merged"] = from_args("demo", SETTINGS, args, environ, dict)
        seen["extra"] = args.extra
        return 7

    command = PartCommand(
        "demo",
        SETTINGS,
        help="a demo part",
        description="The demo part.",
        verb_help="run the demo",
        verb_description="Run the demo.",
        epilog="examples:\n  kvspread demo serve\n",
        run=run,
        flags=lambda parser: parser.add_argument("--extra", action="store_true"),
    )
    top = argparse.ArgumentParser(prog="kvspread")
    command(top.add_subparsers(dest="part"), {"KVSPREAD_DEMO_SERVER_HOST": "::1"})
    args = top.parse_args(["demo", "serve", "--port", "9", "--extra"])
    assert args.func(args) == 7
    assert seen == {"merged": {"server": {"port": 9, "host": "::1"}}, "extra": True}
    bare = top.parse_args(["demo"])
    assert bare.func(bare) == 2  # the bare part prints its help
    assert "{serve}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        top.parse_args(["demo", "serve", "--help"])
    out = capsys.readouterr().out
    assert "Run the demo." in out and "[env KVSPREAD_DEMO_SERVER_PORT]" in out
    assert "kvspread demo serve" in out and "--extra" in out


def test_load_yaml_errors_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml(bad)
    bad.write_text("a: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(bad)
    bad.write_bytes(b"server:\n  host: caf\xe9\n")  # Latin-1, not UTF-8
    with pytest.raises(ConfigError, match="not valid YAML: unacceptable character"):
        load_yaml(bad)
    bad.write_text("server:\n  host: café\n", encoding="utf-8")
    assert load_yaml(bad) == {"server": {"host": "café"}}
    assert load_yaml(None) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: 0777", "line 1: 0777 is read as 511 (octal, YAML 1.1); write 777"),
        ("a:\n  port: -007", "line 2: -007 is read as -7 (octal, YAML 1.1); write -7"),
        ("port: 1:30", "line 1: 1:30 is read as 90 (base 60, YAML 1.1); write 90, or quote it"),
        ("rate: 1:30.5", "1:30.5 is read as 90.5 (base 60, YAML 1.1)"),
        ("classes: {no: 7}", "line 1: the key no is read as a boolean (YAML 1.1); quote it: 'no'"),
        ("classes:\n  Off: 1", "the key Off is read as a boolean"),
    ],
)
def test_yaml_11_readings_nobody_means_are_refused(tmp_path, text: str, message: str) -> None:
    """Found black-box: `grpc_port: 0777` listened on 511, `1:30` on 90, and `no: 7` made
    an objective class named False."""
    f = tmp_path / "c.yaml"
    f.write_text(text + "\n")
    with pytest.raises(ConfigError) as err:
        load_yaml(f)
    assert message in str(err.value)


def test_plain_numbers_and_quoted_keys_still_load(tmp_path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("a: 0\nb: -0\nc: 0x1f\nd: 1_000\ne: 0.5\nf: '0777'\n'no': 1\ng: true\nh: 10\n")
    assert load_yaml(f) == {
        "a": 0, "b": 0, "c": 31, "d": 1000, "e": 0.5, "f": "0777", "no": 1, "g": True, "h": 10,
    }  # fmt: skip
    f.write_text("true: 1\n")  # an explicit boolean key is what it says
    assert load_yaml(f) == {True: 1}


# --- the shared loader ----------------------------------------------------------------

from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Literal  # noqa: E402

from kvspread.settings import (  # noqa: E402
    INTERNAL,
    Layered,
    dump,
    gather,
    invalid,
    load,
    parse_bool,
)


@dataclass(frozen=True)
class Inner:
    port: int = 80
    """a port"""
    names: tuple[str, ...] = ()
    mode: Literal["a", "b"] = "a"

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise invalid("port", "a port number 0..65535", self.port)


@dataclass(frozen=True)
class Item:
    shorthand = "url"
    url: str
    weight: float = 1.0
    set_by_code: str = field(default="", metadata=INTERNAL)


@dataclass(frozen=True)
class Outer:
    on: bool = False
    rate: float = 1.5
    path: Path = Path("/tmp")
    note: str | None = None
    server: Inner = Inner()
    items: tuple[Item, ...] = ()


OUTER_SETTINGS = [
    Setting("on", "switch", is_flag=True),
    Setting("rate", "rate"),
    Setting("server.port", "port"),
    Setting("server.names", "names"),
]


def _outer_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_settings(p, "demo", OUTER_SETTINGS)
    return p.parse_args(argv)


@pytest.mark.parametrize(
    ("text", "value"),
    [(w, True) for w in ("true", "True", "yes", "on", "1")]
    + [(w, False) for w in ("false", "NO", "off", "0")],
)
def test_one_boolean_rule_for_text(text: str, value: bool) -> None:
    assert parse_bool(text) is value
    merged = layer("demo", OUTER_SETTINGS, _outer_args([]), {"KVSPREAD_DEMO_ON": text}, {})
    assert load(Outer, merged).on is value


def test_yaml_booleans_must_be_booleans() -> None:
    assert load(Outer, {"on": True}).on is True
    for bad in ("yes", 1, "true"):
        with pytest.raises(ConfigError, match=r"^on: expected true or false, got "):
            load(Outer, {"on": bad})
    with pytest.raises(ValueError, match="not a boolean"):
        parse_bool("maybe")


def test_nested_sections_keep_untouched_defaults() -> None:
    cfg = load(Outer, {"server": {"names": ["a", "b"]}, "rate": 2})
    assert cfg.server == Inner(port=80, names=("a", "b"))
    assert cfg.rate == 2.0 and isinstance(cfg.rate, float)
    assert load(Outer, {"server": None}) == Outer()  # an empty section keeps its defaults
    assert load(Outer, {"rate": None, "server": {"port": None}}) == Outer()  # so does `key:`
    assert load(Outer, None) == Outer()


def test_unknown_key_lists_the_known_keys() -> None:
    with pytest.raises(ConfigError) as err:
        load(Outer, {"server": {"prot": 1}})
    assert str(err.value) == "server.prot: unknown key (known: mode, names, port)"
    assert err.value.key == "server.prot"
    with pytest.raises(ConfigError, match=r"^items\[0\]\.set_by_code: unknown key"):
        load(Outer, {"items": [{"url": "x", "set_by_code": "y"}]})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rate": "fast"}, "rate: expected a number, got 'fast'"),
        ({"rate": True}, "rate: expected a number, got True"),
        ({"rate": float("nan")}, "rate: expected a number, got nan"),
        ({"server": {"port": 8.5}}, "server.port: expected an integer, got 8.5"),
        ({"server": {"port": 70000}}, "server.port: expected a port number 0..65535, got 70000"),
        ({"server": {"mode": "c"}}, "server.mode: expected one of a, b, got 'c'"),
        ({"server": {"names": "a,b"}}, "server.names: expected a list, got 'a,b'"),
        ({"server": 3}, "server: expected a mapping, got 3"),
        ({"note": 5}, "note: expected a string or null, got 5"),
        ({"path": ""}, "path: expected a path, got ''"),
        ({"items": [{"weight": 2}]}, "items[0]: expected a mapping with url, got {'weight': 2}"),
    ],
)
def test_wrong_type_names_key_expected_and_value(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(Outer, data)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "rate: 1e9",
            "rate: expected a number (YAML 1.1 reads 1e9 as text: write 1.0e+9), got '1e9'",
        ),
        ("rate: 2.5e3", "rate: expected a number (YAML 1.1 reads 2.5e3 as text: write 2.5e+3)"),
        ("rate: 1.0e-3", ""),  # a dot and a signed exponent: a number already
        ("rate: -1E5", "rate: expected a number (YAML 1.1 reads -1E5 as text: write -1.0e+5)"),
        (
            "server: {port: 8e3}",
            "server.port: expected an integer (YAML 1.1 reads 8e3 as text: write 8000)",
        ),
        ("server: {port: 8.5e0}", "server.port: expected an integer, got '8.5e0'"),
        ("rate: fast", "rate: expected a number, got 'fast'"),
        ("rate: '12'", "rate: expected a number, got '12'"),
    ],
)
def test_a_yaml_11_exponent_read_as_text_says_how_to_write_it(
    tmp_path: Path, yaml_text: str, message: str
) -> None:
    """PyYAML (YAML 1.1) reads a float only with a dot and a signed exponent: `1e9` arrives
    as the string '1e9', and "expected a number, got '1e9'" alone reads as nonsense."""
    f = tmp_path / "c.yaml"
    f.write_text(yaml_text + "\n")
    if not message:
        assert load(Outer, load_yaml(f)).rate == 0.001
        return
    with pytest.raises(ConfigError) as err:
        load(Outer, load_yaml(f))
    assert str(err.value).startswith(message)
    hint = message.partition("write ")[2].partition(")")[0]
    if hint:  # the hint itself is what the same loader reads as the number
        fixed = tmp_path / "fixed.yaml"
        fixed.write_text(yaml_text.replace(yaml_text.split(":")[-1].strip(" }"), hint) + "\n")
        assert load(Outer, load_yaml(fixed)) is not None


def test_shorthand_internal_fields_and_dump_round_trip() -> None:
    cfg = load(Outer, {"items": ["http://a", {"url": "http://b", "weight": 2}]})
    assert cfg.items == (Item("http://a"), Item("http://b", 2.0))
    assert dump(cfg)["items"][0] == {"url": "http://a", "weight": 1.0}
    assert load(Outer, dump(cfg)) == cfg


def test_env_and_flag_text_is_parsed_by_type_and_errors_name_the_source(tmp_path: Path) -> None:
    f = tmp_path / "demo.yaml"
    f.write_text("rate: 3\nserver:\n  port: 1000\n")
    env = {"KVSPREAD_DEMO_SERVER_PORT": "2000", "KVSPREAD_DEMO_SERVER_NAMES": "x, y"}
    cfg = load(Outer, gather("demo", OUTER_SETTINGS, _outer_args(["--rate", "4.5"]), env, f))
    assert (cfg.rate, cfg.server.port, cfg.server.names) == (4.5, 2000, ("x", "y"))
    cfg = load(Outer, gather("demo", OUTER_SETTINGS, _outer_args([]), {}, f))
    assert (cfg.rate, cfg.server.port) == (3.0, 1000)
    bad_env = {"KVSPREAD_DEMO_SERVER_PORT": "http"}
    with pytest.raises(ConfigError) as err:
        load(Outer, gather("demo", OUTER_SETTINGS, _outer_args([]), bad_env, f))
    assert (
        str(err.value) == "KVSPREAD_DEMO_SERVER_PORT: server.port: expected an integer, got 'http'"
    )
    with pytest.raises(ConfigError) as err:
        load(Outer, gather("demo", OUTER_SETTINGS, _outer_args(["--port", "99999"]), {}, f))
    assert str(err.value) == "--port: server.port: expected a port number 0..65535, got 99999"
    f.write_text("server:\n  port: [1]\n")
    with pytest.raises(ConfigError) as err:
        load(Outer, gather("demo", OUTER_SETTINGS, _outer_args([]), {}, f))
    assert str(err.value) == f"{f}: server.port: expected an integer, got [1]"


def test_layered_origin_walks_up_to_the_section() -> None:
    m = Layered({"a": {"b": 1}}, "f.yaml")
    m.put("a.c", "2", "--c")
    assert m.origin("a.c") == "--c" and m.origin("a.b") == "f.yaml"
    assert m.origin("a.c[0].x") == "--c"
    assert m == {"a": {"b": 1, "c": "2"}}


def _error(fn, *args):  # noqa: ANN001, ANN202
    with pytest.raises(ConfigError) as err:
        fn(*args)
    return err.value


def test_error_wording_is_identical_across_parts() -> None:
    """The same mistake reads the same in every part: `KEY: expected WHAT, got VALUE`."""
    from bpf.config import from_mapping as collector
    from extender.config import ExtenderConfig
    from metrics_adapter.config import AdapterConfig
    from simulator.replay.config import ReplayConfig
    from simulator.serving.config import config_from_mapping as serving

    def tail(e: ConfigError) -> str:
        return str(e).split(": ", 1)[1]

    port = [
        _error(ExtenderConfig.from_mapping, {"server": {"port": "http"}}),
        _error(AdapterConfig.from_mapping, {"secure_port": "http"}),
        _error(collector, {"port": "http"}),
        _error(load, ReplayConfig, {"placement": {"jobs": "http"}}),
        _error(serving, {"cluster": {"nodes": "http"}}),
    ]
    # an optional field (placement.jobs: unset means the CPU count) adds "or null"
    assert {tail(e).replace(" or null", "") for e in port} == {"expected an integer, got 'http'"}
    assert [e.key for e in port] == [
        "server.port",
        "secure_port",
        "port",
        "placement.jobs",
        "cluster.nodes",
    ]
    level = [
        _error(ExtenderConfig.from_mapping, {"server": {"log_level": "loud"}}),
        _error(AdapterConfig.from_mapping, {"log_level": "loud"}),
        _error(collector, {"log_level": "loud"}),
    ]
    assert {tail(e) for e in level} == {"expected one of debug, info, warning, error, got 'loud'"}
    flag = [
        _error(ExtenderConfig.from_mapping, {"server": {"standalone": "yes"}}),
        _error(collector, {"standalone": "yes"}),
        _error(serving, {"cost": {"require_max_model_len_fits": "yes"}}),
    ]
    assert {tail(e) for e in flag} == {"expected true or false, got 'yes'"}
    unknown = [
        _error(ExtenderConfig.from_mapping, {"sever": {}}),
        _error(AdapterConfig.from_mapping, {"sever": 1}),
        _error(collector, {"sever": 1}),
        _error(serving, {"sever": 1}),
    ]
    assert all(str(e).startswith("sever: unknown key (known: ") for e in unknown)


def test_bounded_is_the_one_range_check_and_its_wording() -> None:
    """`bounded` names the (dotted) key, the rule and the value; `finite` refuses infinity."""
    from types import SimpleNamespace

    from kvspread.settings import bounded

    obj = SimpleNamespace(n=0, x=float("nan"), cost=SimpleNamespace(eta=-1.0), t=float("inf"))
    with pytest.raises(ConfigError, match=r"^n: expected an integer >= 1, got 0$"):
        bounded(obj, "n", at_least=1, what="an integer")
    with pytest.raises(ConfigError, match=r"^x: expected a number >= 0, got nan$"):
        bounded(obj, "x", at_least=0)
    with pytest.raises(ConfigError, match=r"^cost\.eta: expected a number > 0, got -1\.0$"):
        bounded(obj, "cost.eta", above=0)
    bounded(obj, "t", above=0)  # infinity is > 0 ...
    with pytest.raises(ConfigError, match=r"^t: expected a finite number > 0, got inf$"):
        bounded(obj, "t", above=0, what="a finite number", finite=True)  # ... unless finite
    bounded({"ok": 0.5}, "ok", above=0)  # a mapping's items too
    with pytest.raises(TypeError):
        bounded(obj, "n", above=0, at_least=0)


def test_ports_checks_the_range_and_lets_unset_pass() -> None:
    from types import SimpleNamespace

    from kvspread.settings import ports

    ports(SimpleNamespace(a=0, b=None, c=65535), "a", "b", "c")
    with pytest.raises(ConfigError, match=r"^c: expected a port number 0\.\.65535, got 65536$"):
        ports(SimpleNamespace(c=65536), "c")
    with pytest.raises(ConfigError, match=r"^a: expected a port number 1\.\.65535, got 0$"):
        ports(SimpleNamespace(a=0), "a", lowest=1)


@pytest.mark.parametrize(
    "value",
    ["notaurl", "ftp://host:21", "http://", "127.0.0.1:8001", "http://h:99999", "http://h:port"],
)
def test_http_urls_refuses_what_no_client_can_use(value: str) -> None:
    from types import SimpleNamespace

    from kvspread.settings import http_urls

    with pytest.raises(ConfigError, match=r"^u: expected an http:// or https:// URL with a host"):
        http_urls(SimpleNamespace(u=value), "u")


def test_every_part_checks_its_api_server_and_prometheus_urls_at_start() -> None:
    import subprocess
    import sys
    from types import SimpleNamespace

    from kvspread.settings import http_urls

    ok = SimpleNamespace(a="http://127.0.0.1:8001", b="https://kube.example:6443/", c=None)
    http_urls(ok, "a", "b", "c")
    for argv in (
        ["extender", "serve", "--kube-api-server", "notaurl"],
        ["router", "serve", "--pool-name", "p", "--kube-api-server", "notaurl"],
        ["adapter", "serve", "--kube-api-server", "notaurl"],
        ["adapter", "serve", "--prometheus-url", "notaurl"],
        ["collector", "run", "--kube-api-server", "notaurl"],
    ):
        out = subprocess.run(
            [sys.executable, "-m", "kvspread", *argv], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 2, (argv, out.stderr)
        assert "URL with a host (http://HOST:PORT), got 'notaurl'" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr


def test_an_unknown_variable_of_a_part_is_named_on_stderr(capsys: pytest.CaptureFixture) -> None:
    from kvspread.settings import warn_unknown_env

    settings = [Setting("server.port", "port")]
    env = {
        "KVSPREAD_EXTENDER_SERVER_PORT": "1",  # a setting's variable: quiet
        "KVSPREAD_EXTENDER_SERVER_PROT": "1",  # a typo: named
        "KVSPREAD_ROUTER_X": "1",  # another part's prefix: not this part's business
        "KVSPREAD_TRACEBACK": "1",
    }
    warn_unknown_env("extender", settings, env)
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "kvspread: warning: KVSPREAD_EXTENDER_SERVER_PROT is not a variable of kvspread "
        "extender (ignored): only the keys with a flag have one, and the command's --help "
        "lists them; set the others in the --config file"
    ]
    warn_unknown_env("collector", settings, {"KVSPREAD_COLLECTOR_OTLP_ENDPOINTS": "x"})
    assert capsys.readouterr().err == ""
